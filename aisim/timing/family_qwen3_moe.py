"""Plan family: MoE with GQA attention: Qwen3 MoE and Mixtral (docs/timing.md 3.4).

The attention block is the dense family's (same leaf builder: GQA slices, qk-norm extras where
the model has them); the FFN becomes router GEMM, dispatch, routed experts at global tokens =
local x attention-DP, and combine. The embedding's
allreduce over the attention-TP group is listed (0 at TP 1), and the lm_head is priced in
decode only (AISimulate's MoE family has no context lm_head). In the EMPIRICAL mode the plan
also carries the util samples (aisim.timing.leaf_empirical).
"""

from __future__ import annotations

from typing import NamedTuple

from aisim.errors import OpTableError
from aisim.kernels import optime_pass as KP
from aisim.kernels.optime_moe import MoeCurve
from aisim.models import ModelArch
from aisim.timing.leaf_attention import GqaAttention, banded_leaves, deployment_attention
from aisim.timing.leaf_dispatch import DispatchCurves, dispatch_curves, gather_scale
from aisim.timing.leaf_empirical import borrowing_refusal, empirical_leaves
from aisim.timing.leaf_gemm import GemmOp, gemm_sites, quantized_gemm
from aisim.timing.leaf_moe import moe_curve
from aisim.timing.plan_record import (
    Deployment,
    OpRow,
    PassPlan,
    allreduce_scalars,
    assemble,
    attention_rows,
)
from aisim.timing.system import GpuSystem
from aisim.timing.tables import Tables

MOE_DISTRIBUTION = "power_law_1.2"  # the token routing of the moe table these models read


class GqaMoeLeaves(NamedTuple):
    """The leaves of a GQA-attention MoE rank: attention slices, routed experts, dispatch."""

    attention: GqaAttention
    moe: MoeCurve
    comm: DispatchCurves
    gather: float  # the pre-dispatch all_gather's message per bf16 element
    num_gpus: int  # the MoE group


def gqa_moe_leaves(
    model: ModelArch,
    tables: Tables,
    system: GpuSystem,
    deployment: Deployment,
    *,
    moe_dtype: str,
    distribution: str,
    kv_cache_dtype: str,
    fmha_dtype: str,
) -> GqaMoeLeaves:
    where = deployment.where(model.model_id)
    num_gpus = deployment.moe_group_gpus(where)
    t, adp = int(deployment.tensor), int(deployment.attention_dp)
    attention = deployment_attention(
        model,
        tables,
        system,
        deployment,
        silicon=True,
        kv_cache_dtype=kv_cache_dtype,
        fmha_dtype=fmha_dtype,
    )
    try:
        moe = moe_curve(
            tables,
            model,
            dtype=moe_dtype,
            distribution=distribution,
            moe_tp=deployment.moe_tensor,
            moe_ep=deployment.moe_expert,
            attention_dp=adp,
            system=system,
            where=where,
        )
    except OpTableError as exc:
        raise borrowing_refusal(
            exc, ("xshape", "xquant", "xprofile"), deployment, tables, "moe"
        ) from None
    comm = dispatch_curves(tables, deployment.backend, t, adp, num_gpus, where, system)
    gather = gather_scale(deployment.backend, moe_dtype, adp, system)
    return GqaMoeLeaves(attention, moe, comm, gather, num_gpus)


def routed_rows(
    phase: str, prefix: str, model: ModelArch, adp: int, gather: float, layers: float
) -> list[OpRow]:
    """Router GEMM, dispatch, routed experts and combine of `layers` layers, named prefix+op."""
    h = model.hidden_size
    return [
        OpRow(phase, f"{prefix}router_gemm", KP.OP_GEMM_TOKENS, "router_gemm", 0.0, layers),
        OpRow(
            phase,
            f"{prefix}moe_pre_dispatch",
            KP.OP_NCCL_ALL_GATHER,
            None,
            h * adp * gather,
            layers,
        ),
        OpRow(phase, f"{prefix}moe", KP.OP_MOE, None, 0.0, layers),
        OpRow(
            phase,
            f"{prefix}moe_post_dispatch",
            KP.OP_NCCL_REDUCE_SCATTER,
            None,
            float(h * adp),
            layers,
        ),
    ]


def assemble_gqa_moe(
    model: ModelArch,
    system: GpuSystem,
    deployment: Deployment,
    rows: list[OpRow],
    gemm_ops: list[GemmOp],
    leaves: GqaMoeLeaves,
    tables: Tables,
) -> PassPlan:
    """The plan of `rows` (hidden rows last) over the GQA MoE leaves."""
    attention, comm = leaves.attention, leaves.comm
    # EMPIRICAL reads no silicon GEMM rows (a dtype without its own rows is borrowed)
    gemm = gemm_sites(gemm_ops, tables if deployment.mode != "EMPIRICAL" else None, system)
    empirical = empirical_leaves(
        model,
        tables,
        system,
        deployment,
        gemm[0],
        gemm_ops,
        attention,
        leaves.moe,
        leaves.num_gpus,
    )
    scalars = {
        **allreduce_scalars(system, int(deployment.tensor)),
        **attention.scalars,
        "dispatch_gpus": leaves.num_gpus,
        "dispatch_bw": system.group_bw(leaves.num_gpus),
        "dispatch_allreduce": comm.with_allreduce,
    }
    return assemble(
        model.model_id,
        deployment,
        system,
        rows,
        gemm_ops,
        gemm,
        scalars,
        context_attention=attention.context,
        generation_attention=attention.generation,
        **banded_leaves(attention),
        allreduce=comm.allreduce,
        all_gather=comm.all_gather,
        reduce_scatter=comm.reduce_scatter,
        moe=leaves.moe,
        **empirical,
    )


def build_qwen3_moe_plan(
    model: ModelArch,
    tables: Tables,
    system: GpuSystem,
    deployment: Deployment,
    *,
    gemm_dtype: str = "bfloat16",
    moe_dtype: str = "bfloat16",
    kv_cache_dtype: str = "bfloat16",
    fmha_dtype: str = "bfloat16",
) -> PassPlan:
    deployment.check_moe_mode(empirical=True)
    t = int(deployment.tensor)
    adp = int(deployment.attention_dp)
    h = model.hidden_size
    heads = model.num_attention_heads // t
    n_kv = max(1, model.num_kv_heads // t)
    d = model.head_dim
    gemm_ops = [
        quantized_gemm("qkv_gemm", heads * d + 2 * n_kv * d, h, gemm_dtype, False),
        quantized_gemm("proj_gemm", h, heads * d, gemm_dtype, True),
        GemmOp("router_gemm", model.num_experts, h, "bfloat16"),
        GemmOp("logits_gemm", model.vocab_size // t, h, "bfloat16"),
    ]
    leaves = gqa_moe_leaves(
        model,
        tables,
        system,
        deployment,
        moe_dtype=moe_dtype,
        distribution=MOE_DISTRIBUTION,
        kv_cache_dtype=kv_cache_dtype,
        fmha_dtype=fmha_dtype,
    )

    rows: list[OpRow] = []
    hidden: list[OpRow] = []
    for phase in ("context", "generation"):
        layer = float(model.num_layers + (deployment.nextn if phase == "generation" else 0))
        once = layer / model.num_layers
        attn, banded = attention_rows(phase, layer, model.num_layers, model.banded_layers)
        hidden += banded
        rows += [
            OpRow(phase, "embedding", KP.OP_MEM_TOKENS, None, 2.0 * h, once),
            OpRow(phase, "add_norm_1", KP.OP_MEM_TOKENS, None, 8.0 * h, layer),
            OpRow(phase, "qkv_gemm", KP.OP_GEMM_TOKENS, "qkv_gemm", 0.0, layer),
            attn,
            OpRow(phase, "proj_gemm", KP.OP_GEMM_TOKENS, "proj_gemm", 0.0, layer),
            OpRow(phase, "add_norm_2", KP.OP_MEM_TOKENS, None, 8.0 * h, layer),
            *routed_rows(phase, "", model, adp, leaves.gather, layer),
            OpRow(phase, "embedding_ar", KP.OP_ALLREDUCE, None, float(h), once),
        ]
        if phase == "generation":
            rows.append(OpRow(phase, "logits_gemm", KP.OP_GEMM_REQUESTS, "logits_gemm", 0.0, once))
        rows.append(
            OpRow(phase, "p2p", KP.OP_P2P, None, 2.0 * h, float(deployment.pipeline - 1) * once)
        )
    return assemble_gqa_moe(model, system, deployment, rows + hidden, gemm_ops, leaves, tables)
