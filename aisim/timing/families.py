"""Which plan family prices a model, and which table families it reads.

dense Qwen3 / Llama / MiMo                   aisim.timing.family_dense
MoE, GQA (Qwen3 MoE, Mixtral, MiniMax-M2,    aisim.timing.family_qwen3_moe
  gpt-oss)
Llama-4 (chunked layers, dense / MoE)        aisim.timing.family_llama4
DeepSeek-V3 / R1, Kimi-K2 (dense MLA)        aisim.timing.family_deepseek_mla
DeepSeek-V3.2, GLM-5 (DSA)                   aisim.timing.family_deepseek_dsa
"""

from __future__ import annotations

from aisim.errors import NotAvailableError
from aisim.models import LLAMA4, ModelArch
from aisim.timing import family_deepseek_dsa, family_deepseek_mla
from aisim.timing.plan_record import Deployment, PassPlan
from aisim.timing.system import GpuSystem
from aisim.timing.tables import FAMILIES, MOE_FAMILIES, Tables

# MiMo-7B is a Qwen2-shaped decoder (its MTP layers are priced only through engine.nextn)
DENSE_MODEL_TYPES = ("qwen3", "qwen2", "llama", "mistral", "mimo", "qwen3_vl_text")
# one MoE layer per decoder layer, no shared expert, GQA attention (full, or full and sliding
# window layers: gpt-oss): the graph family_qwen3_moe prices (Llama-4 has its own family;
# Qwen2-MoE's shared expert differs)
GQA_MOE_MODEL_TYPES = ("qwen3_moe", "mixtral", "minimax_m2", "gpt_oss", "qwen3_vl_moe_text")
KIMI_K2 = "kimi_k2"  # DeepseekV3ForCausalLM with 64 heads and 384 experts: the V3 plan
GLM_DSA = "glm_moe_dsa"  # GLM-5: DeepSeek-V3.2's DSA layers, its own module-table rows
# MLA model types -> plan builder (the DSA family's types are those its module tables key)
_DEEPSEEK = {
    **dict.fromkeys(family_deepseek_dsa.ARCHITECTURES, family_deepseek_dsa.build_deepseek_dsa_plan),
    family_deepseek_mla.MODEL_TYPE: family_deepseek_mla.build_deepseek_mla_plan,
    KIMI_K2: family_deepseek_mla.build_deepseek_mla_plan,
}


def is_moe_model(model: ModelArch) -> bool:
    return model.num_experts > 0


def table_families(model: ModelArch) -> tuple[str, ...]:
    """The op-time table families the model's plan family may read."""
    return MOE_FAMILIES if is_moe_model(model) else FAMILIES


def check_priced(model: ModelArch, where: str) -> None:
    """NotAvailableError for a model no family prices (MLA models: `build_plan`)."""
    if is_moe_model(model) and model.kv_lora_rank == 0:
        if model.model_type not in (*GQA_MOE_MODEL_TYPES, LLAMA4):
            raise NotAvailableError(
                f"{where}.timing: op-level timing for {model.model_id} "
                f"({model.model_type or 'unnamed'} MoE architecture) is not available yet in "
                f"aisim; MoE models with GQA attention priced so far: Qwen3 MoE, Mixtral, "
                "MiniMax-M2, gpt-oss, Llama-4 (fixed or polynomial timing works for any model)"
            )
        return
    if not is_moe_model(model) and model.model_type not in DENSE_MODEL_TYPES:
        raise NotAvailableError(
            f"{where}.timing: op-level timing for {model.model_id} ({model.model_type or 'MoE'} "
            "architecture) is not available yet in aisim; only dense Qwen3 / Llama / MiMo models "
            "are priced so far (fixed or polynomial timing works for any model)"
        )


def fmha_dtype(backend: str, model: ModelArch, kv_cache_dtype: str) -> str:
    """The attention kernels' dtype: TRT-LLM attends in fp8 when a quantized checkpoint keeps an
    fp8 KV cache, else in bf16 (a KV-only fp8 declaration included); vLLM always in bf16
    (observed: block-fp8 and NVFP4 Qwen3-32B and a KV-only fp8 one are exact only so)."""
    # a checkpoint quantizing its routed experts alone (gpt-oss MXFP4) attends in bf16 (oracle:
    # gpt-oss-120b TRT-LLM with kvcache_quant_mode fp8, context attention 2.319869 ms at 3,000
    # tokens; fp8 attention would be 2.263648)
    quantized = model.weight_quant and not model.experts_only_quant
    quantized = backend == "trtllm" and quantized and kv_cache_dtype == "fp8"
    return "fp8" if quantized else "bfloat16"


def build_plan(
    model: ModelArch, tables: Tables, system: GpuSystem, deployment: Deployment
) -> PassPlan:
    """The model's op plan from its family's builder."""
    from aisim.memory import default_quant_modes
    from aisim.timing.family_dense import build_dense_plan
    from aisim.timing.family_llama4 import build_llama4_plan
    from aisim.timing.family_qwen3_moe import build_qwen3_moe_plan

    # int4-expert checkpoints: bf16 GEMMs and KV (memory.default_quant_modes, as DeepSeekDtypes)
    gemm_dtype, moe_dtype, kv_dtype = default_quant_modes(model)
    gemm_q, moe_q, kv_q, fmha_q = deployment.quant_modes
    gemm_dtype, moe_dtype, kv_dtype = gemm_q or gemm_dtype, moe_q or moe_dtype, kv_q or kv_dtype
    fmha = fmha_q or fmha_dtype(deployment.backend, model, kv_dtype)
    # AISimulate rejects the engine config when the GPU has no tensor-core rate for a quant
    # mode (fp8 on an A100), before any pass and whatever the op tables hold
    moe = is_moe_model(model)
    for dtype in (gemm_dtype, kv_dtype, fmha, *((moe_dtype,) if moe else ())):
        if dtype not in ("bfloat16", "float16"):
            system.tensor_flops(dtype)
    if not moe:
        return build_dense_plan(
            model,
            tables,
            system,
            deployment,
            gemm_dtype=gemm_dtype,
            kv_cache_dtype=kv_dtype,
            fmha_dtype=fmha,
        )
    deployment.check_moe_mode(empirical=model.kv_lora_rank == 0 and model.model_type != LLAMA4)
    if model.kv_lora_rank == 0:
        build = build_llama4_plan if model.model_type == LLAMA4 else build_qwen3_moe_plan
        return build(
            model,
            tables,
            system,
            deployment,
            gemm_dtype=gemm_dtype,
            moe_dtype=moe_dtype,
            kv_cache_dtype=kv_dtype,
            fmha_dtype=fmha,
        )
    if model.model_type not in _DEEPSEEK:
        raise NotAvailableError(
            f"op-level timing for {deployment.where(model.model_id)}: model type "
            f"{model.model_type!r} has no attention module tables; MLA models priced so far: "
            f"{', '.join(_DEEPSEEK)}"
        )
    if model.model_type == GLM_DSA and model.weight_quant not in ("fp8_block", "", "nvfp4"):
        # block-fp8, bf16 and NVFP4 GLM-5 are priced (the module rows of their attention GEMM
        # dtype, kv_b's FLOPs at the bf16 rate in the off-grid bf16 module SOL); no others
        raise NotAvailableError(
            f"op-level timing for {deployment.where(model.model_id)}: GLM-5 with "
            f"{model.weight_quant or 'bfloat16'} weights is not available yet in aisim; use "
            "a block-fp8 (zai-org/GLM-5-FP8, zai-org/GLM-5.1-FP8), bf16 or NVFP4 checkpoint"
        )
    return _DEEPSEEK[model.model_type](model, tables, system, deployment)
