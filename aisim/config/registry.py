"""Tag -> dataclass maps for the tagged sections, and the known names aisim accepts.

A section such as ``capacity: {type: fixed, blocks: 100}`` is resolved by looking its tag up in
one of :data:`REGISTRIES`.  An unknown tag is a config error that lists the valid ones.
"""

from __future__ import annotations

from aisim.config.schema import (
    ConcurrencyLoad,
    ConstantRateLoad,
    DefaultCapacity,
    DefaultTiming,
    FixedCapacity,
    FixedTiming,
    KVCapacityFractionLoad,
    NgramSpeculation,
    PoissonLoad,
    PolynomialTiming,
    SchemeSpeculation,
    SyntheticSessionSource,
    SyntheticSource,
    TraceSource,
    TraceTimestampsLoad,
)


def _by_tag(*classes: type) -> dict[str, type]:
    return {cls.TYPE: cls for cls in classes}  # type: ignore[attr-defined]


SOURCES = _by_tag(SyntheticSource, SyntheticSessionSource, TraceSource)
"""``traffic.source.type``."""

LOADS = _by_tag(
    ConcurrencyLoad, PoissonLoad, ConstantRateLoad, TraceTimestampsLoad, KVCapacityFractionLoad
)
"""``traffic.load.type``."""

CAPACITIES = _by_tag(FixedCapacity, DefaultCapacity)
"""``engine.workers.<role>.kv_cache.capacity.type``."""

TIMINGS = _by_tag(DefaultTiming, FixedTiming, PolynomialTiming)
"""``engine.workers.<role>.timing.type``."""

SPECULATIONS = _by_tag(NgramSpeculation, SchemeSpeculation)
"""``engine.speculation.kind``: 'ngram', or any other kind (key ``*``) for a named scheme."""

REGISTRIES: dict[str, dict[str, type]] = {
    "source": SOURCES,
    "load": LOADS,
    "capacity": CAPACITIES,
    "timing": TIMINGS,
    "speculation": SPECULATIONS,
}

WILDCARD = "*"
"""Registry key that takes every tag not listed explicitly."""

RECOMMEND_ONLY_LOADS = frozenset({KVCapacityFractionLoad.TYPE})
"""Load types that only AISimulate's ``recommend`` command understands."""

_FLEET_SLOTS = {
    "vllm": {"current": "0.24.0", "next": "0.31.0"},
    "trtllm": {"current": "1.3.0rc20", "next": "1.3.0rc23"},
    "sglang": {"current": "0.5.14", "next": "0.5.20"},
}

BACKEND_VERSION_SLOTS: dict[str, dict[str, dict[str, str]]] = {
    "a100_sxm": {
        "vllm": {"current": "0.14.0"},
        "trtllm": {"current": "1.0.0"},
        "sglang": {"current": "0.5.10"},
    },
    "b200_sxm": _FLEET_SLOTS,
    "b300_sxm": _FLEET_SLOTS,
    "b60": {"vllm": {"current": "0.28.0", "previous": "0.26.0"}},
    "gb200": _FLEET_SLOTS,
    "gb300": _FLEET_SLOTS,
    "h100_sxm": _FLEET_SLOTS,
    "h200_sxm": _FLEET_SLOTS,
    "l40s": _FLEET_SLOTS,
    "rtx_pro_6000_server": _FLEET_SLOTS,
}
"""The backend versions AISimulate 0.13 answers for, per hardware and backend: its queryable
slots (its systems/query_versions.yaml). `current` is the version its maintainers last
completed; `previous` the one before (only b60 has one); `next` is derived, the highest newer
version that holds performance data on any of the systems following the common defaults (a
system without that version's data is served from older tables; a100_sxm and b60 set their own
versions and have no `next`). `backend_version` takes one of the slot versions or the alias
'current' / 'previous' / 'next'; null means current. Any other version (0.25.0, 0.27.1,
1.3.0rc11, ...) AISimulate refuses, and so does aisim (docs/rules.md 3.4). A backend a system
has no slots for (TRT-LLM on b60) has no performance database there and is refused under
every timing, as AISimulate does.
"""

KNOWN_HARDWARE = tuple(sorted(BACKEND_VERSION_SLOTS))
"""Hardware names aisim has performance data and memory facts for (every GPU with silicon
tables in the AISimulate 0.13 wheel)."""

UNPRICED_HARDWARE = ("a100_pcie", "a30", "h100_pcie", "l4")
"""Systems AISimulate 0.13 describes but ships no performance database for: refused."""


def current_version(hardware: str | None, backend: str) -> str:
    """The version null `backend_version` means: the hardware's `current` slot (the common
    default when the hardware is not named or has no slots for the backend)."""
    slots = BACKEND_VERSION_SLOTS.get(hardware or "", {}).get(backend) or _FLEET_SLOTS[backend]
    return slots["current"]


def priced_versions(hardware: str, backend: str) -> tuple[str, ...]:
    """Versions aisim has compiled op-time tables for: every slot of the hardware's backend
    (a `next` version without data of its own is filled from the older versions' rows,
    nearest first, as AISimulate fills it; docs/timing.md 2.2)."""
    slots = BACKEND_VERSION_SLOTS.get(hardware, {}).get(backend, {})
    return tuple(slots.values())


DEFAULT_BLOCK_SIZE = {"vllm": 64, "trtllm": 32, "sglang": 1}
"""``kv_cache.block_size`` when not given, per backend."""

DEFAULT_MEMORY_FRACTION = {"vllm": 0.9, "trtllm": 0.9, "sglang": 0.88}
"""``capacity.memory_fraction`` of a default capacity when not given, per backend."""

DEFAULT_MAX_SEQUENCES = {"aggregated": 256, "prefill": 1, "decode": 256}
"""``scheduler.max_sequences`` when not given, per worker role."""

DEFAULT_TRACE_BLOCK_SIZE = 512
"""``traffic.source.block_size`` of a trace when not given."""

DEFAULT_POISSON_SEED = 42
"""``traffic.load.seed`` of a Poisson load when not given."""
