"""Raw YAML mapping -> typed :class:`~aisim.config.schema.Config`: the cross-field rules.

The generic walk is in :mod:`aisim.config.build`; this module registers each section's hook
(defaults that depend on other sections, AISimulate's cross-field rules) and builds the roles
of ``engine.workers`` and the top level.  Sections whose defaults depend on other sections read
them from a :class:`~aisim.config.build.Ctx` filled on the way down (``engine.backend`` is read
before ``engine.workers``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aisim.config import registry as reg
from aisim.config import validate_traffic  # noqa: F401  (registers the traffic hooks)
from aisim.config.build import Ctx, build, hook, join, mapping, same_as_default, unknown_key
from aisim.config.checks import NOTHING, FrozenMap, Invalid, opaque, suggest, typed
from aisim.config.estimator import check_transfer_policy
from aisim.config.schema import (
    HOST_ONLY_WORKER_KEYS,
    Config,
    DefaultCapacity,
    DefaultTiming,
    Engine,
    Evaluation,
    Execution,
    FixedCapacity,
    FixedTiming,
    KVCache,
    NgramSpeculation,
    Scheduler,
    SchemeSpeculation,
    Sla,
    Traffic,
    Worker,
)

TOP_LEVEL_SECTIONS = ("traffic", "engine", "evaluation", "execution")
ROLES = ("aggregated", "prefill", "decode")
WORKER_KEYS = (*ROLES, "encoder")
BACKEND_NAMES = {"vllm": "vLLM", "trtllm": "TensorRT-LLM", "sglang": "SGLang"}


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
                join(path, key),
                f"is a {BACKEND_NAMES[owner]} setting and must stay {default} "
                f"for backend {ctx.backend!r}",
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
            join(path, "bytes"), "cannot be combined with blocks", v["bytes"], "give only one"
        )


@hook(DefaultCapacity)
def _default_capacity(v: dict[str, Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> None:
    if v["memory_fraction"] is None:
        v["memory_fraction"] = reg.DEFAULT_MEMORY_FRACTION[ctx.backend]


@hook(KVCache)
def _kv_cache(v: dict[str, Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> None:
    bs_path = join(path, "block_size")
    if v["block_size"] is None:
        v["block_size"] = reg.DEFAULT_BLOCK_SIZE[ctx.backend]
    elif v["block_size"] < 2 and ctx.backend in ("vllm", "trtllm"):
        raise Invalid(bs_path, f"must be >= 2 for {BACKEND_NAMES[ctx.backend]}", v["block_size"])
    if v["prefix_match_unit"] is not None and v["state_cache"] is None:
        raise Invalid(join(path, "prefix_match_unit"), "needs state_cache", v["prefix_match_unit"])
    cap = v["capacity"]
    if isinstance(cap, FixedCapacity) and cap.bytes is not None:
        if raw.get("block_size") is None:
            raise Invalid(bs_path, "must be given explicitly when the capacity is set in bytes")
        bpt = v["bytes_per_token"]
        if not isinstance(bpt, int):
            raise Invalid(
                join(path, "bytes_per_token"),
                "must be a number of bytes when the capacity is set in bytes",
                bpt,
            )
        if cap.bytes // (v["block_size"] * bpt) < 1:
            raise Invalid(
                join(path, "capacity.bytes"),
                f"holds no whole block ({v['block_size']} tokens x {bpt} bytes)",
                cap.bytes,
            )


@hook(DefaultTiming)
def _default_timing(v: dict[str, Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> None:
    check_transfer_policy(v["transfer_policy"], join(path, "transfer_policy"))
    if v["fpm_parquet_path"] is not None and v["forward_model"] != "fpm":
        raise Invalid(
            join(path, "fpm_parquet_path"),
            "needs forward_model: fpm",
            v["fpm_parquet_path"],
        )


@hook(FixedTiming)
def _fixed_timing(v: dict[str, Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> None:
    for key in ("prefill_ms", "decode_ms"):
        if v[key] is None:
            raise Invalid(
                join(path, key),
                "is required for fixed timing",
                fix="give both prefill_ms and decode_ms",
            )


@hook(Worker)
def _worker(v: dict[str, Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> None:
    if ctx.backend != "sglang":
        for key in ("host_loop", "vision"):
            if v[key] not in (None, False):
                raise Invalid(
                    join(path, key), "is only supported with backend 'sglang'", raw.get(key)
                )


def build_workers(raw: Any, path: str, ctx: Ctx) -> tuple[FrozenMap, Any]:
    """``engine.workers``: the role set must match the mode; returns (roles, encoder)."""
    raw = mapping({} if raw is NOTHING else raw, path)
    for key in raw:
        if key not in WORKER_KEYS:
            raise unknown_key(path, key, WORKER_KEYS, "worker roles")
    present = [r for r in ROLES if raw.get(r) is not None]
    if ctx.mode == "aggregated":
        wanted = ("aggregated",)
    elif ctx.mode == "disaggregated":
        wanted = ("prefill", "decode")
    else:
        wanted = tuple(present)
    uses = f"{ctx.mode} mode uses the worker role(s) {' and '.join(map(repr, wanted))}"
    for role in present:
        if role not in wanted:
            raise Invalid(join(path, role), f"is not a worker role of {ctx.mode} mode", fix=uses)
    for role in wanted:
        if role not in present:
            raise Invalid(join(path, role), f"is required in {ctx.mode} mode", fix=uses)
    workers = {}
    for role in present:
        role_raw = mapping(raw[role], join(path, role))
        if role == "decode":
            for key in HOST_ONLY_WORKER_KEYS:
                if key in role_raw:
                    raise Invalid(
                        join(path, f"decode.{key}"),
                        "is not accepted for the decode role",
                        fix="it applies to aggregated and prefill workers only",
                    )
        ctx.role = role
        workers[role] = build(Worker, role_raw, join(path, role), ctx)
    encoder = opaque()(raw.get("encoder"), join(path, "encoder"))
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
    if value in reg.UNPRICED_HARDWARE:
        raise Invalid(
            path,
            "AISimulate 0.13 ships no performance database for this system",
            value,
            f"use one of: {', '.join(reg.KNOWN_HARDWARE)}",
        )
    if value not in reg.KNOWN_HARDWARE:
        near = suggest(value, reg.KNOWN_HARDWARE)
        hint = f"did you mean {near!r}? " if near else ""
        raise Invalid(
            path, "unknown hardware", value, f"{hint}known: {', '.join(reg.KNOWN_HARDWARE)}"
        )


def _check_backend(v: dict[str, Any], path: str) -> None:
    served = reg.BACKEND_VERSION_SLOTS[v["hardware"]]
    if v["backend"] not in served:
        raise Invalid(
            path,
            f"AISimulate 0.13 has no performance database for this backend on {v['hardware']!r}",
            v["backend"],
            f"use {' or '.join(sorted(served))} there",
        )


def _backend_version(v: dict[str, Any], path: str) -> str | None:
    """The concrete version asked for (an alias resolved), or None for the current one."""
    slots = reg.BACKEND_VERSION_SLOTS[v["hardware"]][v["backend"]]
    version = v["backend_version"]
    if version is None:
        return version
    if version in slots:
        return slots[version]
    if version in slots.values():
        return version
    accepted = ", ".join(f"{name} = {ver}" for name, ver in slots.items())
    raise Invalid(
        path,
        f"is not a version AISimulate 0.13 accepts for backend {v['backend']!r} on "
        f"{v['hardware']!r}",
        version,
        f"use {accepted}, the alias {' / '.join(repr(n) for n in slots)}, or null for current",
    )


@hook(Engine)
def _engine(v: dict[str, Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> None:
    _check_hardware(v["hardware"], join(path, "hardware"))
    _check_backend(v, join(path, "backend"))
    v["backend_version"] = _backend_version(v, join(path, "backend_version"))
    check_transfer_policy(v["transfer_policy"], join(path, "transfer_policy"))
    one, many = v["systems_path"], v["systems_paths"]
    if one is not None and many is not None and tuple(many) != (one,):
        raise Invalid(
            join(path, "systems_path"), "conflicts with systems_paths", one, "give one of the two"
        )
    if v["decoder_replay"]:
        # AISimulate 0.13 replays decoders only for DeepSeek-V4.1-Flash on SGLang
        raise Invalid(
            join(path, "decoder_replay"),
            "requires model 'deepseek-ai/DeepSeek-V4.1-Flash' and backend 'sglang'",
            True,
            "remove it",
        )
    nextn, accepted = v["nextn"], v["nextn_accepted"]
    acc_path = join(path, "nextn_accepted")
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
            join(path, "speculation"),
            "cannot be combined with nextn/nextn_accepted",
            fix="use either native MTP (nextn) or speculation",
        )
    if v["mode"] == "afd" and v["afd"] is None:
        raise Invalid(join(path, "afd"), "is required when mode is 'afd'")
    if v["kv_transfer"] is not None and v["mode"] != "disaggregated":
        raise Invalid(
            join(path, "kv_transfer"),
            f"is only valid in disaggregated mode, not {v['mode']}",
            fix="remove it or set engine.mode: disaggregated",
        )
    if v["estimator_config"] is None:
        v["estimator_config"] = FrozenMap()
    ctx.backend, ctx.mode = v["backend"], v["mode"]
    wpath = join(path, "workers")
    if "workers" in raw and raw["workers"] is None:
        raise Invalid(wpath, "must be a mapping", typed(None))
    v["workers"], v["encoder"] = build_workers(raw.get("workers", NOTHING), wpath, ctx)
    for role, worker in v["workers"].items():
        if worker.hardware is None:
            continue
        hw_path = join(wpath, f"{role}.hardware")
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
            if not same_as_default(v[key], _ENGINE_DEFAULTS.get(key)):
                raise Invalid(
                    join(path, key),
                    f"needs default timing in every worker role, but {wpath}.{role}.timing "
                    f"is {worker.timing.TYPE!r}",
                    v[key],
                    "remove it or use timing: {type: default}",
                )


@hook(NgramSpeculation)
def _ngram(v: dict[str, Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> None:
    if len(v["acceptance_rates"]) != v["num_speculative_tokens"]:
        raise Invalid(
            join(path, "acceptance_rates"),
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
            join(path, "e2e_ms"),
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
    if getattr(traffic.source, "format", None) == "mooncake-delta" and engine.mode != "aggregated":
        # its delta timestamps are replayed by the aggregated engine only (AISimulate rejects it)
        raise Invalid(
            "traffic.source.format",
            f"'mooncake-delta' needs engine.mode: aggregated, not {engine.mode!r}",
            fix="convert the trace to format: mooncake (absolute timestamps)",
        )
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
