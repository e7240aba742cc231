"""Plan family: Llama-4 Scout / Maverick (docs/timing.md 3.4).

AISimulate 0.13 prices Llama-4 as two groups of half the layers each: `global` layers (full
attention, MoE FFN) and `swa` layers (chunked attention, read from the attention tables' rows
at window_size = attention_chunk_size; an MoE FFN when every layer is MoE (Scout), a dense FFN,
`swa_dense`, when MoE layers alternate with dense ones (Maverick)). Each group lists its own
ops: attn_norm, qkv / proj GEMMs, then moe_norm, router GEMM, dispatch, routed experts (the
moe table's power_law_1.01 rows; the shared expert is not priced) and combine, or ffn_norm,
gate_up GEMM, act and down GEMM. One reported `attention` op sums both groups' lookups; the
lm_head is priced in both phases; there is no embedding allreduce and no per-layer allreduce.
"""

from __future__ import annotations

from aisim.errors import NotAvailableError
from aisim.kernels import optime_pass as KP
from aisim.models import ModelArch
from aisim.timing.family_qwen3_moe import assemble_gqa_moe, gqa_moe_leaves, routed_rows
from aisim.timing.leaf_gemm import GemmOp, quantized_gemm
from aisim.timing.plan_record import Deployment, OpRow, PassPlan, attention_rows
from aisim.timing.system import GpuSystem
from aisim.timing.tables import Tables

MOE_DISTRIBUTION = "power_law_1.01"  # the moe rows Llama-4 reads (oracle: 1.2 is 9 % off)


def build_llama4_plan(
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
    deployment.check_moe_mode()
    where = deployment.where(model.model_id)
    if model.moe_layer_step not in (1, 2) or model.num_layers % 2:
        raise NotAvailableError(
            f"op-level timing for {where}: Llama-4 with {model.num_layers} layers and an MoE "
            f"layer every {model.moe_layer_step} is not available yet in aisim; priced: an even "
            "layer count with every layer MoE (Scout) or every other (Maverick)"
        )
    t = int(deployment.tensor)
    adp = int(deployment.attention_dp)
    h = model.hidden_size
    heads = model.num_attention_heads // t
    n_kv = max(1, model.num_kv_heads // t)
    d = model.head_dim
    dense_inter = model.dense_intermediate_size // t
    gemm_ops = [
        quantized_gemm("qkv_gemm", heads * d + 2 * n_kv * d, h, gemm_dtype, False),
        quantized_gemm("proj_gemm", h, heads * d, gemm_dtype, True),
        GemmOp("router_gemm", model.num_experts, h, "bfloat16"),
        quantized_gemm("gate_up_gemm", 2 * dense_inter, h, gemm_dtype, False),
        quantized_gemm("down_gemm", h, dense_inter, gemm_dtype, True),
        GemmOp("logits_gemm", model.vocab_size // t, h, "bfloat16"),
    ]
    if model.moe_layer_step == 1:
        gemm_ops = [g for g in gemm_ops if g.name not in ("gate_up_gemm", "down_gemm")]
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
    half = float(model.num_layers // 2)

    def moe_ffn(phase: str, group: str, layers: float) -> list[OpRow]:
        return [
            OpRow(phase, f"{group}_moe_norm", KP.OP_MEM_TOKENS, None, 8.0 * h, layers),
            *routed_rows(phase, f"{group}_", model, adp, leaves.gather, layers),
        ]

    def dense_ffn(phase: str, group: str, layers: float) -> list[OpRow]:
        return [
            OpRow(phase, f"{group}_ffn_norm", KP.OP_MEM_TOKENS, None, 8.0 * h, layers),
            OpRow(phase, f"{group}_gate_up_gemm", KP.OP_GEMM_TOKENS, "gate_up_gemm", 0.0, layers),
            OpRow(phase, f"{group}_act", KP.OP_MEM_TOKENS, None, 3.0 * dense_inter * 2.0, layers),
            OpRow(phase, f"{group}_down_gemm", KP.OP_GEMM_TOKENS, "down_gemm", 0.0, layers),
        ]

    rows: list[OpRow] = []
    hidden: list[OpRow] = []
    swa = "swa" if model.moe_layer_step == 1 else "swa_dense"
    for phase in ("context", "generation"):
        layers = float(model.num_layers + (deployment.nextn if phase == "generation" else 0))
        once = layers / model.num_layers
        group = half * once
        attn, banded = attention_rows(phase, layers, model.num_layers, model.banded_layers)
        hidden += banded
        rows.append(OpRow(phase, "embedding", KP.OP_MEM_TOKENS, None, 2.0 * h, once))
        for name, ffn in (("global", moe_ffn), (swa, moe_ffn if swa == "swa" else dense_ffn)):
            rows += [
                OpRow(phase, f"{name}_attn_norm", KP.OP_MEM_TOKENS, None, 8.0 * h, group),
                OpRow(phase, f"{name}_qkv_gemm", KP.OP_GEMM_TOKENS, "qkv_gemm", 0.0, group),
                OpRow(phase, f"{name}_proj_gemm", KP.OP_GEMM_TOKENS, "proj_gemm", 0.0, group),
                *ffn(phase, name, group),
            ]
        rows += [
            attn,
            OpRow(phase, "logits_gemm", KP.OP_GEMM_REQUESTS, "logits_gemm", 0.0, once),
            OpRow(phase, "p2p", KP.OP_P2P, None, 2.0 * h, float(deployment.pipeline - 1) * once),
        ]
    return assemble_gqa_moe(model, system, deployment, rows + hidden, gemm_ops, leaves, tables)
