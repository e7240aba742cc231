"""Dataclasses of the ``engine`` section: the deployment, its worker roles and their parts.

Field names are the YAML keys; each field's checker is in its metadata (see
:mod:`aisim.config.checks`).  Defaults shown as "(null) resolves to" depend on other fields
(backend, role) and are filled by the loader.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from aisim.config.checks import (
    Section,
    Tagged,
    boolean,
    choice,
    fld,
    int_or,
    integer,
    number,
    number_list,
    opaque,
    spec,
    string,
    string_list,
    string_or_list,
)

# --------------------------------------------------------------------------- workers


@dataclass(frozen=True, kw_only=True)
class Parallelism:
    """How one worker is split over GPUs."""

    replicas: int = fld(1, integer(gt=0))
    """Independent workers of this role. Default 1."""
    tensor: int = fld(1, integer(gt=0))
    """Tensor-parallel degree. Default 1."""
    pipeline: int = fld(1, integer(gt=0))
    """Pipeline-parallel degree (timing only; not counted in reported GPUs). Default 1."""
    attention_data: int = fld(1, integer(gt=0))
    """Attention data-parallel degree = scheduler ranks per worker. Default 1."""
    moe_tensor: int = fld(1, integer(gt=0))
    """MoE tensor-parallel degree. Default 1."""
    moe_expert: int = fld(1, integer(gt=0))
    """MoE expert-parallel degree. Default 1."""
    prefill_context: int | None = fld(None, integer(gt=0, nullable=True))
    """Context-parallel degree for prefill. Default null."""
    decode_context: int | None = fld(None, integer(gt=0, nullable=True))
    """Context-parallel degree for decode. Default null."""

    @property
    def gpus_per_worker(self) -> int:
        """GPUs AISimulate reports per worker: tensor x attention_data (pipeline not counted)."""
        return self.tensor * self.attention_data


@dataclass(frozen=True, kw_only=True)
class Scheduler:
    """Per-rank scheduler limits."""

    max_batched_tokens: int = fld(8192, integer(gt=0))
    """Token budget of one scheduler pass. Default 8192."""
    max_sequences: int = fld(None, integer(gt=0))
    """Running requests per rank. Default 256, or 1 for the prefill role."""
    prefill_schedule_interval: int = fld(1, integer(gt=0))
    """vLLM only: prefills are admitted every k-th group pass. Default 1."""
    prefill_decode_interval: int = fld(0, integer(ge=0))
    """SGLang only. Default 0."""


@dataclass(frozen=True, kw_only=True)
class FixedCapacity:
    """An explicit KV pool per scheduler rank: exactly one of ``blocks`` or ``bytes``."""

    TYPE: ClassVar[str] = "fixed"
    blocks: int | None = fld(None, integer(gt=0, nullable=True))
    """KV blocks per scheduler rank."""
    bytes: int | None = fld(None, integer(gt=0, le=2**64 - 1, nullable=True))
    """KV bytes per rank; blocks = floor(bytes / (block_size x bytes_per_token))."""


@dataclass(frozen=True, kw_only=True)
class DefaultCapacity:
    """KV pool computed from the GPU memory model."""

    TYPE: ClassVar[str] = "default"
    memory_fraction: float = fld(None, number(gt=0, le=1, nullable=True))
    """GPU memory fraction, in (0, 1]. Default (null) resolves to 0.9 (SGLang 0.88)."""
    cuda_graph_reserved_bytes: int = fld(0, integer(ge=0, le=2**53))
    """Bytes reserved for CUDA graphs. Default 0."""


Capacity = FixedCapacity | DefaultCapacity


@dataclass(frozen=True, kw_only=True)
class KVCache:
    """Paged KV cache of every scheduler rank of a worker."""

    block_size: int = fld(None, integer(gt=0, nullable=True))
    """Tokens per block. Default (null) resolves to vLLM 64, TRT-LLM 32, SGLang 1."""
    prefix_match_unit: int | None = fld(None, integer(gt=0, le=2**64 - 1, nullable=True))
    """Prefix-match granularity (needs state_cache). Default null."""
    prefix_caching: bool = fld(True, boolean(lax=True))
    """Reuse cached prompt blocks across requests. Default true."""
    bytes_per_token: int | Literal["auto"] = fld("auto", int_or("auto"))
    """KV bytes of one token on one rank; 'auto' = from the model. Default 'auto'."""
    capacity: Capacity = field(
        default=None, metadata=spec(Tagged("capacity", default_tag="default"))
    )
    """Pool size (tagged by 'type', default 'default')."""
    host_offload: Mapping[str, Any] | None = fld(None, opaque())
    """Host-memory (G2) offload settings, kept unparsed. Default null."""
    g3_offload: Mapping[str, Any] | None = fld(None, opaque())
    """G3 offload settings, kept unparsed. Default null."""
    kvcr: Mapping[str, Any] | None = fld(None, opaque())
    """KV cache reuse transfer settings, kept unparsed. Default null."""
    state_cache: Mapping[str, Any] | None = fld(None, opaque())
    """Recurrent/indexer state cache settings, kept unparsed. Default null."""

    def num_blocks_per_rank(self, bytes_per_token: int | None = None) -> int | None:
        """Blocks per scheduler rank for a fixed capacity; None for the default capacity."""
        cap = self.capacity
        if not isinstance(cap, FixedCapacity):
            return None
        if cap.blocks is not None:
            return cap.blocks
        bpt = self.bytes_per_token if isinstance(self.bytes_per_token, int) else bytes_per_token
        if bpt is None or cap.bytes is None:
            return None
        return cap.bytes // (self.block_size * bpt)


_ESTIMATION_MODES = ("auto", "op_level", "fpm_interpolation", "fpm_regression")
_DATABASE_MODES = ("SILICON", "HYBRID", "EMPIRICAL", "SOL")


def _upper(text: str) -> str:
    return text.upper()


@dataclass(frozen=True, kw_only=True)
class DefaultTiming:
    """Pass times from the performance database (op-level tables)."""

    TYPE: ClassVar[str] = "default"
    forward_model: str = fld("op_level", choice("op_level", "fpm"))
    """'op_level' (default) or 'fpm' (forward-pass model)."""
    fpm_parquet_path: str | None = fld(None, string(nullable=True))
    """FPM table (forward_model 'fpm' only). Default null."""
    estimation_mode: str | None = fld(None, choice(*_ESTIMATION_MODES, nullable=True))
    """Per-role override of engine.estimation_mode. Default null."""
    fallback_policy: str | None = fld(None, choice("deny", "allow", nullable=True))
    """Per-role override of engine.fallback_policy. Default null."""
    database_mode: str | None = fld(None, choice(*_DATABASE_MODES, nullable=True, normalize=_upper))
    """Per-role override of engine.database_mode (upper-cased). Default null."""
    estimator_config: Mapping[str, Any] | None = fld(None, opaque())
    """Estimator options, kept unparsed. Default null."""
    systems_paths: tuple[str, ...] | None = fld(None, string_list(nullable=True))
    """Extra performance-database roots. Default null."""
    transfer_policy: str | tuple[str, ...] | None = fld(None, string_or_list(nullable=True))
    """Perf-data reuse policy. Default null."""
    gemm_quant_mode: str | None = fld(None, string(nullable=True))
    """GEMM quantization override. Default null."""
    moe_quant_mode: str | None = fld(None, string(nullable=True))
    """MoE quantization override. Default null."""
    fmha_quant_mode: str | None = fld(None, string(nullable=True))
    """Attention (FMHA) quantization override. Default null."""
    kvcache_quant_mode: str | None = fld(None, string(nullable=True))
    """KV cache quantization override. Default null."""
    comm_quant_mode: str | None = fld(None, string(nullable=True))
    """Communication quantization override. Default null."""
    attention_backend: str | None = fld(None, string(nullable=True))
    """Attention kernel backend override. Default null."""


@dataclass(frozen=True, kw_only=True)
class FixedTiming:
    """Constant pass times: a pass with any prefill work costs prefill_ms, else decode_ms."""

    TYPE: ClassVar[str] = "fixed"
    prefill_ms: float = fld(None, number(ge=0, lax=True, nullable=True))
    """Duration of a pass that contains prefill work, ms (required)."""
    decode_ms: float = fld(None, number(ge=0, lax=True, nullable=True))
    """Duration of a decode-only pass, ms (required)."""


@dataclass(frozen=True, kw_only=True)
class PolynomialTiming:
    """AISimulate's polynomial timing provider (no parameters in the YAML)."""

    TYPE: ClassVar[str] = "polynomial"


Timing = DefaultTiming | FixedTiming | PolynomialTiming


@dataclass(frozen=True, kw_only=True)
class Worker:
    """One worker role (aggregated, prefill or decode)."""

    parallelism: Parallelism = field(default=None, metadata=spec(Section(Parallelism)))
    """GPU split. Defaults: all degrees 1."""
    scheduler: Scheduler = field(default=None, metadata=spec(Section(Scheduler)))
    """Scheduler limits."""
    kv_cache: KVCache = field(default=None, metadata=spec(Section(KVCache)))
    """KV cache settings."""
    timing: Timing = field(default=None, metadata=spec(Tagged("timing", default_tag="default")))
    """Pass-time provider (tagged by 'type', default 'default')."""
    startup_seconds: float = fld(0.0, number(ge=0, lax=True))
    """Delay before the worker accepts requests, s (counted in gpu_hours). Default 0."""
    hardware: str | None = fld(None, string(nullable=True))
    """Per-role hardware override (disaggregated prefill/decode only). Default null."""
    context_length: int | None = fld(None, integer(gt=0, nullable=True))
    """Per-role context limit override. Default null."""
    host_loop: bool = fld(False, boolean())
    """SGLang host loop model (aggregated/prefill roles only). Default false."""
    frontend: Mapping[str, Any] | None = fld(None, opaque())
    """Frontend stage model, kept unparsed (aggregated/prefill only). Default null."""
    host_profile: Mapping[str, Any] | None = fld(None, opaque())
    """Measured host profile, kept unparsed (aggregated/prefill only). Default null."""
    vision: Mapping[str, Any] | None = fld(None, opaque())
    """Vision encoder settings, kept unparsed (aggregated/prefill only). Default null."""


HOST_ONLY_WORKER_KEYS = ("host_loop", "frontend", "host_profile", "vision")
"""Worker keys AISimulate accepts for the aggregated and prefill roles but not for decode."""


# --------------------------------------------------------------------------- engine


@dataclass(frozen=True, kw_only=True)
class KVTransfer:
    """Prefill -> decode KV transfer (disaggregated mode only)."""

    bytes_per_token: int | Literal["auto"] = fld("auto", int_or("auto"))
    """Bytes sent per token from one source rank; 'auto' = from the model. Default 'auto'."""
    bandwidth_gb_per_second: float | None = fld(None, number(gt=0, nullable=True))
    """Link bandwidth, GB/s; null = no transfer delay. Default null."""
    timing_mode: str = fld("destination_missing", choice("destination_missing", "full_prompt"))
    """Which tokens are sent: those missing at the destination (default) or the whole prompt."""


@dataclass(frozen=True, kw_only=True)
class NgramSpeculation:
    """N-gram speculative decoding with per-position acceptance rates."""

    TYPE: ClassVar[str] = "ngram"
    num_speculative_tokens: int = fld(check=integer(ge=1, le=5))
    """Draft tokens per step, 1..5 (required)."""
    acceptance_rates: tuple[float, ...] = fld(check=number_list(ge=0, le=1))
    """Conditional acceptance probability per draft position, each in [0, 1] (required)."""
    seed: int = fld(42, integer(ge=0, le=2**64 - 1))
    """Seed of the acceptance stream. Default 42."""


@dataclass(frozen=True, kw_only=True)
class SchemeSpeculation:
    """A named speculation scheme (eagle, draft model, ...) with an expected acceptance."""

    TYPE: ClassVar[str] = "*"
    kind: str = fld(check=string())
    """Scheme name (any kind other than 'ngram')."""
    expected_accepted_tokens: float = fld(check=number(ge=0))
    """Mean accepted draft tokens per step (required)."""
    params: Mapping[str, Any] = fld(None, opaque())
    """Scheme parameters, kept unparsed. Default {}."""
    draft_model_path: str | None = fld(None, string(nullable=True))
    """Draft model location. Default null."""
    draft_config: Mapping[str, Any] | None = fld(None, opaque())
    """Draft model config, kept unparsed. Default null."""
    seed: int = fld(42, integer(ge=0, le=2**64 - 1))
    """Seed of the acceptance stream. Default 42."""


Speculation = NgramSpeculation | SchemeSpeculation


@dataclass(frozen=True, kw_only=True)
class Tokenization:
    """Tokenizer delay before a request reaches the scheduler."""

    workers: int = fld(1, integer(gt=0))
    """Parallel tokenizer workers. Default 1."""
    base_ms: float = fld(0.0, number(ge=0))
    """Fixed delay per request, ms. Default 0."""
    per_input_token_us: float = fld(0.0, number(ge=0))
    """Delay per prompt token, microseconds. Default 0."""


@dataclass(frozen=True, kw_only=True)
class Engine:
    """The serving deployment being simulated."""

    mode: str = fld("aggregated", choice("aggregated", "disaggregated", "afd"))
    """'aggregated' (default), 'disaggregated' (prefill/decode) or 'afd'."""
    model: str = fld(check=string())
    """Hugging Face model id (required)."""
    hardware: str = fld(check=string())
    """Performance-database system name, e.g. 'b200_sxm' (required)."""
    backend: str = fld("vllm", choice("vllm", "trtllm", "sglang"))
    """Serving framework whose scheduler is simulated. Default 'vllm'."""
    backend_version: str | None = fld(None, string(nullable=True))
    """Perf-table version; null = latest for the backend/hardware. Default null."""
    estimation_mode: str = fld("auto", choice(*_ESTIMATION_MODES))
    """Pass-time estimator. Default 'auto' (op_level when data exists)."""
    database_mode: str = fld("SILICON", choice(*_DATABASE_MODES, normalize=_upper))
    """Which perf data to use (upper-cased). Default 'SILICON'."""
    fallback_policy: str = fld("deny", choice("deny", "allow"))
    """Whether estimator fallbacks are permitted. Default 'deny'."""
    context_length: int | Literal["max"] = fld("max", int_or("max"))
    """Context limit in tokens or 'max' (the model's limit). Default 'max'."""
    enable_shared_layer: bool | None = fld(None, boolean(nullable=True))
    """Timing-model option. Default null."""
    nextn: int = fld(0, integer(ge=0, le=5))
    """Native MTP depth, 0..5. Default 0."""
    nextn_accepted: float | None = fld(None, number(ge=0, nullable=True))
    """Mean accepted MTP tokens, in [0, nextn]; required iff nextn > 0. Default null."""
    enable_chunked_prefill: bool | None = fld(None, boolean(nullable=True))
    """False: a prompt remainder that does not fit the budget waits. Default null (= true)."""
    enable_eplb: bool = fld(False, boolean())
    """Expert-parallel load balancing (timing identity). Default false."""
    wideep_num_slots: int | None = fld(None, integer(gt=0, nullable=True))
    """Wide-EP expert slots (timing identity). Default null."""
    moe_backend: str | None = fld(None, string(nullable=True))
    """MoE kernel backend (timing identity). Default null."""
    moe_kernel_source: str | None = fld(None, string(nullable=True))
    """MoE kernel source (timing identity). Default null."""
    attention_backend: str | None = fld(None, string(nullable=True))
    """Attention kernel backend (timing identity). Default null."""
    gemm_quant_mode: str | None = fld(None, string(nullable=True))
    """GEMM quantization (timing identity). Default null = model default."""
    moe_quant_mode: str | None = fld(None, string(nullable=True))
    """MoE quantization (timing identity). Default null."""
    kvcache_quant_mode: str | None = fld(None, string(nullable=True))
    """KV cache quantization (timing identity). Default null."""
    fmha_quant_mode: str | None = fld(None, string(nullable=True))
    """Attention quantization (timing identity). Default null."""
    comm_quant_mode: str | None = fld(None, string(nullable=True))
    """Communication quantization (timing identity). Default null."""
    transfer_policy: str | tuple[str, ...] | None = fld(None, string_or_list(nullable=True))
    """Perf-data reuse policy. Default null."""
    systems_paths: tuple[str, ...] | None = fld(None, string_list(nullable=True))
    """Extra performance-database roots. Default null."""
    systems_path: str | None = fld(None, string(nullable=True))
    """One extra performance-database root. Default null."""
    estimator_config: Mapping[str, Any] = fld(None, opaque())
    """Estimator options, kept unparsed. Default {}."""
    fpm_profile: Mapping[str, Any] | None = fld(None, opaque())
    """Forward-pass-model profile, kept unparsed. Default null."""
    decoder_replay: bool = fld(False, boolean())
    """AISimulate decoder replay switch. Default false."""
    strict_provenance: bool | None = fld(None, boolean(nullable=True))
    """Fail when perf-data provenance is incomplete. Default null."""
    speculation: Speculation | None = field(
        default=None,
        metadata=spec(Tagged("speculation", tag_key="kind", nullable=True, optional=True)),
    )
    """Speculative decoding (tagged by 'kind'; exclusive with nextn). Default null."""
    kv_transfer: KVTransfer | None = field(
        default=None, metadata=spec(Section(KVTransfer, nullable=True, optional=True))
    )
    """Prefill -> decode transfer (disaggregated only). Default null."""
    tokenization: Tokenization | None = field(
        default=None, metadata=spec(Section(Tokenization, nullable=True, optional=True))
    )
    """Tokenizer delay model. Default null (no delay)."""
    afd: Mapping[str, Any] | None = fld(None, opaque())
    """Attention-FFN disaggregation topology (mode 'afd'), kept unparsed. Default null."""
    workers: Mapping[str, Worker] = fld(None, None)
    """Worker roles by name: {'aggregated'} or {'prefill', 'decode'} (read-only mapping)."""
    encoder: Mapping[str, Any] | None = fld(None, None, yaml=False)
    """``workers.encoder`` (EPD), kept unparsed. Default null."""
