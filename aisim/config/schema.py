"""The typed config tree: frozen dataclasses, one per YAML section of an AISimulate config.

The classes live in :mod:`aisim.config.schema_traffic` (``traffic``) and
:mod:`aisim.config.schema_engine` (``engine``); this module adds ``evaluation``, ``execution`` and
the root :class:`Config`, and re-exports them all.

Field names are the YAML keys.  Each field carries its checker in ``metadata["check"]`` (see
:mod:`aisim.config.checks`); a ``Section`` or ``Tagged`` marker means a nested section, built by
:mod:`aisim.config.build`.  Sections chosen by a ``type:`` (or ``kind:``) tag have the tag in the
class attribute ``TYPE`` and are listed in :mod:`aisim.config.registry`.

Defaults that depend on other sections (``kv_cache.block_size``, ``scheduler.max_sequences``,
``capacity.memory_fraction``, ``load.seed``, ...) are ``None`` in the dataclass and always
resolved by the loader, so a loaded tree never holds ``None`` there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aisim.config.checks import Invalid, Section, fld, int_or, number, spec
from aisim.config.schema_engine import (
    HOST_ONLY_WORKER_KEYS,
    Capacity,
    DefaultCapacity,
    DefaultTiming,
    Engine,
    FixedCapacity,
    FixedTiming,
    KVCache,
    KVTransfer,
    NgramSpeculation,
    Parallelism,
    PolynomialTiming,
    Scheduler,
    SchemeSpeculation,
    Speculation,
    Timing,
    Tokenization,
    Worker,
)
from aisim.config.schema_traffic import (
    ConcurrencyLoad,
    ConstantRateLoad,
    ImageInput,
    KVCapacityFractionLoad,
    Load,
    PoissonLoad,
    SessionShape,
    Source,
    Stop,
    SyntheticSessionSource,
    SyntheticSource,
    TraceSource,
    TraceTimestampsLoad,
    Traffic,
    load_unit,
)

__all__ = [
    "HOST_ONLY_WORKER_KEYS",
    "Capacity",
    "ConcurrencyLoad",
    "Config",
    "ConstantRateLoad",
    "DefaultCapacity",
    "DefaultTiming",
    "Engine",
    "Evaluation",
    "Execution",
    "FixedCapacity",
    "FixedTiming",
    "ImageInput",
    "KVCache",
    "KVCapacityFractionLoad",
    "KVTransfer",
    "Load",
    "NgramSpeculation",
    "Parallelism",
    "PoissonLoad",
    "PolynomialTiming",
    "Resources",
    "Scheduler",
    "SchemeSpeculation",
    "SessionShape",
    "Sla",
    "Source",
    "Speculation",
    "Stop",
    "SyntheticSessionSource",
    "SyntheticSource",
    "Timing",
    "Tokenization",
    "TraceSource",
    "TraceTimestampsLoad",
    "Traffic",
    "Worker",
    "load_unit",
]


def _positive_or_auto(value: Any, path: str) -> Any:
    if value == "auto":
        return value
    try:
        return number(gt=0)(value, path)
    except Invalid as exc:
        raise Invalid(path, "must be a positive number or 'auto'", exc.got) from None


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

    sla: Sla | None = field(default=None, metadata=spec(Section(Sla, nullable=True, optional=True)))
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

    resources: Resources = field(default=None, metadata=spec(Section(Resources)))
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
