"""Dataclasses of the ``traffic`` section: request source, arrival load, stop condition.

Field names are the YAML keys; each field's checker is in its metadata (see
:mod:`aisim.config.checks`).  Defaults shown as "(null) resolves to" are filled by the loader.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from aisim.config.checks import (
    FrozenMap,
    Invalid,
    Section,
    Tagged,
    boolean,
    choice,
    fld,
    integer,
    number,
    opaque,
    spec,
    string_list,
    typed,
)


def _image_identity(value: Any, path: str) -> Any:
    if value == "unique":
        return value
    if isinstance(value, Mapping) and set(value) == {"pool"}:
        return FrozenMap({"pool": integer(gt=0)(value["pool"], f"{path}.pool")})
    raise Invalid(path, "must be 'unique' or {pool: N}", typed(value))


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
    identity: Any = field(default="unique", metadata=spec(_image_identity))
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
    images: ImageInput | None = field(
        default=None, metadata=spec(Section(ImageInput, nullable=True, optional=True))
    )
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
    session: SessionShape = field(metadata=spec(Section(SessionShape)))
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
            "mooncake",
            "mooncake-delta",
            "agentic_mooncake",
            "applied_compute_agentic",
            "dynamo",
            "weka",
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


Load = (
    ConcurrencyLoad | PoissonLoad | ConstantRateLoad | TraceTimestampsLoad | KVCapacityFractionLoad
)
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
    """What requests arrive and when (omitted: 100 synthetic 1024/128 requests, concurrency 10)."""

    source: Source = field(metadata=spec(Tagged("source")))
    """Where request lengths come from (required, tagged by 'type')."""
    load: Load = field(metadata=spec(Tagged("load", default_tag="concurrency")))
    """Arrival process (required key; 'type' defaults to concurrency)."""
    stop: Stop = field(default=None, metadata=spec(Section(Stop, nullable=True)))
    """Stop condition; an empty Stop when omitted."""
