"""Raw YAML mapping -> typed :class:`~aisim.config.schema.Config`, stopping at the first error.

The walk is deterministic: at every mapping, unknown keys first (in file order), then the fields
in declaration order (recursively), then that section's cross-field rules (a *hook*).  Sections
whose defaults depend on other sections read them from a :class:`Ctx` filled on the way down
(``engine.backend`` is read before ``engine.workers``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from aisim.config import registry as reg
from aisim.config.checks import NOTHING, FrozenMap, Invalid, opaque, suggest, typed
from aisim.config.schema import (
    HOST_ONLY_WORKER_KEYS,
    Config,
    ConcurrencyLoad,
    ConstantRateLoad,
    DefaultCapacity,
    DefaultTiming,
    Engine,
    Evaluation,
    Execution,
    FixedCapacity,
    FixedTiming,
    KVCache,
    NgramSpeculation,
    PoissonLoad,
    Scheduler,
    SchemeSpeculation,
    Section,
    SessionShape,
    Sla,
    Stop,
    SyntheticSessionSource,
    SyntheticSource,
    Tagged,
    TraceSource,
    TraceTimestampsLoad,
    Traffic,
    Worker,
)

TOP_LEVEL_SECTIONS = ("traffic", "engine", "evaluation", "execution")
ROLES = ("aggregated", "prefill", "decode")
WORKER_KEYS = (*ROLES, "encoder")


@dataclasses.dataclass
class Ctx:
    """What a section needs to know about the rest of the config while it is built."""

    base_dir: Path
    backend: str = "vllm"
    mode: str = "aggregated"
    role: str = "aggregated"


Hook = Callable[[dict[str, Any], Mapping[str, Any], str, Ctx], None]
HOOKS: dict[type, Hook] = {}


def hook(cls: type) -> Callable[[Hook], Hook]:
    """Register the cross-field rules of section ``cls``."""

    def register(fn: Hook) -> Hook:
        HOOKS[cls] = fn
        return fn

    return register


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def yaml_fields(cls: type) -> list[dataclasses.Field[Any]]:
    """The dataclass fields of ``cls`` that are YAML keys, in declaration order."""
    return [f for f in dataclasses.fields(cls) if f.metadata.get("yaml", True)]


def _mapping(raw: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise Invalid(path, "must be a mapping", typed(raw))
    return raw


def _unknown_key(path: str, key: Any, allowed: Sequence[str], noun: str = "keys") -> Invalid:
    near = suggest(str(key), allowed)
    what = f"unknown key (did you mean {near!r}?)" if near else "unknown key"
    return Invalid(_join(path, str(key)), what, fix=f"allowed {noun}: {', '.join(allowed)}")


def build(
    cls: type,
    raw: Any,
    path: str,
    ctx: Ctx,
    *,
    listed_extra: Sequence[str] = (),
    noun: str = "keys",
) -> Any:
    """Build section ``cls`` from ``raw``: unknown keys, fields, then the section's hook."""
    raw = _mapping(raw, path)
    allowed = [f.name for f in yaml_fields(cls)]
    for key in raw:
        if key not in allowed:
            raise _unknown_key(path, key, [*listed_extra, *allowed], noun)
    values: dict[str, Any] = {}
    for f in yaml_fields(cls):
        values[f.name] = _field_value(f, raw, path, ctx)
    if cls in HOOKS:
        HOOKS[cls](values, raw, path, ctx)
    return cls(**values)


def _field_value(f: dataclasses.Field[Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> Any:
    check = f.metadata.get("check")
    sub = _join(path, f.name)
    present = f.name in raw
    if isinstance(check, Section | Tagged):
        if not present:
            if f.default is dataclasses.MISSING:
                raise Invalid(sub, "is required")
            if check.optional:
                return None
            value: Any = {}
        else:
            value = raw[f.name]
            if value is None:
                if check.nullable:
                    return None
                raise Invalid(sub, "must be a mapping", typed(None))
        if isinstance(check, Section):
            return build(check.cls, value, sub, ctx)
        return build_tagged(check, value, sub, ctx)
    if not present:
        if f.default is dataclasses.MISSING:
            raise Invalid(sub, "is required")
        return f.default
    if check is None:  # filled by a hook
        return raw[f.name]
    return check(raw[f.name], sub)


def _same_as_default(value: Any, default: Any) -> bool:
    if default is dataclasses.MISSING:
        return False
    if value is None or default is None:
        return value is None and default is None
    return type(value) is type(default) and value == default


def build_tagged(marker: Tagged, raw: Any, path: str, ctx: Ctx) -> Any:
    """Build a section whose class is chosen by its tag (``type:`` or ``kind:``)."""
    raw = _mapping(raw, path)
    table = reg.REGISTRIES[marker.registry]
    tags = [t for t in table if t != reg.WILDCARD]
    key = marker.tag_key
    tag = raw.get(key, marker.default_tag)
    tag_path = _join(path, key)
    if tag is None:
        raise Invalid(tag_path, "is required", fix=f"one of {', '.join(map(repr, tags))}")
    if not isinstance(tag, str) or (tag not in table and reg.WILDCARD not in table):
        near = suggest(str(tag), tags)
        hint = f"did you mean {near!r}? " if near else ""
        raise Invalid(
            tag_path, f"unknown {marker.registry} type", tag, f"{hint}valid: {', '.join(tags)}"
        )
    cls = table.get(tag, table.get(reg.WILDCARD))
    if marker.registry == "load" and tag in reg.RECOMMEND_ONLY_LOADS:
        raise Invalid(
            tag_path,
            "is only understood by AISimulate's recommend command, not by predict",
            tag,
            "use concurrency, poisson or constant_rate",
        )
    own = {f.name for f in yaml_fields(cls)}
    keep: dict[str, Any] = {}
    for k, v in raw.items():
        if k == key and k not in own:
            continue
        owners = [
            (t, f) for t, c in table.items() if c is not cls
            for f in yaml_fields(c) if f.name == k
        ]
        if k in own or not owners:
            keep[k] = v
            continue
        # A key of a sibling type: AISimulate ignores it at its default value only.
        if any(_same_as_default(v, f.default) for _, f in owners):
            continue
        where = ", ".join(repr(t) for t, _ in owners)
        raise Invalid(
            _join(path, str(k)),
            f"is not accepted by {marker.registry} type {tag!r}",
            v,
            f"it belongs to {marker.registry} type {where} only",
        )
    noun = f"keys for {marker.registry} type {tag!r}"
    if key in own:
        keep[key] = tag
        return build(cls, keep, path, ctx, noun=noun)
    return build(cls, keep, path, ctx, listed_extra=(key,), noun=noun)


# --------------------------------------------------------------------------- traffic


@hook(SyntheticSource)
def _synthetic(v: dict[str, Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> None:
    if v["cached_prefix_tokens"] > v["input_tokens"]:
        raise Invalid(
            _join(path, "cached_prefix_tokens"),
            f"must not exceed input_tokens ({v['input_tokens']})",
            v["cached_prefix_tokens"],
        )


@hook(SessionShape)
def _session(v: dict[str, Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> None:
    if v["shared_prefix_ratio"] > 0 and v["prefix_groups"] == 0:
        raise Invalid(
            _join(path, "prefix_groups"),
            "must be positive when shared_prefix_ratio > 0",
            0,
            "set the number of prefix groups",
        )


@hook(TraceSource)
def _trace(v: dict[str, Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> None:
    fmt, paths = v["format"], v["paths"]
    if fmt != "dynamo" and len(paths) != 1:
        raise Invalid(
            _join(path, "paths"),
            f"trace format {fmt!r} reads exactly one file",
            list(paths),
            "only format 'dynamo' takes several",
        )
    if v["nested_timestamp_basis"] is not None and fmt != "weka":
        raise Invalid(
            _join(path, "nested_timestamp_basis"),
            "is only valid for trace format 'weka'",
            v["nested_timestamp_basis"],
        )
    if v["block_size"] is None:
        v["block_size"] = reg.DEFAULT_TRACE_BLOCK_SIZE
    resolved = []
    for i, p in enumerate(paths):
        full = (ctx.base_dir / Path(p).expanduser()).resolve()
        if not full.is_file():
            raise Invalid(
                f"{path}.paths[{i}]",
                "trace file not found",
                str(full),
                "relative paths are read from the config file's folder",
            )
        resolved.append(str(full))
    v["paths"] = tuple(resolved)


@hook(PoissonLoad)
def _poisson(v: dict[str, Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> None:
    if v["seed"] is None:
        v["seed"] = reg.DEFAULT_POISSON_SEED


@hook(TraceTimestampsLoad)
def _trace_load(v: dict[str, Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> None:
    if v["speedup"] is None:
        v["speedup"] = 1.0


_REQUEST_STOPS = ("requests", "requests_per_load_unit")
_SESSION_STOPS = ("sessions", "sessions_per_load_unit")


@hook(Traffic)
def _traffic(v: dict[str, Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> None:
    source, load = v["source"], v["load"]
    stop = v["stop"] = v["stop"] if v["stop"] is not None else Stop()
    stop_path, load_path = _join(path, "stop"), _join(path, "load")
    given = [k for k in (*_REQUEST_STOPS, *_SESSION_STOPS) if getattr(stop, k) is not None]
    if isinstance(source, TraceSource):
        if not isinstance(load, TraceTimestampsLoad | ConcurrencyLoad):
            raise Invalid(
                _join(load_path, "type"),
                "trace sources need a trace_timestamps or concurrency load",
                load.TYPE,
            )
        if given:
            raise Invalid(
                _join(stop_path, given[0]),
                "is not accepted for trace sources (they stop when the trace ends)",
                getattr(stop, given[0]),
                "only max_virtual_time_seconds is",
            )
        if (
            isinstance(load, TraceTimestampsLoad)
            and load.agentic_lanes is not None
            and source.format not in ("weka", "agentic_mooncake", "dynamo")
        ):
            raise Invalid(
                _join(load_path, "agentic_lanes"),
                "needs an agentic trace format (weka, agentic_mooncake or dynamo)",
                load.agentic_lanes,
            )
        return
    session = isinstance(source, SyntheticSessionSource)
    noun = "synthetic-session" if session else "synthetic"
    if isinstance(load, TraceTimestampsLoad):
        raise Invalid(
            _join(load_path, "type"),
            f"a {noun} source cannot use trace timestamps",
            load.TYPE,
            "use concurrency, poisson or constant_rate",
        )
    if isinstance(load, PoissonLoad | ConstantRateLoad):
        need, wrong = (
            ("sessions_per_second", "requests_per_second")
            if session
            else ("requests_per_second", "sessions_per_second")
        )
        if getattr(load, wrong) is not None:
            raise Invalid(
                _join(load_path, wrong),
                f"does not match a {noun} source",
                getattr(load, wrong),
                f"use {need}",
            )
        if getattr(load, need) is None:
            raise Invalid(
                _join(load_path, need), f"is required for a {load.TYPE} load of a {noun} source"
            )
    if stop.max_virtual_time_seconds is not None:
        raise Invalid(
            _join(stop_path, "max_virtual_time_seconds"),
            "is only valid for trace sources",
            stop.max_virtual_time_seconds,
        )
    wanted = _SESSION_STOPS if session else _REQUEST_STOPS
    if len(given) > 1:
        raise Invalid(
            stop_path,
            "must set exactly one count condition",
            {k: getattr(stop, k) for k in given},
            f"keep one of {' or '.join(wanted)}",
        )
    if not given or given[0] not in wanted:
        got = {given[0]: getattr(stop, given[0])} if given else raw.get("stop")
        raise Invalid(
            stop_path,
            f"a {noun} source needs a {'session' if session else 'request'} stop",
            got,
            f"set {' or '.join(wanted)}, e.g. stop: {{{wanted[0]}: 100}}",
        )


# --------------------------------------------------------------------------- workers


@hook(Scheduler)
def _scheduler(v: dict[str, Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> None:
    if v["max_sequences"] is None:
        v["max_sequences"] = reg.DEFAULT_MAX_SEQUENCES.get(ctx.role, 256)
    for key, default, owner in (
        ("prefill_schedule_interval", 1, "vllm"),
        ("prefill_decode_interval", 0, "sglang"),
    ):
        if v[key] != default and ctx.backend != owner:
            raise Invalid(
                _join(path, key),
                f"is a {owner} setting and must stay {default} for backend {ctx.backend!r}",
                v[key],
            )


@hook(FixedCapacity)
def _fixed_capacity(v: dict[str, Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> None:
    if v["blocks"] is None and v["bytes"] is None:
        raise Invalid(
            path, "a fixed capacity needs blocks or bytes", fix="e.g. {type: fixed, blocks: 16384}"
        )
    if v["blocks"] is not None and v["bytes"] is not None:
        raise Invalid(
            _join(path, "bytes"), "cannot be combined with blocks", v["bytes"], "give only one"
        )


@hook(DefaultCapacity)
def _default_capacity(v: dict[str, Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> None:
    if v["memory_fraction"] is None:
        v["memory_fraction"] = reg.DEFAULT_MEMORY_FRACTION[ctx.backend]


@hook(KVCache)
def _kv_cache(v: dict[str, Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> None:
    bs_path = _join(path, "block_size")
    if v["block_size"] is None:
        v["block_size"] = reg.DEFAULT_BLOCK_SIZE[ctx.backend]
    elif v["block_size"] < 2 and ctx.backend in ("vllm", "trtllm"):
        raise Invalid(bs_path, f"must be >= 2 for backend {ctx.backend!r}", v["block_size"])
    if v["prefix_match_unit"] is not None and v["state_cache"] is None:
        raise Invalid(
            _join(path, "prefix_match_unit"), "needs state_cache", v["prefix_match_unit"]
        )
    cap = v["capacity"]
    if isinstance(cap, FixedCapacity) and cap.bytes is not None:
        if raw.get("block_size") is None:
            raise Invalid(bs_path, "must be given explicitly when the capacity is set in bytes")
        bpt = v["bytes_per_token"]
        if not isinstance(bpt, int):
            raise Invalid(
                _join(path, "bytes_per_token"),
                "must be a number of bytes when the capacity is set in bytes",
                bpt,
            )
        if cap.bytes // (v["block_size"] * bpt) < 1:
            raise Invalid(
                _join(path, "capacity.bytes"),
                f"holds no whole block ({v['block_size']} tokens x {bpt} bytes)",
                cap.bytes,
            )


@hook(DefaultTiming)
def _default_timing(v: dict[str, Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> None:
    if v["fpm_parquet_path"] is not None and v["forward_model"] != "fpm":
        raise Invalid(
            _join(path, "fpm_parquet_path"),
            "needs forward_model: fpm",
            v["fpm_parquet_path"],
        )


@hook(FixedTiming)
def _fixed_timing(v: dict[str, Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> None:
    for key in ("prefill_ms", "decode_ms"):
        if v[key] is None:
            raise Invalid(
                _join(path, key), "is required for fixed timing", fix="give both prefill_ms and decode_ms"
            )


@hook(Worker)
def _worker(v: dict[str, Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> None:
    if ctx.backend != "sglang":
        for key in ("host_loop", "vision"):
            if v[key] not in (None, False):
                raise Invalid(
                    _join(path, key), "is only supported with backend 'sglang'", raw.get(key)
                )


def build_workers(raw: Any, path: str, ctx: Ctx) -> tuple[FrozenMap, Any]:
    """``engine.workers``: the role set must match the mode; returns (roles, encoder)."""
    raw = _mapping({} if raw is NOTHING else raw, path)
    for key in raw:
        if key not in WORKER_KEYS:
            raise _unknown_key(path, key, WORKER_KEYS, "worker roles")
    present = [r for r in ROLES if raw.get(r) is not None]
    if ctx.mode == "aggregated":
        wanted = ("aggregated",)
    elif ctx.mode == "disaggregated":
        wanted = ("prefill", "decode")
    else:
        wanted = tuple(present)
    for role in present:
        if role not in wanted:
            raise Invalid(
                _join(path, role),
                f"is not a worker role of {ctx.mode} mode",
                fix=f"{ctx.mode} mode uses {' and '.join(wanted)}",
            )
    for role in wanted:
        if role not in present:
            raise Invalid(
                _join(path, role),
                f"is required in {ctx.mode} mode",
                fix=f"{ctx.mode} mode uses {' and '.join(wanted)}",
            )
    workers = {}
    for role in present:
        role_raw = _mapping(raw[role], _join(path, role))
        if role == "decode":
            for key in HOST_ONLY_WORKER_KEYS:
                if key in role_raw:
                    raise Invalid(
                        _join(path, f"decode.{key}"),
                        "is not accepted for the decode role",
                        fix="it applies to aggregated and prefill workers only",
                    )
        ctx.role = role
        workers[role] = build(Worker, role_raw, _join(path, role), ctx)
    encoder = opaque()(raw.get("encoder"), _join(path, "encoder"))
    return FrozenMap(workers), encoder


# --------------------------------------------------------------------------- engine

ESTIMATOR_POLICIES = (
    "estimation_mode", "database_mode", "fallback_policy", "enable_shared_layer",
    "transfer_policy", "estimator_config", "decoder_replay", "strict_provenance",
)  # fmt: skip
"""Engine fields AISimulate rejects at a non-default value unless every role has default timing."""

MODEL_CONTROLS = (
    "nextn", "gemm_quant_mode", "moe_quant_mode", "kvcache_quant_mode", "fmha_quant_mode",
    "comm_quant_mode", "attention_backend", "moe_backend", "moe_kernel_source", "enable_eplb",
    "wideep_num_slots",
)  # fmt: skip
"""Engine fields that also need default timing in every role (MTP, quantization, kernels)."""

_ENGINE_DEFAULTS = {
    "estimation_mode": "auto", "database_mode": "SILICON", "fallback_policy": "deny",
    "estimator_config": FrozenMap(), "decoder_replay": False, "nextn": 0, "enable_eplb": False,
}  # fmt: skip


def _check_hardware(value: str, path: str) -> None:
    if value == "auto":
        raise Invalid(
            path,
            "'auto' is only meaningful for AISimulate's recommend command",
            value,
            f"name a system, e.g. {reg.KNOWN_HARDWARE[0]!r}",
        )
    if value not in reg.KNOWN_HARDWARE:
        near = suggest(value, reg.KNOWN_HARDWARE)
        hint = f"did you mean {near!r}? " if near else ""
        raise Invalid(
            path, "unknown hardware", value, f"{hint}known: {', '.join(reg.KNOWN_HARDWARE)}"
        )


@hook(Engine)
def _engine(v: dict[str, Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> None:
    _check_hardware(v["hardware"], _join(path, "hardware"))
    known = reg.KNOWN_BACKEND_VERSIONS.get(v["backend"])
    if v["backend_version"] is not None and known and v["backend_version"] not in known:
        raise Invalid(
            _join(path, "backend_version"),
            f"has no performance data for backend {v['backend']!r} on {v['hardware']!r}",
            v["backend_version"],
            f"known: {', '.join(known)}, or null for the latest",
        )
    nextn, accepted = v["nextn"], v["nextn_accepted"]
    acc_path = _join(path, "nextn_accepted")
    if nextn > 0 and accepted is None:
        raise Invalid(
            acc_path,
            f"is required when nextn > 0 (nextn is {nextn})",
            fix="give the mean number of accepted MTP tokens per step, in [0, nextn]",
        )
    if accepted is not None and nextn == 0:
        raise Invalid(acc_path, "needs nextn > 0", accepted, "set engine.nextn or remove it")
    if accepted is not None and accepted > nextn:
        raise Invalid(acc_path, f"must be within [0, nextn] = [0, {nextn}]", accepted)
    if v["speculation"] is not None and (nextn > 0 or accepted is not None):
        raise Invalid(
            _join(path, "speculation"),
            "cannot be combined with nextn/nextn_accepted",
            fix="use either native MTP (nextn) or speculation",
        )
    if v["mode"] == "afd" and v["afd"] is None:
        raise Invalid(_join(path, "afd"), "is required when mode is 'afd'")
    if v["kv_transfer"] is not None and v["mode"] != "disaggregated":
        raise Invalid(
            _join(path, "kv_transfer"),
            f"is only valid in disaggregated mode, not {v['mode']}",
            fix="remove it or set engine.mode: disaggregated",
        )
    if v["estimator_config"] is None:
        v["estimator_config"] = FrozenMap()
    ctx.backend, ctx.mode = v["backend"], v["mode"]
    wpath = _join(path, "workers")
    if "workers" in raw and raw["workers"] is None:
        raise Invalid(wpath, "must be a mapping", typed(None))
    v["workers"], v["encoder"] = build_workers(raw.get("workers", NOTHING), wpath, ctx)
    for role, worker in v["workers"].items():
        if worker.hardware is None:
            continue
        hw_path = _join(wpath, f"{role}.hardware")
        if v["mode"] != "disaggregated":
            raise Invalid(
                hw_path,
                "per-role hardware needs disaggregated prefill/decode workers",
                worker.hardware,
                "set engine.hardware instead",
            )
        _check_hardware(worker.hardware, hw_path)
    other = [(r, w) for r, w in v["workers"].items() if not isinstance(w.timing, DefaultTiming)]
    if other:
        role, worker = other[0]
        for key in (*ESTIMATOR_POLICIES, *MODEL_CONTROLS):
            if not _same_as_default(v[key], _ENGINE_DEFAULTS.get(key)):
                raise Invalid(
                    _join(path, key),
                    f"needs default timing in every worker role, but {wpath}.{role}.timing "
                    f"is {worker.timing.TYPE!r}",
                    v[key],
                    "remove it or use timing: {type: default}",
                )


@hook(NgramSpeculation)
def _ngram(v: dict[str, Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> None:
    if len(v["acceptance_rates"]) != v["num_speculative_tokens"]:
        raise Invalid(
            _join(path, "acceptance_rates"),
            f"must list one rate per speculative token ({v['num_speculative_tokens']})",
            list(v["acceptance_rates"]),
        )


@hook(SchemeSpeculation)
def _scheme(v: dict[str, Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> None:
    if v["params"] is None:
        v["params"] = FrozenMap()


@hook(Sla)
def _sla(v: dict[str, Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> None:
    if v["e2e_ms"] is not None and (v["ttft_ms"] is not None or v["itl_ms"] is not None):
        raise Invalid(
            _join(path, "e2e_ms"),
            "cannot be combined with ttft_ms/itl_ms",
            v["e2e_ms"],
            "give e2e_ms alone, or ttft_ms and/or itl_ms",
        )


# --------------------------------------------------------------------------- top level


DEFAULT_TRAFFIC: dict[str, Any] = {
    "source": {"type": "synthetic", "input_tokens": 1024, "output_tokens": 128},
    "load": {"type": "concurrency", "concurrency": 10},
    "stop": {"requests": 100},
}
"""What ``traffic`` means when the section is absent (no merge with a partial section)."""


def _top_section(raw: Mapping[str, Any], key: str) -> Any:
    value = raw[key]
    if value is None:
        raise Invalid(key, "must be a mapping", typed(None), f"remove '{key}:' or fill it in")
    return value


def build_config(raw: Any, source: str, base_dir: Path) -> Config:
    """The whole tree, or :class:`Invalid` for the first problem found."""
    if not isinstance(raw, Mapping):
        raise Invalid("", "the top level must be a mapping of sections", typed(raw))
    for key in raw:
        if key not in TOP_LEVEL_SECTIONS:
            near = suggest(str(key), TOP_LEVEL_SECTIONS)
            hint = f" (did you mean {near!r}?)" if near else ""
            raise Invalid(
                "",
                f"unknown top-level section {key!r}{hint}",
                fix=f"known sections: {', '.join(sorted(TOP_LEVEL_SECTIONS))}",
            )
    ctx = Ctx(base_dir=base_dir)
    traffic_raw = _top_section(raw, "traffic") if "traffic" in raw else DEFAULT_TRAFFIC
    traffic = build(Traffic, traffic_raw, "traffic", ctx)
    if "engine" not in raw:
        raise Invalid("engine", "section is required", fix="give at least model and hardware")
    engine = build(Engine, _top_section(raw, "engine"), "engine", ctx)
    evaluation = None
    if "evaluation" in raw:
        evaluation = build(Evaluation, _top_section(raw, "evaluation"), "evaluation", ctx)
    execution = None
    if "execution" in raw:
        execution_raw = _top_section(raw, "execution")
        build(Execution, execution_raw, "execution", ctx)
        execution = opaque()(execution_raw, "execution")
    images = getattr(traffic.source, "images", None)
    if images is not None and engine.encoder is None:
        native = engine.backend == "sglang" and engine.mode == "aggregated"
        if not native:
            raise Invalid(
                "traffic.source.images",
                "needs engine.workers.encoder, or backend 'sglang' in aggregated mode",
            )
    if engine.encoder is not None and images is None:
        raise Invalid("engine.workers.encoder", "needs traffic.source.images (EPD workloads)")
    return Config(
        traffic=traffic,
        engine=engine,
        evaluation=evaluation,
        execution=execution,
        source_path=source,
    )
