"""Plan family: DeepSeek-V3.2 (MLA + DSA sparse attention, MoE; docs/timing.md 3.5, 4.8).

The attention of a layer is one measured module (q / kv low-rank projections, the DSA indexer,
the sparse MLA kernel and o_proj) from the `dsa_*_module` tables, keyed by architecture; the
context hold borrows every head count of the slice (optime_dsa). AISimulate keeps V3.2's shared
expert whole under attention-TP (vLLM and TRT-LLM), and prices no attention-TP allreduce op
(checked at TP 8, 2 x 1024 and 2 x 101). The rest of the layer: aisim.timing.deepseek_layers.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from aisim.kernels import optime_pass as KP
from aisim.kernels.optime_attention import GridSlice
from aisim.models import ModelArch
from aisim.timing.deepseek_layers import (
    DeepSeekAttention,
    DeepSeekDtypes,
    build_deepseek_plan,
    deepseek_gemms,
)
from aisim.timing.leaf_dsa import dsa_module_par, module_key, module_slice, with_hold_leaves
from aisim.timing.plan_record import SUM_MARK, Deployment, OpRow, PassPlan
from aisim.timing.system import GpuSystem
from aisim.timing.tables import Tables

MODEL_TYPE = "deepseek_v32"
CONTEXT_MODULE = "dsa_context_module"
GENERATION_MODULE = "dsa_generation_module"
ARCHITECTURE = "DeepseekV32ForCausalLM"  # the module tables' key for the model's rows
# other DSA models keyed by their own architecture in the module tables
ARCHITECTURES = {MODEL_TYPE: ARCHITECTURE, "glm_moe_dsa": "GlmMoeDsaForCausalLM"}  # by model type
SHARED_EXPERT_TP = 1


def build_deepseek_dsa_plan(
    model: ModelArch, tables: Tables, system: GpuSystem, deployment: Deployment
) -> PassPlan:
    deployment.check_moe_mode()
    where = deployment.where(model.model_id)
    deployment.moe_group_gpus(where)
    heads = model.num_attention_heads // deployment.tensor
    dtypes = DeepSeekDtypes.of(model, deployment.backend)
    gemms = deepseek_gemms(model, tables, system, deployment, SHARED_EXPERT_TP, [])
    key = module_key(
        model, "architecture", ARCHITECTURES[model.model_type], dtypes.attention, dtypes.kv
    )
    par = dsa_module_par(model, heads, dtypes.attention, dtypes.kv, system)
    context, generation = _module_slices(tables, key, heads, par, par, where)
    part = DeepSeekAttention(
        context_op=OpRow(
            "context", "attention", KP.OP_DSA_CONTEXT, None, 0.0, float(model.num_layers)
        ),
        generation_name="attention",
        dsa_context=context,
        dsa_generation=generation,
    )
    if model.shared_indexer_layers and deployment.backend == "vllm":
        # the skip rows' context SOL runs no indexer, their generation SOL is the full one
        skip_par = dsa_module_par(
            model, heads, dtypes.attention, dtypes.kv, system, skip_indexer=True
        )
        skip = _module_slices(tables, key, heads, skip_par, par, where, skip=True)
        part = _with_shared_indexer_layers(model, deployment, part, *skip)
    return build_deepseek_plan(model, tables, system, deployment, gemms, SHARED_EXPERT_TP, part)


def _module_slices(
    tables: Tables,
    key: dict,
    heads: int,
    context_par: np.ndarray,
    generation_par: np.ndarray,
    where: str,
    skip: bool = False,
) -> tuple[GridSlice, GridSlice]:
    """The context and generation module slices of the key's full-layer rows (`skip`: of its
    skip_indexer rows); the context hold borrows every head count (optime_dsa)."""
    context = module_slice(tables, CONTEXT_MODULE, key, heads, context_par, where, skip)
    generation = module_slice(
        tables, GENERATION_MODULE, key, heads, generation_par.copy(), where, skip
    )
    hold = with_hold_leaves(context_par, tables, CONTEXT_MODULE, key, skip)
    return context._replace(par=hold), generation


def _with_shared_indexer_layers(
    model: ModelArch,
    deployment: Deployment,
    part: DeepSeekAttention,
    skip_context: GridSlice,
    skip_generation: GridSlice,
) -> DeepSeekAttention:
    """vLLM prices the layers that reuse another layer's indexer (GLM-5.2 / 5.3
    `indexer_types` "shared") from the module tables' skip_indexer rows: a layer's module is
    w x full + (1 - w) x skip, w the fraction of layers that run their own indexer, in latency
    and energy, then times the layers (oracle: GLM-5.2 at attention-DP 8, 1 x 4096: context
    205.4847 ms, generation 10.0020, where every layer full gives 225.03 / 12.3162;
    docs/timing.md 3.5)."""
    full = (model.num_layers - model.shared_indexer_layers) / model.num_layers
    layers = float(model.num_layers)
    rows = []
    hidden = []
    for phase, kind, skip_kind, scale in (
        ("context", KP.OP_DSA_CONTEXT, KP.OP_DSA_CONTEXT_SKIP, layers),
        ("generation", KP.OP_DSA_GENERATION, KP.OP_DSA_GENERATION_SKIP, layers + deployment.nextn),
    ):
        block = f"{phase}_attention{SUM_MARK}"
        hidden += [
            OpRow("hidden", f"{block}full", kind, None, 0.0, full),
            OpRow("hidden", f"{block}skip", skip_kind, None, 0.0, 1.0 - full),
        ]
        rows.append(OpRow(phase, "attention", KP.OP_SUM, None, 2.0, scale))
    return dataclasses.replace(
        part,
        context_op=rows[0],
        generation_op=rows[1],
        hidden=hidden,
        dsa_context_skip=skip_context,
        dsa_generation_skip=skip_generation,
    )
