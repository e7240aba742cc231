"""The cross-field rules of the ``traffic`` section (hooks registered with
:func:`aisim.config.build.hook`; :mod:`aisim.config.validate` imports this module so they are
in place before a config is built)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aisim.config import registry as reg
from aisim.config.build import Ctx, hook, join
from aisim.config.checks import Invalid
from aisim.config.schema import (
    ConcurrencyLoad,
    ConstantRateLoad,
    PoissonLoad,
    SessionShape,
    Stop,
    SyntheticSessionSource,
    SyntheticSource,
    TraceSource,
    TraceTimestampsLoad,
    Traffic,
)

# --------------------------------------------------------------------------- traffic


@hook(SyntheticSource)
def _synthetic(v: dict[str, Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> None:
    if v["cached_prefix_tokens"] > v["input_tokens"]:
        raise Invalid(
            join(path, "cached_prefix_tokens"),
            f"must not exceed input_tokens ({v['input_tokens']})",
            v["cached_prefix_tokens"],
        )


@hook(SessionShape)
def _session(v: dict[str, Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> None:
    if v["shared_prefix_ratio"] > 0 and v["prefix_groups"] == 0:
        raise Invalid(
            join(path, "prefix_groups"),
            "must be positive when shared_prefix_ratio > 0",
            0,
            "set the number of prefix groups",
        )


@hook(TraceSource)
def _trace(v: dict[str, Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> None:
    fmt, paths = v["format"], v["paths"]
    if fmt != "dynamo" and len(paths) != 1:
        raise Invalid(
            join(path, "paths"),
            f"trace format {fmt!r} reads exactly one file",
            list(paths),
            "only format 'dynamo' takes several",
        )
    if v["nested_timestamp_basis"] is not None and fmt != "weka":
        raise Invalid(
            join(path, "nested_timestamp_basis"),
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
                "is not a regular file" if full.exists() else "trace file not found",
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


def _agentic_options(load: TraceTimestampsLoad, path: str) -> None:
    """AISimulate's dependencies between the agentic replay options: each one is meaningless
    (and refused) without the one it builds on, down to agentic_lanes."""
    needs = (
        (
            "agentic_profile",
            load.agentic_profile is not None,
            "agentic_snapshot",
            load.agentic_snapshot is not None,
        ),
        (
            "agentic_warmup",
            load.agentic_warmup,
            "agentic_snapshot",
            load.agentic_snapshot is not None,
        ),
        (
            "agentic_warmup_policy",
            load.agentic_warmup_policy == "live_trajectory_v1",
            "agentic_warmup and agentic_profile",
            load.agentic_warmup and load.agentic_profile is not None,
        ),
        (
            "agentic_snapshot",
            load.agentic_snapshot is not None,
            "agentic_lanes",
            load.agentic_lanes is not None,
        ),
    )
    for key, given, requirement, met in needs:
        if given and not met:
            raise Invalid(
                join(path, key),
                f"requires {requirement}",
                getattr(load, key),
                "agentic replay options need an agentic trace format and its lanes",
            )


@hook(Traffic)
def _traffic(v: dict[str, Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> None:
    source, load = v["source"], v["load"]
    stop = v["stop"] = v["stop"] if v["stop"] is not None else Stop()
    stop_path, load_path = join(path, "stop"), join(path, "load")
    given = [k for k in (*_REQUEST_STOPS, *_SESSION_STOPS) if getattr(stop, k) is not None]
    if isinstance(source, TraceSource):
        if not isinstance(load, TraceTimestampsLoad | ConcurrencyLoad):
            raise Invalid(
                join(load_path, "type"),
                "trace sources need a trace_timestamps or concurrency load",
                load.TYPE,
            )
        if given:
            raise Invalid(
                join(stop_path, given[0]),
                "is not accepted for trace sources (they stop when the trace ends)",
                getattr(stop, given[0]),
                "only max_virtual_time_seconds is",
            )
        if isinstance(load, TraceTimestampsLoad):
            _agentic_options(load, load_path)
        if (
            isinstance(load, TraceTimestampsLoad)
            and load.agentic_lanes is not None
            and source.format not in ("weka", "agentic_mooncake", "dynamo")
        ):
            raise Invalid(
                join(load_path, "agentic_lanes"),
                "needs an agentic trace format (weka, agentic_mooncake or dynamo)",
                load.agentic_lanes,
            )
        return
    session = isinstance(source, SyntheticSessionSource)
    noun = "synthetic-session" if session else "synthetic"
    if isinstance(load, TraceTimestampsLoad):
        raise Invalid(
            join(load_path, "type"),
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
                join(load_path, wrong),
                f"does not match a {noun} source",
                getattr(load, wrong),
                f"use {need}",
            )
        if getattr(load, need) is None:
            raise Invalid(
                join(load_path, need), f"is required for a {load.TYPE} load of a {noun} source"
            )
    if stop.max_virtual_time_seconds is not None:
        raise Invalid(
            join(stop_path, "max_virtual_time_seconds"),
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
