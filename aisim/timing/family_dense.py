"""Plan family: dense Qwen3 / Llama forward pass (docs/timing.md 3.1, 4).

Per layer: add_norm_1 -> qkv GEMM -> attention (GQA slices + fused extras) -> proj GEMM ->
add_norm_2 -> gate/up GEMM -> act -> down GEMM, with two allreduces over the tensor-parallel
group; embedding, the lm_head (bf16, m = requests), the embedding allreduce and the pipeline
hand-off once. Context phase first, then generation (every op at batch x (1 + nextn) tokens,
the layers scaled by L + nextn for the MTP head).
"""

from __future__ import annotations

from aisim.kernels import optime_pass as KP
from aisim.models import ModelArch
from aisim.timing.leaf_attention import deployment_attention
from aisim.timing.leaf_comm import absent_curve, allreduce_curve
from aisim.timing.leaf_empirical import empirical_leaves
from aisim.timing.leaf_gemm import GemmOp, gemm_sites, quantized_gemm
from aisim.timing.plan_record import Deployment, OpRow, PassPlan, allreduce_scalars, assemble
from aisim.timing.system import GpuSystem
from aisim.timing.tables import Tables

OP_NAMES = (
    "embedding",
    "add_norm_1",
    "qkv_gemm",
    "attention",
    "proj_gemm",
    "add_norm_2",
    "gate_ffn1_gemm",
    "act_gate",
    "ffn2_gemm",
    "logits_gemm",
    "embedding_ar",
    "ar_1",
    "ar_2",
    "p2p",
)


def build_dense_plan(
    model: ModelArch,
    tables: Tables,
    system: GpuSystem,
    deployment: Deployment,
    *,
    kv_cache_dtype: str = "bfloat16",
    fmha_dtype: str = "bfloat16",
    gemm_dtype: str | None = None,
) -> PassPlan:
    """Resolve the op plan of the dense LLAMA-family forward pass (docs/timing.md 3.1)."""
    deployment.check_mode()
    silicon = deployment.mode == "SILICON"
    t = int(deployment.tensor)
    h = model.hidden_size
    inter = model.intermediate_size
    d = model.head_dim
    n_heads = model.num_attention_heads // t
    n_kv = max(1, model.num_kv_heads // t)
    # an unquantized checkpoint's GEMMs are priced in bf16 whatever its torch_dtype (oracle:
    # float16 / float32 Qwen3-32B give the bf16 figures); quantized ones are refused upstream
    gemm_dtype = gemm_dtype or "bfloat16"
    gemm_ops = [
        quantized_gemm("qkv_gemm", n_heads * d + 2 * n_kv * d, h, gemm_dtype, False),
        quantized_gemm("proj_gemm", h, n_heads * d, gemm_dtype, True),
        quantized_gemm("gate_ffn1_gemm", 2 * inter // t, h, gemm_dtype, False),
        quantized_gemm("ffn2_gemm", h, inter // t, gemm_dtype, True),
        GemmOp("logits_gemm", model.vocab_size // t, h, "bfloat16"),  # lm_head is always bf16
    ]
    empirical = deployment.mode == "EMPIRICAL"
    gemm = gemm_sites(gemm_ops, tables if silicon else None, system)
    # EMPIRICAL draws its samples from the slices SILICON reads
    attention = deployment_attention(
        model,
        tables,
        system,
        deployment,
        silicon=silicon or empirical,
        kv_cache_dtype=kv_cache_dtype,
        fmha_dtype=fmha_dtype,
    )
    allreduce = allreduce_curve(tables, t, system) if silicon and t > 1 else absent_curve()
    leaves = empirical_leaves(model, tables, system, deployment, gemm[0], gemm_ops, attention)

    rows = []
    for phase in ("context", "generation"):
        layer = float(model.num_layers + (deployment.nextn if phase == "generation" else 0))
        once = layer / model.num_layers
        rows += [
            OpRow(phase, "embedding", KP.OP_MEM_TOKENS, None, 2.0 * h, once),
            OpRow(phase, "add_norm_1", KP.OP_MEM_TOKENS, None, 8.0 * h, layer),
            OpRow(phase, "qkv_gemm", KP.OP_GEMM_TOKENS, "qkv_gemm", 0.0, layer),
            OpRow(
                phase,
                "attention",
                KP.OP_ATTN_CONTEXT if phase == "context" else KP.OP_ATTN_GENERATION,
                None,
                0.0,
                layer,
            ),
            OpRow(phase, "proj_gemm", KP.OP_GEMM_TOKENS, "proj_gemm", 0.0, layer),
            OpRow(phase, "add_norm_2", KP.OP_MEM_TOKENS, None, 8.0 * h, layer),
            OpRow(phase, "gate_ffn1_gemm", KP.OP_GEMM_TOKENS, "gate_ffn1_gemm", 0.0, layer),
            OpRow(
                phase,
                "act_gate",
                KP.OP_MEM_TOKENS,
                None,
                (2 * inter // t + inter // t) * 2.0,
                layer,
            ),
            OpRow(phase, "ffn2_gemm", KP.OP_GEMM_TOKENS, "ffn2_gemm", 0.0, layer),
            OpRow(phase, "logits_gemm", KP.OP_GEMM_REQUESTS, "logits_gemm", 0.0, once),
            OpRow(phase, "embedding_ar", KP.OP_ALLREDUCE, None, float(h), once),
            OpRow(phase, "ar_1", KP.OP_ALLREDUCE, None, float(h), layer),
            OpRow(phase, "ar_2", KP.OP_ALLREDUCE, None, float(h), layer),
            OpRow(phase, "p2p", KP.OP_P2P, None, 2.0 * h, float(deployment.pipeline - 1) * once),
        ]
    assert tuple(r.name for r in rows[: len(OP_NAMES)]) == OP_NAMES
    return assemble(
        model.model_id,
        deployment,
        system,
        rows,
        gemm_ops,
        gemm,
        {**allreduce_scalars(system, t), **attention.scalars},
        context_attention=attention.context,
        generation_attention=attention.generation,
        allreduce=allreduce,
        **leaves,
    )
