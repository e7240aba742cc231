"""KV capacity from GPU memory: ``kv_cache.capacity: {type: default, ...}`` (docs/timing.md 7).

Each scheduler rank (every attention-DP rank of every replica) gets the KV blocks that fit in
one GPU after the resident weights W, the activation workspace A, the communication buffers N,
the runtime overhead R and the CUDA-graph reservation G::

    nonKV  = W + R + N + 0 + A + G                  (float64, in this order)
    vLLM   : budget = Cap * f - nonKV               (f of the whole GPU)
    TRT-LLM: budget = (Cap - nonKV) * f             (f of the free memory)
    tokens = floor(budget / kv_bytes_per_token);  blocks = tokens // block_size

W is the resident weight bytes of the context op list divided by pp; A is sized from the
role's max_batched_tokens alone; N is keyed by the tensor degree only.  max_sequences, the
context length and MTP (nextn) do not enter.  Every figure was checked against AISimulate 0.13
(``predict --detail memory``); the pinned cases are in tests/golden_memory/.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aisim.errors import CapacityError, ConfigError, NotAvailableError
from aisim.models import (
    INDEXER_WEIGHTS,
    LLAMA4,
    WINDOWED_KV_MODEL_TYPES,
    ModelArch,
    attention_excluded_on,
)

# b200_sxm system constants (misc.nccl_mem and misc.other_mem of the silicon system yaml);
# the caller passes the compiled system's values, these are only the defaults.
B200_NCCL_MEM_BYTES: Mapping[int, int] = {1: 0, 2: 358_612_992, 4: 411_041_792, 8: 411_041_792}
B200_RUNTIME_OVERHEAD_BYTES = 3_758_096_384  # 3.5 GiB
ACTIVATION_FLOOR_BYTES = 70 * 1024 * 1024
DEFAULT_MEMORY_FRACTION = 0.9  # vLLM and TRT-LLM

# Activation coefficient by model family and min(tensor, 8); identical for vLLM and TRT-LLM.
_ACT_COEFF: Mapping[str, Mapping[int, float]] = {
    "dense": {1: 11.0, 2: 6.5, 4: 5.0, 8: 5.0},  # LLAMA family (Qwen3 dense, Llama)
    "moe": {1: 22.0, 2: 13.0, 4: 10.0, 8: 10.0},  # MOE, DEEPSEEK, DEEPSEEKV32
    # Qwen3-VL language models, dense and MoE alike (oracle: VL-2B / 8B / 32B at TP 1-8,
    # VL-30B-A3B at TP 1 / 2 / 4)
    "vl": {1: 10.0, 2: 6.0, 4: 5.0, 8: 5.0},
}
VL_MODEL_TYPES = ("qwen3_vl_text", "qwen3_vl_moe_text")

# Bytes per element of a GEMM / MoE / KV quantization mode.
_QUANT_BYTES: Mapping[str, float] = {
    "bfloat16": 2.0,
    "bf16": 2.0,
    "float16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "fp8_block": 1.0,
    "fp8_static": 1.0,
    "int8": 1.0,
    "int8_wo": 1.0,
    "nvfp4": 0.5625,
    "int4": 0.5,
    "int4_wo": 0.5,
    "mxfp4": 0.5,
    "w4a16": 0.5,
    "w4a16_mxfp4": 0.5,
}


def quant_bytes(mode: str, what: str) -> float:
    try:
        return _QUANT_BYTES[mode]
    except KeyError:
        known = ", ".join(sorted(_QUANT_BYTES))
        raise ConfigError(
            f"engine.{what}: unknown quantization {mode!r}; use one of {known}"
        ) from None


def model_family(model: ModelArch) -> str:
    """'dense' (Qwen3 / Llama), 'moe' (Qwen3 MoE), 'deepseek' (MLA) or 'deepseek_v32' (MLA+DSA)."""
    if model.kv_lora_rank > 0:
        if model.num_experts == 0:
            raise NotAvailableError(
                f"engine.model: {model.model_id}: MLA without MoE has no memory model; use a "
                "fixed KV capacity (kv_cache.capacity: {type: fixed, blocks: N})"
            )
        return "deepseek_v32" if model.index_n_heads > 0 else "deepseek"
    return "moe" if model.num_experts > 0 else "dense"


def default_quant_modes(model: ModelArch) -> tuple[str, str, str]:
    """(gemm, moe, kv) quantization of the checkpoint: the weights' algorithm; the KV cache at
    its declared dtype, else fp8 when the weights are quantized."""
    if model.experts_only_quant:
        # int4 routed experts beside bf16 GEMMs: the KV cache stays bf16 unless declared
        return "bfloat16", model.weight_quant, model.kv_cache_quant or "bfloat16"
    weights = model.weight_quant or "bfloat16"
    kv = model.kv_cache_quant or ("fp8" if model.weight_quant else "bfloat16")
    # static per-tensor fp8 concerns the GEMMs' activation scales; experts run plain fp8
    return weights, "fp8" if weights == "fp8_static" else weights, kv


def weights_bytes(
    model: ModelArch,
    family: str,
    *,
    tensor: int,
    pipeline: int,
    moe_tensor: int,
    moe_expert: int,
    gemm_bytes: float,
    moe_bytes: float,
    backend: str = "vllm",
) -> float:
    """Resident weights of one rank (context op list / pp); norms count 0, vocab GEMMs bf16."""
    h, tp = model.hidden_size, tensor
    vocab_tp = (model.vocab_size // tp) * h * 2.0
    if family in ("deepseek", "deepseek_v32"):
        # every layer priced as an MoE layer (the dense first layers get no special case)
        groups = _mla_projection_weights(model, model.num_attention_heads // tp)
        if family == "deepseek_v32":  # DSA indexer (wq_b, weights_proj)
            groups[INDEXER_WEIGHTS] = (
                model.q_lora_rank * model.index_n_heads * model.index_head_dim
                + h * model.index_n_heads
            )
        attn = sum(groups.values())
        # shared expert: split by TP for DeepSeek-V3/R1, by moe_tensor for V3.2 [observed]
        shared_split = tp if family == "deepseek" else moe_tensor
        shared_bf16 = model.weight_quant == "nvfp4" and model.shared_experts_excluded
        shared_bytes = 2.0 if shared_bf16 else gemm_bytes
        layer = (
            _attention_bytes(model, backend, groups, attn, gemm_bytes)
            + 3
            * model.moe_intermediate_size
            * h
            * model.num_shared_experts
            * shared_bytes
            / shared_split
            + h * model.num_experts * 2.0
            + _routed(model, moe_tensor, moe_expert) * moe_bytes
        )
        # embedding kept whole, LM head split by TP
        vocab = model.vocab_size * h * 2.0 + vocab_tp
        return (model.num_layers * layer + vocab) / pipeline
    d = model.head_dim
    q = (model.num_attention_heads // tp) * d
    kv = 2 * -(-model.num_kv_heads // tp) * d
    attn = ((q + kv) * h + h * q) * gemm_bytes  # qkv, o_proj
    if family == "moe" and model.model_type == LLAMA4:
        # MoE layers every moe_layer_step-th (router + routed experts; the shared expert is
        # not counted), dense FFNs split by TP between them, the embedding kept whole
        # (oracle: Maverick TP8 x EP8 101,260,738,560 B, Scout TP4 x EP4 52,422,410,240 B)
        moe_layers = model.num_layers // model.moe_layer_step
        dense = 3 * model.dense_intermediate_size * h / tp * gemm_bytes
        experts = h * model.num_experts * 2.0 + _routed(model, moe_tensor, moe_expert) * moe_bytes
        total = model.num_layers * attn + moe_layers * experts
        total += (model.num_layers - moe_layers) * dense
        return (total + model.vocab_size * h * 2.0 + vocab_tp) / pipeline
    if family == "moe":
        layer = (
            attn + h * model.num_experts * 2.0 + _routed(model, moe_tensor, moe_expert) * moe_bytes
        )
        if model.num_shared_experts:  # none in Qwen3 MoE; split as DeepSeek-V3.2 (unverified)
            layer += (
                3
                * model.moe_intermediate_size
                * h
                * model.num_shared_experts
                * gemm_bytes
                / moe_tensor
            )
        return (model.num_layers * layer + vocab_tp) / pipeline  # one vocab GEMM
    inter = model.intermediate_size / tp
    layer = attn + (2 * inter * h + h * inter) * gemm_bytes  # gate+up, down
    return (model.num_layers * layer + vocab_tp + vocab_tp) / pipeline  # embedding + LM head


def _mla_projection_weights(model: ModelArch, n_loc: int) -> dict[str, int]:
    """Weights of an MLA layer's projection groups on one rank of n_loc heads: q (q_a, q_b),
    kv (kv_a, kv_b) and o (o_proj)."""
    h = model.hidden_size
    qk = model.qk_nope_head_dim + model.qk_rope_head_dim
    return {
        "q": h * model.q_lora_rank + model.q_lora_rank * n_loc * qk,
        "kv": h * (model.kv_lora_rank + model.qk_rope_head_dim)
        + model.kv_lora_rank * n_loc * (model.qk_nope_head_dim + model.v_head_dim),
        "o": n_loc * model.v_head_dim * h,
    }


def _attention_bytes(
    model: ModelArch, backend: str, groups: dict[str, int], attn: float, gemm_bytes: float
) -> float:
    """Resident bytes of an MLA layer's `attn` attention weights: an fp8_block or NVFP4
    checkpoint's exclusion lists keep projection groups bf16 (oracle: Kimi-K2.5-NVFP4 counts
    its whole attention at 2 bytes, GLM-5-FP8 with o_proj alone excluded its o_proj, on TRT-LLM
    its whole block; docs/timing.md 7.2)."""
    if model.weight_quant not in ("nvfp4", "fp8_block"):
        return attn * gemm_bytes
    excluded = attention_excluded_on(model, backend)
    if excluded >= {"q", "kv", "o", "indexer"}:
        return attn * 2.0
    kept = float(sum(w for g, w in groups.items() if g in excluded))
    return (attn - kept) * gemm_bytes + kept * 2.0


def _routed(model: ModelArch, moe_tensor: int, moe_expert: int) -> float:
    return (
        3
        * model.hidden_size
        * model.moe_intermediate_size
        * model.num_experts
        / (moe_tensor * moe_expert)
    )


def activations_bytes(
    model: ModelArch,
    family: str,
    *,
    tensor: int,
    attention_data: int,
    moe_expert: int,
    max_batched_tokens: int,
) -> float:
    """Activation workspace from the pass token budget T alone, floored at 70 MiB."""
    # Llama-4 takes the dense coefficients (oracle: Scout TP4 and Maverick TP8, 838,860,800 B
    # at 16,384 tokens)
    dense = family == "dense" or model.model_type == LLAMA4
    kind = "vl" if model.model_type in VL_MODEL_TYPES else "dense" if dense else "moe"
    coeffs = _ACT_COEFF[kind]
    key = min(tensor, 8)
    if key not in coeffs:
        raise NotAvailableError(
            f"engine.workers.*.parallelism.tensor: {tensor} has no activation coefficient in "
            "the memory model (tensor 1, 2, 4 or >= 8); use a fixed KV capacity"
        )
    t = max_batched_tokens
    hd = model.num_attention_heads * model.head_dim  # head_dim: hidden/heads for DeepSeek
    act = 2 * t * hd * coeffs[key]
    if family in ("deepseek", "deepseek_v32"):
        act += (
            t
            * hd
            * attention_data
            * model.num_experts
            * model.num_experts_per_tok
            / moe_expert
            / 128
            * 4
        )
    return max(act, float(ACTIVATION_FLOOR_BYTES))


def kv_bytes_per_token(
    model: ModelArch, family: str, *, tensor: int, kv_bytes: float, decode_context: int = 1
) -> float:
    """KV bytes of one token on one rank: the whole model's layers (not divided by pp)."""
    if family == "deepseek_v32":
        per_layer = (
            model.kv_lora_rank * kv_bytes
            + model.qk_rope_head_dim * 2
            + model.index_head_dim
            + -(-model.index_head_dim // 128) * 4
        )
    elif family == "deepseek":
        per_layer = (model.kv_lora_rank + model.qk_rope_head_dim) * kv_bytes
    else:
        per_layer = -(-model.num_kv_heads // tensor) * model.head_dim * 2 * kv_bytes
    total = model.num_layers * per_layer
    return total / decode_context if decode_context > 1 else total


def _kv_tokens(model: ModelArch, budget: float, kv_tok: float) -> float:
    """Tokens of KV the budget holds. The sliding-window layers of a banded model keep at most
    a window of tokens, so the budget first holds one window of theirs and then tokens of the
    full layers alone (oracle: gpt-oss-120b at TP 4, 16,707,701 tokens from a 153,979,359,232 B
    budget = (budget - 128 x 9,216) // 9,216)."""
    if not model.banded_layers or model.model_type not in WINDOWED_KV_MODEL_TYPES:
        return budget // kv_tok  # Llama-4's chunked layers keep every token (oracle)
    banded = kv_tok * model.banded_layers / model.num_layers
    return (budget - model.sliding_window * banded) // (kv_tok - banded)


def checkpoint_kv_bytes_per_token(model: ModelArch, tensor: int) -> int:
    """KV bytes per token on one rank at the checkpoint's default KV dtype (bytes_per_token:
    auto); dense, MoE and MLA models alike."""
    kv_q = default_quant_modes(model)[2]
    return int(
        kv_bytes_per_token(
            model,
            model_family(model),
            tensor=tensor,
            kv_bytes=quant_bytes(kv_q, "kvcache_quant_mode"),
        )
    )


def transfer_kv_bytes_per_token(model: ModelArch, tensor: int, kvcache_quant_mode: str = "") -> int:
    """P/D `kv_transfer.bytes_per_token: auto`: KV bytes of one token on one source rank at the
    checkpoint's dtype (torch_dtype), whatever the checkpoint's KV cache quantization [observed:
    AISimulate's lowered spec has 61 x 576 x 2 = 70272 for DeepSeek-V3 and V3.2 (fp8 KV cache,
    no indexer keys), at prefill TP 1 and 8], or at the source role's `kvcache_quant_mode`
    when one is set [observed: fp8 halves the transfer of Qwen3-8B at 25 GB/s]."""
    elem = _QUANT_BYTES[kvcache_quant_mode] if kvcache_quant_mode else model.dtype_bytes
    family = model_family(model)
    if family in ("deepseek", "deepseek_v32"):
        return int(model.num_layers * (model.kv_lora_rank + model.qk_rope_head_dim) * elem)
    return int(kv_bytes_per_token(model, family, tensor=tensor, kv_bytes=elem))


@dataclass(frozen=True)
class MemoryBreakdown:
    """Every term of the capacity estimate of one rank (bytes unless named otherwise)."""

    backend: str
    family: str
    gpu_memory_bytes: int
    memory_fraction: float
    weights_bytes: float
    activations_bytes: float
    comm_overhead_bytes: int
    runtime_overhead_bytes: int
    reserved_bytes: int
    cuda_graph_reserved_bytes: int
    non_kv_bytes: float
    kv_budget_bytes: float  # unrounded
    kv_bytes_per_token: float
    kv_quant_mode: str
    kv_tokens: int
    block_size: int
    blocks: int

    def as_dict(self) -> dict[str, Any]:
        """The fields of AISimulate's ``memory_diagnostics.<role>`` (``--detail memory``)."""
        return {
            "estimated_num_gpu_blocks": self.blocks,
            "kv_size_per_token_bytes": _int(self.kv_bytes_per_token),
            "kvcache_quant_mode": self.kv_quant_mode,
            "memory_breakdown": {
                "activations_bytes": _int(self.activations_bytes),
                "comm_overhead_bytes": self.comm_overhead_bytes,
                "cuda_graph_reserved_bytes": self.cuda_graph_reserved_bytes,
                "reserved_bytes": self.reserved_bytes,
                "runtime_overhead_bytes": self.runtime_overhead_bytes,
                "weights_bytes": _int(self.weights_bytes),
            },
            "scheduler_block_size_tokens": self.block_size,
            "scope": "capacity_estimate_per_rank",
            "source": "native",
            "stage": "before_native_capacity_adjustments",
            "status": "available",
            "tolerance_adjusted": None,
            "total_gpu_capacity_bytes": self.gpu_memory_bytes,
            "total_kv_size_bytes": _int(self.kv_budget_bytes),
            "total_kv_size_tokens": self.kv_tokens,
        }

    def lines(self) -> list[str]:
        """A small table of the terms, for ``aisim estimate --detail memory``."""
        gib = 1024.0**3
        rule = "f x GPU - non-KV" if self.backend == "vllm" else "(GPU - non-KV) x f"
        rows = [
            ("GPU memory", self.gpu_memory_bytes),
            ("weights", self.weights_bytes),
            ("activations", self.activations_bytes),
            ("communication buffers", self.comm_overhead_bytes),
            ("runtime overhead", self.runtime_overhead_bytes),
            ("CUDA graphs (reserved)", self.cuda_graph_reserved_bytes),
            ("non-KV total", self.non_kv_bytes),
            (f"KV budget ({rule}, f={self.memory_fraction:g})", self.kv_budget_bytes),
        ]
        out = [f"KV capacity per rank ({self.backend}, {self.family} model)"]
        out += [f"  {name:<40} {_int(v):>17,d} B  {v / gib:9.3f} GiB" for name, v in rows]
        out.append(
            f"  {'KV bytes per token (' + self.kv_quant_mode + ')':<40} "
            f"{_int(self.kv_bytes_per_token):>17,d} B"
        )
        out.append(f"  {'KV tokens':<40} {self.kv_tokens:>17,d}")
        out.append(f"  {f'KV blocks of {self.block_size} tokens':<40} {self.blocks:>17,d}")
        return out


def _int(value: float) -> int:
    return int(value)


def kv_blocks_from_memory(
    model: ModelArch,
    *,
    backend: str,
    block_size: int,
    tensor: int = 1,
    pipeline: int = 1,
    attention_data: int = 1,
    moe_tensor: int = 1,
    moe_expert: int = 1,
    memory_fraction: float | None = None,
    cuda_graph_reserved_bytes: int = 0,
    gpu_memory_bytes: int,
    max_batched_tokens: int = 8192,
    max_sequences: int | None = None,
    max_model_len: int | None = None,
    nextn: int = 0,
    decode_context: int | None = None,
    gemm_quant_mode: str | None = None,
    moe_quant_mode: str | None = None,
    kvcache_quant_mode: str | None = None,
    nccl_mem_bytes: Mapping[int, int] | None = None,
    runtime_overhead_bytes: int | None = None,
    where: str = "engine.workers.aggregated.kv_cache.capacity",
    strict: bool = True,
) -> MemoryBreakdown:
    """KV blocks per scheduler rank from the GPU memory model, with every term (docs/timing.md 7).

    ``strict`` (default) raises CapacityError naming ``where`` when the non-KV memory leaves
    no KV budget or the budget holds no block; ``strict=False`` returns the breakdown anyway
    (blocks 0), e.g. to display the terms of an infeasible deployment.

    ``memory_fraction`` None means 0.9.  ``max_sequences``, ``max_model_len`` and ``nextn``
    are accepted for the caller's convenience and deliberately unused: AISimulate's model does
    not read them.  The quant modes override the checkpoint defaults (engine.gemm_quant_mode
    etc.).  ``nccl_mem_bytes`` (keyed by tensor degree 1/2/4/8, looked up at min(tensor, 8))
    and ``runtime_overhead_bytes`` are the system's misc.nccl_mem / misc.other_mem; they
    default to b200_sxm's.
    """
    del max_sequences, max_model_len, nextn  # not part of the model (see docstring)
    if backend not in ("vllm", "trtllm"):
        raise NotAvailableError(
            f"{where}: the default KV capacity is built for vLLM and TRT-LLM, not {backend!r}; "
            "use {type: fixed, blocks: N}"
        )
    family = model_family(model)
    gemm_q, moe_q, kv_q = default_quant_modes(model)
    gemm_q = gemm_quant_mode or gemm_q
    moe_q = moe_quant_mode or moe_q
    kv_q = kvcache_quant_mode or kv_q
    f = DEFAULT_MEMORY_FRACTION if memory_fraction is None else float(memory_fraction)
    nccl = B200_NCCL_MEM_BYTES if nccl_mem_bytes is None else nccl_mem_bytes
    r = B200_RUNTIME_OVERHEAD_BYTES if runtime_overhead_bytes is None else runtime_overhead_bytes
    cap = gpu_memory_bytes
    g = int(cuda_graph_reserved_bytes)

    w = weights_bytes(
        model,
        family,
        tensor=tensor,
        pipeline=pipeline,
        moe_tensor=moe_tensor,
        moe_expert=moe_expert,
        gemm_bytes=quant_bytes(gemm_q, "gemm_quant_mode"),
        moe_bytes=quant_bytes(moe_q, "moe_quant_mode"),
        backend=backend,
    )
    a = activations_bytes(
        model,
        family,
        tensor=tensor,
        attention_data=attention_data,
        moe_expert=moe_expert,
        max_batched_tokens=max_batched_tokens,
    )
    n = int(nccl[min(tensor, 8)])
    kv_tok = kv_bytes_per_token(
        model,
        family,
        tensor=tensor,
        kv_bytes=quant_bytes(kv_q, "kvcache_quant_mode"),
        decode_context=decode_context or 1,
    )
    non_kv = w + r + n + 0 + a  # float64, in this order
    non_kv = non_kv + g
    if backend == "vllm":
        budget = cap * f - non_kv  # gpu_memory_utilization: f of the whole GPU
    else:
        budget = (cap - non_kv) * f  # free_gpu_memory_fraction: f of what is left
    tokens = max(0, int(_kv_tokens(model, budget, kv_tok)))
    est = MemoryBreakdown(
        backend=backend,
        family=family,
        gpu_memory_bytes=cap,
        memory_fraction=f,
        weights_bytes=w,
        activations_bytes=a,
        comm_overhead_bytes=n,
        runtime_overhead_bytes=r,
        reserved_bytes=0,
        cuda_graph_reserved_bytes=g,
        non_kv_bytes=non_kv,
        kv_budget_bytes=budget,
        kv_bytes_per_token=kv_tok,
        kv_quant_mode=kv_q,
        kv_tokens=tokens,
        block_size=block_size,
        blocks=tokens // block_size,
    )
    return check_kv_memory(est, where) if strict else est


def check_kv_memory(est: MemoryBreakdown, where: str) -> MemoryBreakdown:
    """CapacityError when the non-KV memory leaves no KV budget or the budget holds no block."""
    if est.kv_budget_bytes <= 0:
        limit = (
            f"{est.memory_fraction:g} x {est.gpu_memory_bytes:,}"
            if est.backend == "vllm"
            else f"{est.gpu_memory_bytes:,}"
        )
        raise CapacityError(
            f"{where}: no KV budget: the non-KV memory of a GPU, {int(est.non_kv_bytes):,} bytes "
            f"(weights {int(est.weights_bytes):,}, activations {int(est.activations_bytes):,}, "
            f"communication {est.comm_overhead_bytes:,}, runtime {est.runtime_overhead_bytes:,}"
            f", CUDA graphs {est.cuda_graph_reserved_bytes:,}), reaches the {est.backend} limit "
            f"{limit} bytes; raise tensor, pipeline, moe_expert or memory_fraction, or lower "
            "max_batched_tokens / cuda_graph_reserved_bytes"
        )
    if est.blocks < 1:
        raise CapacityError(
            f"{where}: the KV budget of {int(est.kv_budget_bytes):,} bytes holds "
            f"{est.kv_tokens} tokens, not one block of {est.block_size}; raise memory_fraction "
            "or lower cuda_graph_reserved_bytes"
        )
    return est
