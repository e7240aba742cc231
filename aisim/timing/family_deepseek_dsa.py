"""Plan family: DeepSeek-V3.2 (MLA + DSA sparse attention, MoE; docs/timing.md 3.5, 4.8).

The attention of a layer is one measured module (q / kv low-rank projections, the DSA indexer,
the sparse MLA kernel and o_proj) from the `dsa_*_module` tables, keyed by architecture; the
context hold borrows every head count of the slice (optime_dsa). AISimulate keeps V3.2's shared
expert whole under attention-TP (vLLM and TRT-LLM), and prices no attention-TP allreduce op
(checked at TP 8, 2 x 1024 and 2 x 101). The rest of the layer: aisim.timing.deepseek_layers.
"""

from __future__ import annotations

from aisim.errors import NotAvailableError
from aisim.kernels import optime_pass as KP
from aisim.models import ModelArch
from aisim.timing.deepseek_layers import (
    DeepSeekAttention,
    DeepSeekDtypes,
    build_deepseek_plan,
    deepseek_gemms,
)
from aisim.timing.leaf_dsa import dsa_module_par, module_key, module_slice, with_hold_leaves
from aisim.timing.plan_record import Deployment, OpRow, PassPlan
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
    if model.shared_indexer_layers and deployment.backend == "vllm":
        # AISimulate prices them from the skip_indexer module rows beside the full layers'
        # (oracle: GLM-5.2 context attention 205.48 ms where every layer full gives 225.03):
        # a second DSA slice the plan does not have
        raise NotAvailableError(
            f"op-level timing for {where}: {model.shared_indexer_layers} of its DSA layers "
            "share another layer's indexer (indexer_types), which vLLM's module tables price "
            "apart and aisim not yet; use backend trtllm (priced exactly) or GLM-5 / GLM-5.1"
        )
    heads = model.num_attention_heads // deployment.tensor
    dtypes = DeepSeekDtypes.of(model, deployment.backend)
    gemms = deepseek_gemms(model, tables, system, deployment, SHARED_EXPERT_TP, [])
    key = module_key(
        model, "architecture", ARCHITECTURES[model.model_type], dtypes.attention, dtypes.kv
    )
    par = dsa_module_par(model, heads, dtypes.attention, dtypes.kv, system)
    context = module_slice(tables, CONTEXT_MODULE, key, heads, par, where)
    generation = module_slice(tables, GENERATION_MODULE, key, heads, par.copy(), where)
    # the context hold borrows every head count (optime_dsa)
    context = context._replace(par=with_hold_leaves(par, tables, CONTEXT_MODULE, key))
    part = DeepSeekAttention(
        context_op=OpRow(
            "context", "attention", KP.OP_DSA_CONTEXT, None, 0.0, float(model.num_layers)
        ),
        generation_name="attention",
        dsa_context=context,
        dsa_generation=generation,
    )
    return build_deepseek_plan(model, tables, system, deployment, gemms, SHARED_EXPERT_TP, part)
