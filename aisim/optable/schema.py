"""What the compiled op-time tables hold: one spec per op family (docs/timing.md 2.1 and 2.3).

Each family names its source file, the key columns the AISimulate loader de-duplicates and
looks up on (first row wins), the order the compiled rows are sorted in, and how derived keys
are computed from the source columns. Every compiled table also carries:

* ``src``      uint8  - index into the table's ``sources`` list (metadata); 0 is always the
                        requested version's own directory ("primary").
* ``src_row``  uint32 - the row's position in that source file (file order is needed for the
                        resolver tie-breaks that follow first-seen order, e.g. GEMM sites).
* ``kernel_source``   - dictionary string (empty/missing -> "default" for attention lanes).
* ``latency``  float64 in the unit the source stores (``ms``; ``us`` for ``moe_a2a``), and
  ``power`` / ``power_limit`` (float64, W) when any source measured them (0.0 = not measured).

Pure provenance strings (framework, version, device and, where it is not a key, op_name) are
summarised per source in the table metadata and not stored per row. Any other source column
that is not a key is kept when it varies among the compiled rows, otherwise its single value is
recorded in the metadata (``constants``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

FORMAT_VERSION = 1

# Source columns that only say where a row came from.
PROVENANCE_COLUMNS = ("framework", "version", "device", "op_name")

# Value columns (copied as float64); everything else numeric is a key or an extra int column.
VALUE_COLUMNS = ("latency", "power", "power_limit", "transmit_us", "notify_us")

Derive = Callable[[dict[str, np.ndarray]], np.ndarray]


def _n_kv_lookup(cols: dict[str, np.ndarray]) -> np.ndarray:
    """docs/timing.md 2.1: 0 when num_heads == num_kv_heads (MHA sentinel), else num_kv_heads."""
    nh = cols["num_heads"]
    nkv = cols["num_key_value_heads"]
    return np.where(nh == nkv, 0, nkv).astype(np.int64)


def _kv_len(cols: dict[str, np.ndarray]) -> np.ndarray:
    """Generation attention is keyed on the context length isl + step."""
    return (cols["isl"] + cols["step"]).astype(np.int64)


def _lane(cols: dict[str, np.ndarray]) -> np.ndarray:
    """Attention lane: kernel_source, or "default" when absent/empty (AISimulate's rule)."""
    ks = cols.get("kernel_source")
    if ks is None:
        return np.full(len(cols["latency"]), "default", dtype=object)
    return np.array([s if s else "default" for s in ks], dtype=object)


def _low_latency(cols: dict[str, np.ndarray]) -> np.ndarray:
    """MoE rows of the TRT-LLM min-latency kernel form their own grid (probed first)."""
    ks = cols["kernel_source"]
    return np.array([s == "moe_torch_flow_min_latency" for s in ks], dtype=np.int64)


def _moe_dtype(cols: dict[str, np.ndarray]) -> np.ndarray:
    """AISimulate's kernel-routed MoE quant renames (the collector logs two kernels under one
    moe_dtype); a no-op for every b200_sxm vLLM/TRT-LLM row."""
    out = []
    for q, ks in zip(cols["moe_dtype"], cols["kernel_source"], strict=True):
        if q == "w4a8_mxfp4_mxfp8" and ks == "sglang_mxfp4_flashinfer_trtllm_moe":
            q = "w4a8_mxfp4_mxfp8_trtllm"
        elif q == "w4a16_mxfp4" and ks == "sglang_flashinfer_cutlass_moe":
            q = "w4a16_mxfp4_cutlass"
        out.append(q)
    return np.array(out, dtype=object)


def _skip_indexer(cols: dict[str, np.ndarray]) -> np.ndarray:
    """DSA rows whose op_name ends in _skip_indexer (GLM-5.2 reuse layers) are a separate table."""
    return np.array([str(s).endswith("_skip_indexer") for s in cols["op_name"]], dtype=np.int64)


def _drop_gemm_awq_gptq(cols: dict[str, np.ndarray], hardware: str) -> np.ndarray:
    """AISimulate skips GEMM quant modes it does not model (awq, gptq)."""
    return np.array([d not in ("awq", "gptq") for d in cols["gemm_dtype"]], dtype=bool)


def _drop_eager_allreduce(cols: dict[str, np.ndarray], hardware: str) -> np.ndarray:
    """docs/timing.md 2.3: eager custom-allreduce rows are dropped at load (CUDA-graph curve only);
    AISimulate keeps them on b60 only."""
    n = len(cols["latency"])
    if hardware == "b60":
        return np.ones(n, dtype=bool)
    ks = cols.get("kernel_source", np.full(n, "", dtype=object))
    be = cols.get("backend", np.full(n, "", dtype=object))
    return np.array(
        [
            not (str(a).endswith("_eager") or str(b).endswith("_eager"))
            for a, b in zip(ks, be, strict=True)
        ],
        dtype=bool,
    )


@dataclass(frozen=True)
class Family:
    """One op family: its source file, lookup keys (= sort order) and derivations."""

    name: str
    op_file: str
    keys: tuple[str, ...]  # compiled key columns, in sort order; de-duplication key
    categorical: tuple[str, ...]  # which keys are strings (dictionary-encoded)
    derive: dict[str, Derive] = field(default_factory=dict)
    consumed: tuple[str, ...] = ()  # source columns folded into derived keys, not stored
    row_filter: Callable[[dict[str, np.ndarray], str], np.ndarray] | None = None
    filter_reason: str = ""
    unit: str = "ms"
    system: bool = False  # framework-agnostic, selected by the system yaml (NCCL)
    description: str = ""
    lookup: str = ""  # how the pricing code walks the sorted rows


_ATTN_CTX_KEYS = (
    "attn_dtype",
    "kv_cache_dtype",
    "n_kv_lookup",
    "head_dim",
    "window_size",
    "kernel_source",
    "num_heads",
    "isl",
    "batch_size",
)
_ATTN_GEN_KEYS = (
    "kv_cache_dtype",
    "n_kv_lookup",
    "head_dim",
    "window_size",
    "kernel_source",
    "num_heads",
    "batch_size",
    "kv_len",
)

FAMILIES: tuple[Family, ...] = (
    Family(
        "gemm",
        "gemm_perf.parquet",
        ("gemm_dtype", "n", "k", "m"),
        ("gemm_dtype",),
        row_filter=_drop_gemm_awq_gptq,
        filter_reason="gemm_dtype awq/gptq not modelled",
        description="ms per GEMM call [m x k] . [k x n]",
        lookup="site (gemm_dtype, n, k) -> m-curve",
    ),
    Family(
        "context_attention",
        "context_attention_perf.parquet",
        _ATTN_CTX_KEYS,
        ("attn_dtype", "kv_cache_dtype", "kernel_source"),
        derive={"n_kv_lookup": _n_kv_lookup, "kernel_source": _lane},
        description="ms per layer, full causal prefill of batch x isl (step 0)",
        lookup="slice (attn_dtype, kv_cache_dtype, n_kv_lookup, head_dim, window_size) -> "
        "lane kernel_source -> num_heads -> isl -> batch_size",
    ),
    Family(
        "generation_attention",
        "generation_attention_perf.parquet",
        _ATTN_GEN_KEYS,
        ("kv_cache_dtype", "kernel_source"),
        derive={"n_kv_lookup": _n_kv_lookup, "kv_len": _kv_len, "kernel_source": _lane},
        consumed=("isl", "step"),
        description="ms per layer, one decode step; kv_len = isl + step",
        lookup="slice (kv_cache_dtype, n_kv_lookup, head_dim, window_size) -> lane "
        "kernel_source -> num_heads -> batch_size -> kv_len",
    ),
    Family(
        "custom_allreduce",
        "custom_allreduce_perf.parquet",
        ("num_gpus", "message_size"),
        (),
        row_filter=_drop_eager_allreduce,
        filter_reason="eager kernel_source/backend (*_eager) dropped; CUDA-graph curve only",
        description="ms per allreduce; message_size in bf16 elements; every row is "
        "stored under dtype half whatever allreduce_dtype says",
        lookup="num_gpus -> message_size curve",
    ),
    Family(
        "nccl",
        "nccl_perf.parquet",
        ("nccl_dtype", "op_name", "num_gpus", "message_size"),
        ("nccl_dtype", "op_name"),
        system=True,
        description="ms per NCCL collective; message_size in elements",
        lookup="(nccl_dtype, op_name, num_gpus) -> message_size curve",
    ),
    Family(
        "moe",
        "moe_perf.parquet",
        (
            "low_latency",
            "moe_dtype",
            "distribution",
            "topk",
            "num_experts",
            "hidden_size",
            "inter_size",
            "moe_tp_size",
            "moe_ep_size",
            "num_tokens",
        ),
        ("moe_dtype", "distribution"),
        derive={"low_latency": _low_latency, "moe_dtype": _moe_dtype},
        description="ms per layer for the fused routed experts; num_tokens is global",
        lookup="low_latency grid -> (moe_dtype, distribution, topk, num_experts, hidden, "
        "inter, moe_tp, moe_ep) -> num_tokens curve",
    ),
    Family(
        "moe_a2a",
        "moe_a2a_perf.parquet",
        (
            "comm_backend",
            "phase",
            "comm_dtype",
            "ep_size",
            "node_num",
            "hidden_size",
            "topk",
            "num_experts",
            "sms",
            "num_tokens",
        ),
        ("comm_backend", "phase", "comm_dtype"),
        unit="us",
        description="us per DeepEP dispatch/combine (latency, transmit_us, notify_us)",
        lookup="(comm_backend, phase, comm_dtype, ep, nodes, hidden, topk, experts, sms) "
        "-> num_tokens curve",
    ),
    Family(
        "dsa_context_module",
        "dsa_context_module_perf.parquet",
        (
            "skip_indexer",
            "architecture",
            "mla_dtype",
            "kv_cache_dtype",
            "gemm_type",
            "kernel_source",
            "num_heads",
            "step",
            "isl",
            "batch_size",
        ),
        ("architecture", "mla_dtype", "kv_cache_dtype", "gemm_type", "kernel_source"),
        derive={"skip_indexer": _skip_indexer},
        description="ms per layer for the whole DSA attention module; step = cached prefix",
        lookup="(skip_indexer, architecture, mla/kv/gemm dtypes) -> backend bucket from "
        "kernel_source -> num_heads -> step -> isl -> batch_size",
    ),
    Family(
        "dsa_generation_module",
        "dsa_generation_module_perf.parquet",
        (
            "skip_indexer",
            "architecture",
            "mla_dtype",
            "kv_cache_dtype",
            "gemm_type",
            "kernel_source",
            "num_heads",
            "batch_size",
            "step",
            "isl",
        ),
        ("architecture", "mla_dtype", "kv_cache_dtype", "gemm_type", "kernel_source"),
        derive={"skip_indexer": _skip_indexer},
        description="ms per layer for the DSA module decode step; kv = isl + step",
        lookup="(skip_indexer, architecture, dtypes) -> bucket -> num_heads -> batch_size "
        "-> kv (isl + step)",
    ),
    Family(
        "mla_context_module",
        "mla_context_module_perf.parquet",
        (
            "mla_dtype",
            "kv_cache_dtype",
            "gemm_type",
            "model",
            "kernel_source",
            "num_heads",
            "step",
            "isl",
            "batch_size",
        ),
        ("mla_dtype", "kv_cache_dtype", "gemm_type", "model", "kernel_source"),
        description="ms per layer for the fused MLA context module (DeepSeek-V3 style)",
        lookup="(dtypes, model -> native heads) -> num_heads -> isl -> batch_size",
    ),
    Family(
        "mla_generation_module",
        "mla_generation_module_perf.parquet",
        (
            "mla_dtype",
            "kv_cache_dtype",
            "gemm_type",
            "model",
            "kernel_source",
            "num_heads",
            "batch_size",
            "step",
            "isl",
        ),
        ("mla_dtype", "kv_cache_dtype", "gemm_type", "model", "kernel_source"),
        description="ms per layer for the fused MLA decode module; kv = isl + step",
        lookup="(kv/gemm dtypes, model) -> num_heads -> batch_size -> kv (isl + step)",
    ),
    Family(
        "context_mla",
        "context_mla_perf.parquet",
        ("mla_dtype", "kv_cache_dtype", "num_heads", "step", "isl", "batch_size"),
        ("mla_dtype", "kv_cache_dtype"),
        description="ms per layer, op-level MLA prefill",
        lookup="(mla_dtype, kv_cache_dtype) -> num_heads -> isl -> batch_size",
    ),
    Family(
        "generation_mla",
        "generation_mla_perf.parquet",
        ("mla_dtype", "kv_cache_dtype", "num_heads", "batch_size", "step", "isl"),
        ("mla_dtype", "kv_cache_dtype"),
        description="ms per layer, op-level MLA decode; kv = isl + step",
        lookup="kv_cache_dtype -> num_heads -> batch_size -> kv (isl + step)",
    ),
    Family(
        "mla_bmm",
        "mla_bmm_perf.parquet",
        ("bmm_dtype", "op_name", "num_heads", "num_tokens"),
        ("bmm_dtype", "op_name"),
        description="ms per MLA BMM (op_name mla_gen_pre / mla_gen_post)",
        lookup="(bmm_dtype, op_name) -> num_heads -> num_tokens curve",
    ),
    Family(
        "computescale",
        "computescale_perf.parquet",
        ("quant_dtype", "m", "k"),
        ("quant_dtype",),
        description="ms, fp8_static compute-scale delta",
        lookup="quant_dtype -> m -> k",
    ),
    Family(
        "scale_matrix",
        "scale_matrix_perf.parquet",
        ("quant_dtype", "m", "k"),
        ("quant_dtype",),
        description="ms, fp8_static scale-matrix kernel",
        lookup="quant_dtype -> m -> k",
    ),
)

FAMILY_BY_NAME = {f.name: f for f in FAMILIES}

# Numeric key columns that can exceed int32 (element counts up to 2^29+; kept int64 as 6.2 asks).
INT64_COLUMNS = ("message_size",)

# Derived flags stored as uint8.
FLAG_COLUMNS = ("low_latency", "skip_indexer")
