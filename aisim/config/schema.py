"""The typed config tree: frozen dataclasses, one per YAML section of an AISimulate config.

Field names are the YAML keys.  Each field carries its checker in ``metadata["check"]`` (see
:mod:`aisim.config.checks`); a :class:`Section` or :class:`Tagged` marker means a nested section,
built by :mod:`aisim.config.validate`.  Sections chosen by a ``type:`` (or ``kind:``) tag have the
tag in the class attribute ``TYPE`` and are listed in :mod:`aisim.config.registry`.

Defaults that depend on other sections (``kv_cache.block_size``, ``scheduler.max_sequences``,
``capacity.memory_fraction``, ``load.seed``, ...) are ``None`` in the dataclass and always
resolved by the loader, so a loaded tree never holds ``None`` there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from aisim.config.checks import (
    Checker,
    Invalid,
    boolean,
    choice,
    int_or,
    integer,
    number,
    number_list,
    opaque,
    string,
    string_list,
    string_or_list,
    typed,
)

_MISSING: Any = dataclasses.MISSING


@dataclass(frozen=True)
class Section:
    """Marker: the field is a nested section of class ``cls``."""

    cls: type
    nullable: bool = False
    """An explicit ``null`` is accepted (the field becomes None)."""
    optional: bool = False
    """When the key is absent the field is None (otherwise the section is built from ``{}``)."""


@dataclass(frozen=True)
class Tagged:
    """Marker: the field is a section whose class is chosen by a tag key (``type`` / ``kind``)."""

    registry: str
    """Name of the tag -> class map in :data:`aisim.config.registry.REGISTRIES`."""
    tag_key: str = "type"
    """The key holding the tag."""
    default_tag: str | None = None
    """Tag used when the key is absent from the mapping (None: the tag is required)."""
    nullable: bool = False
    optional: bool = False


def fld(
    default: Any = _MISSING, check: Checker | Section | Tagged | None = None, *, yaml: bool = True
) -> Any:
    """A dataclass field with its checker; no default means the YAML key is required.

    ``yaml=False`` marks a field that is filled by the loader, not read from the same mapping.
    """
    return dataclasses.field(default=default, metadata={"check": check, "yaml": yaml})


def _image_identity(value: Any, path: str) -> Any:
    if value == "unique":
        return value
    if isinstance(value, Mapping) and set(value) == {"pool"}:
        return {"pool": integer(gt=0)(value["pool"], f"{path}.pool")}
    raise Invalid(path, "must be 'unique' or {pool: N}", typed(value))


def _positive_or_auto(value: Any, path: str) -> Any:
    if value == "auto":
        return value
    try:
        return number(gt=0)(value, path)
    except Invalid as exc:
        raise Invalid(path, "must be a positive number or 'auto'", exc.got) from None


# --------------------------------------------------------------------------- traffic


@dataclass(frozen=True, kw_only=True)
class ImageInput:
    """Images attached to every synthetic request (EPD workloads)."""

    height: int = fld(check=integer(gt=0))
    """Image height in pixels (required)."""
    width: int = fld(check=integer(gt=0))
    """Image width in pixels (required)."""
    count: int = fld(1, integer(gt=0))
    """Images per request. Default 1."""
    encoding: str = fld("png", choice("png", "jpeg"))
    """Image encoding. Default 'png'."""
    identity: Any = fld("unique", _image_identity)
    """'unique' (default) or {pool: N} to draw from N distinct images."""
    min_pixels: int | None = fld(None, integer(gt=0, nullable=True))
    """Lower pixel bound of the vision preprocessor. Default null."""
    max_pixels: int | None = fld(None, integer(gt=0, nullable=True))
    """Upper pixel bound of the vision preprocessor. Default null."""


@dataclass(frozen=True, kw_only=True)
class SyntheticSource:
    """Every request has the same prompt and output length."""

    TYPE: ClassVar[str] = "synthetic"
    input_tokens: int = fld(1024, integer(gt=0))
    """Prompt length in tokens. Default 1024."""
    output_tokens: int = fld(128, integer(gt=0))
    """Generated tokens per request. Default 128."""
    cached_prefix_tokens: int = fld(0, integer(ge=0))
    """Leading prompt tokens shared by all requests (<= input_tokens). Default 0."""
    images: ImageInput | None = fld(None, Section(ImageInput, nullable=True, optional=True))
    """Images per request (EPD only). Default null."""


@dataclass(frozen=True, kw_only=True)
class SessionShape:
    """Shape of one multi-turn session."""

    turns: int = fld(4, integer(ge=2))
    """Turns per session (>= 2). Default 4."""
    shared_prefix_ratio: float = fld(0.0, number(ge=0, le=1))
    """Fraction of the first prompt shared inside a prefix group, in [0, 1]. Default 0."""
    prefix_groups: int = fld(0, integer(ge=0))
    """Number of prefix groups (> 0 when shared_prefix_ratio > 0). Default 0."""
    inter_turn_delay_ms: float = fld(0.0, number(ge=0))
    """Think time between a turn's end and the next turn, ms. Default 0."""


@dataclass(frozen=True, kw_only=True)
class SyntheticSessionSource:
    """Multi-turn synthetic sessions; at most one turn of a session is active."""

    TYPE: ClassVar[str] = "synthetic-session"
    new_input_tokens_per_turn: int = fld(1024, integer(gt=0))
    """New prompt tokens added by each turn. Default 1024."""
    output_tokens_per_turn: int = fld(128, integer(gt=0))
    """Generated tokens per turn. Default 128."""
    session: SessionShape = fld(check=Section(SessionShape))
    """Session shape (required)."""


@dataclass(frozen=True, kw_only=True)
class TraceSource:
    """Replay of a JSONL request trace."""

    TYPE: ClassVar[str] = "trace"
    paths: tuple[str, ...] = fld(check=string_list())
    """Trace files, resolved against the config file's folder (exactly one except 'dynamo')."""
    format: str = fld(
        "mooncake",
        choice(
            "mooncake", "mooncake-delta", "agentic_mooncake", "applied_compute_agentic",
            "dynamo", "weka",
        ),
    )
    """Trace row format. Default 'mooncake'."""
    block_size: int = fld(None, integer(gt=0, nullable=True))
    """Tokens per trace hash id. Default (null) resolves to 512."""
    nested_timestamp_basis: str | None = fld(
        None, choice("auto", "absolute", "relative", nullable=True)
    )
    """Timestamp basis of nested rows ('weka' only). Default null."""


@dataclass(frozen=True, kw_only=True)
class ConcurrencyLoad:
    """Closed loop: a new request arrives when one reaches a terminal state."""

    TYPE: ClassVar[str] = "concurrency"
    concurrency: int = fld(10, integer(gt=0))
    """Requests kept in flight. Default 10."""


@dataclass(frozen=True, kw_only=True)
class PoissonLoad:
    """Open loop with exponential gaps (seeded)."""

    TYPE: ClassVar[str] = "poisson"
    requests_per_second: float | None = fld(None, number(gt=0, nullable=True))
    """Mean arrival rate, requests/s (required for request sources)."""
    sessions_per_second: float | None = fld(None, number(gt=0, nullable=True))
    """Mean session arrival rate, sessions/s (required for session sources)."""
    seed: int = fld(None, integer(ge=0, nullable=True))
    """Seed of the arrival stream. Default (null) resolves to 42."""


@dataclass(frozen=True, kw_only=True)
class ConstantRateLoad:
    """Open loop: request k arrives at k x 1000 / rate ms."""

    TYPE: ClassVar[str] = "constant_rate"
    requests_per_second: float | None = fld(None, number(gt=0, nullable=True))
    """Arrival rate, requests/s (required for request sources)."""
    sessions_per_second: float | None = fld(None, number(gt=0, nullable=True))
    """Session arrival rate, sessions/s (required for session sources)."""


@dataclass(frozen=True, kw_only=True)
class TraceTimestampsLoad:
    """Requests arrive at the trace's own timestamps (trace sources only)."""

    TYPE: ClassVar[str] = "trace_timestamps"
    speedup: float = fld(None, number(gt=0, nullable=True))
    """Divides every trace timestamp. Default (null) resolves to 1.0."""
    agentic_lanes: int | None = fld(None, integer(gt=0, nullable=True))
    """Parallel agent lanes (agentic trace formats only). Default null."""
    agentic_warmup: bool = fld(False, boolean())
    """Prime saved prefixes before the replay (agentic). Default false."""
    agentic_warmup_policy: str = fld(
        "repeated_prefixes", choice("repeated_prefixes", "live_trajectory_v1")
    )
    """Warmup policy (agentic). Default 'repeated_prefixes'."""
    agentic_snapshot: Mapping[str, Any] | None = fld(None, opaque())
    """Seeded agentic starting points (kept unparsed). Default null."""
    agentic_profile: Mapping[str, Any] | None = fld(None, opaque())
    """Agentic duration controls (kept unparsed). Default null."""


@dataclass(frozen=True, kw_only=True)
class KVCapacityFractionLoad:
    """Load sized from a KV-capacity fraction (AISimulate `recommend` only; rejected here)."""

    TYPE: ClassVar[str] = "kv_capacity_fraction"
    fraction: float = fld(check=number(gt=0, le=1))
    """Fraction of the KV pool to fill."""


Load = ConcurrencyLoad | PoissonLoad | ConstantRateLoad | TraceTimestampsLoad | KVCapacityFractionLoad
Source = SyntheticSource | SyntheticSessionSource | TraceSource


@dataclass(frozen=True, kw_only=True)
class Stop:
    """When the load generator stops (exactly one count condition for synthetic sources)."""

    requests: int | None = fld(None, integer(gt=0, nullable=True))
    """Number of requests to generate."""
    requests_per_load_unit: float | None = fld(None, number(gt=0, nullable=True))
    """Requests per unit of load (concurrency, or requests_per_second for rate loads)."""
    sessions: int | None = fld(None, integer(gt=0, nullable=True))
    """Number of sessions (session sources)."""
    sessions_per_load_unit: float | None = fld(None, number(gt=0, nullable=True))
    """Sessions per unit of load (session sources)."""
    max_virtual_time_seconds: float | None = fld(None, number(gt=0, nullable=True))
    """Soft cutoff in simulated seconds (trace sources only)."""

    def num_requests(self, load: Load) -> int | None:
        """Requests to generate, or None when the stop is not a request count.

        ``requests_per_load_unit`` resolves to ``max(1, round_half_even(x * unit))`` where the
        unit is ``concurrency`` for a concurrency load and ``requests_per_second`` for a rate
        load (checked against AISimulate: 0.25 x 10 rps -> 2 requests).
        """
        if self.requests is not None:
            return self.requests
        if self.requests_per_load_unit is None:
            return None
        return max(1, round(self.requests_per_load_unit * load_unit(load)))

    def num_sessions(self, load: Load) -> int | None:
        """Sessions to generate (session sources), resolved like :meth:`num_requests`."""
        if self.sessions is not None:
            return self.sessions
        if self.sessions_per_load_unit is None:
            return None
        return max(1, round(self.sessions_per_load_unit * load_unit(load)))


def load_unit(load: Load) -> float:
    """The quantity a ``*_per_load_unit`` stop multiplies."""
    if isinstance(load, ConcurrencyLoad):
        return float(load.concurrency)
    if isinstance(load, PoissonLoad | ConstantRateLoad):
        rate = load.requests_per_second
        return float(rate if rate is not None else load.sessions_per_second or 0.0)
    raise ValueError(f"load type {load.TYPE!r} has no load unit")


@dataclass(frozen=True, kw_only=True)
class Traffic:
    """What requests arrive and when.  Omitted: 100 synthetic 1024/128 requests at concurrency 10."""

    source: Source = fld(check=Tagged("source"))
    """Where request lengths come from (required, tagged by 'type')."""
    load: Load = fld(check=Tagged("load", default_tag="concurrency"))
    """Arrival process (required key; 'type' defaults to concurrency)."""
    stop: Stop = fld(None, Section(Stop, nullable=True))
    """Stop condition; an empty Stop when omitted."""


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
    capacity: Capacity = fld(None, Tagged("capacity", default_tag="default"))
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
    database_mode: str | None = fld(
        None, choice(*_DATABASE_MODES, nullable=True, normalize=_upper)
    )
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

    parallelism: Parallelism = fld(None, Section(Parallelism))
    """GPU split. Defaults: all degrees 1."""
    scheduler: Scheduler = fld(None, Section(Scheduler))
    """Scheduler limits."""
    kv_cache: KVCache = fld(None, Section(KVCache))
    """KV cache settings."""
    timing: Timing = fld(None, Tagged("timing", default_tag="default"))
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
    timing_mode: str = fld(
        "destination_missing", choice("destination_missing", "full_prompt")
    )
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
    speculation: Speculation | None = fld(
        None, Tagged("speculation", tag_key="kind", nullable=True, optional=True)
    )
    """Speculative decoding (tagged by 'kind'; exclusive with nextn). Default null."""
    kv_transfer: KVTransfer | None = fld(None, Section(KVTransfer, nullable=True, optional=True))
    """Prefill -> decode transfer (disaggregated only). Default null."""
    tokenization: Tokenization | None = fld(
        None, Section(Tokenization, nullable=True, optional=True)
    )
    """Tokenizer delay model. Default null (no delay)."""
    afd: Mapping[str, Any] | None = fld(None, opaque())
    """Attention-FFN disaggregation topology (mode 'afd'), kept unparsed. Default null."""
    workers: Mapping[str, Worker] = fld(None, None)
    """Worker roles by name: {'aggregated'} or {'prefill', 'decode'} (read-only mapping)."""
    encoder: Mapping[str, Any] | None = fld(None, None, yaml=False)
    """``workers.encoder`` (EPD), kept unparsed. Default null."""


# --------------------------------------------------------------------------- evaluation


@dataclass(frozen=True, kw_only=True)
class Sla:
    """Latency targets for goodput: ttft_ms/itl_ms, or e2e_ms alone."""

    ttft_ms: float | None = fld(None, number(gt=0, nullable=True))
    """Time-to-first-token bound, ms."""
    itl_ms: float | None = fld(None, number(gt=0, nullable=True))
    """Inter-token latency bound, ms."""
    e2e_ms: float | None = fld(None, number(gt=0, nullable=True))
    """End-to-end latency bound, ms (exclusive with ttft_ms/itl_ms)."""


@dataclass(frozen=True, kw_only=True)
class Evaluation:
    """Post-processing of the run."""

    sla: Sla | None = fld(None, Section(Sla, nullable=True, optional=True))
    """Latency targets. Default null."""


@dataclass(frozen=True, kw_only=True)
class Resources:
    """Host resource limits of AISimulate (no effect on simulated results)."""

    initialization_timeout_seconds: float = fld(60.0, number(gt=0))
    """Default 60."""
    shutdown_timeout_seconds: float = fld(5.0, number(gt=0))
    """Default 5."""
    memory_limit_gb: float | str = fld("auto", _positive_or_auto)
    """GB or 'auto'. Default 'auto'."""
    cpu_limit: int | str = fld("auto", int_or("auto"))
    """CPUs or 'auto'. Default 'auto'."""
    reserve_memory_gb: float = fld(1.0, number(ge=0))
    """Default 1."""
    reserve_memory_fraction: float = fld(0.0, number(ge=0, lt=1))
    """In [0, 1). Default 0."""
    available_memory_fraction: float = fld(0.9, number(gt=0, le=1))
    """Default 0.9."""


@dataclass(frozen=True, kw_only=True)
class Execution:
    """AISimulate's ``execution`` section (validated, then kept as a mapping)."""

    resources: Resources = fld(None, Section(Resources))
    """Host resource limits."""


@dataclass(frozen=True, kw_only=True)
class Config:
    """A whole validated config."""

    traffic: Traffic
    """Requests and arrivals."""
    engine: Engine
    """The deployment."""
    evaluation: Evaluation | None = None
    """Post-processing; None when the section is absent."""
    execution: Mapping[str, Any] | None = None
    """The validated ``execution`` section as a read-only mapping; None when absent."""
    source_path: str = "<config>"
    """Where the config came from (file path or a label)."""
