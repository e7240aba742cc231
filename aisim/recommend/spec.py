"""A recommend YAML (AISimulate's `recommend` schema) -> a frozen RecommendSpec.

Only the search is read here: the domains, the goal and the optimizer block. Every other engine,
worker and traffic field is kept as written and copied into each candidate's predict config,
where aisim's predict validation checks it (`aisim.recommend.space.validate_fixed_fields` runs
that check once per mode and backend before anything is simulated, with this file's paths).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aisim.config.checks import Invalid
from aisim.errors import ConfigError
from aisim.recommend.domains import Domain, domain, fixed

TOP_LEVEL = ("traffic", "engine", "evaluation", "execution", "optimization", "optimizer")
MODES = ("aggregated", "disaggregated")
BACKENDS = ("vllm", "sglang", "trtllm")
ROLES = ("aggregated", "prefill", "decode")
KNOBS = ("replicas", "tensor", "pipeline", "attention_data", "moe_tensor", "moe_expert")
TARGETS = (
    "throughput",
    "throughput_per_gpu",
    "throughput_per_user",
    "goodput",
    "goodput_per_gpu",
    "min_gpus",
    "ttft",
    "e2e_latency",
    "pareto",
)
SLA_TARGETS = ("goodput", "goodput_per_gpu", "min_gpus")
# scheduler limits searched when a role leaves them out (AISimulate 0.13's defaults)
DEFAULT_SCHEDULER = {
    "aggregated": ((8192, 16384, 32768), (256, 512, 1024)),
    "prefill": ((8192, 16384, 32768), (1, 2, 4, 8, 16, 32, 64, 128, 256)),
    "decode": ((8192,), (256, 512, 1024)),
}
DEFAULT_BLOCK = {"vllm": 64, "trtllm": 32, "sglang": 1}
DEFAULT_MEMORY_FRACTION = {"vllm": 0.9, "trtllm": 0.9, "sglang": 0.88}
LOAD_VALUE = {
    "concurrency": ("concurrency", "int"),
    "poisson": ("requests_per_second", "float"),
    "constant_rate": ("requests_per_second", "float"),
    "kv_capacity_fraction": ("fraction", "float"),
}
DEFAULT_TRAFFIC = {
    "source": {"type": "synthetic", "input_tokens": 1024, "output_tokens": 128},
    "load": {"type": "concurrency", "concurrency": 10},
    "stop": {"requests": 100},
}


@dataclass(frozen=True)
class RoleSpace:
    """One worker role's searched fields; `fixed` is the rest of its mapping, copied as is."""

    role: str
    preset: str | tuple  # "default" (automatic pool), "free" (preset: false) or explicit shapes
    knobs: Mapping[str, Domain]
    max_batched_tokens: Domain | None  # None: the role's default domain
    max_sequences: Domain | None
    block_size: Domain | None  # None: the backend's default block
    memory_fraction: Domain | None  # None: the backend's default (capacity type default only)
    fixed_capacity_blocks: int | None
    fixed: Mapping[str, Any]


@dataclass(frozen=True)
class Optimizer:
    algorithm: str = "bayesian"
    max_trials: int = 320
    parallelism: int = 16
    candidate_timeout_seconds: float | None = None  # None: 600 s on the local executor
    seed: int = 42


@dataclass(frozen=True)
class RecommendSpec:
    source: str
    raw: Mapping[str, Any]  # the file as read (provenance)
    modes: tuple[str, ...]
    hardwares: tuple[str, ...]
    backends: tuple[str, ...]
    backend_version: Any  # None, a version, or {backend: version}
    engine_fixed: Mapping[str, Any]  # engine fields copied into every candidate
    context_length: Any
    roles: Mapping[str, RoleSpace]
    traffic: Mapping[str, Any]
    traffic_given: bool
    load_type: str
    load_key: str
    load: Domain
    evaluation: Mapping[str, Any]
    sla: Mapping[str, float]
    target: str
    strict_sla: bool
    max_gpus: int
    min_gpus: int | None
    min_goodput_rps: float | None
    optimizer: Optimizer = field(default_factory=Optimizer)


def _mapping(raw, path: str) -> dict:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise Invalid(path, "must be a mapping", raw)
    return dict(raw)


def _only(raw: dict, allowed, path: str) -> None:
    for key in raw:
        if key not in allowed:
            where = f"{path}.{key}" if path else str(key)
            raise Invalid(where, f"is not a field here (known: {', '.join(allowed)})")


def parse_recommend(raw: Any, source: str) -> RecommendSpec:
    """Validate a loaded recommend YAML; a wrong field raises ConfigError naming its path."""
    try:
        return _parse(raw, source)
    except Invalid as exc:
        raise ConfigError(exc.line(source)) from None


def load_recommend(path: str | Path, overrides=()) -> RecommendSpec:
    from aisim.config.load import apply_overrides, parse_yaml

    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{source}: recommend config not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{source}: cannot read the recommend config: {exc}") from None
    raw = parse_yaml(text, source)
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the file must hold one YAML mapping (engine:, ...)")
    if overrides:
        raw = apply_overrides(raw, tuple(overrides))
    return parse_recommend(raw, source)


def _parse(raw: Any, source: str) -> RecommendSpec:
    if not isinstance(raw, dict):
        raise Invalid("", "the file must hold one YAML mapping (engine:, optimization:, ...)")
    for key in raw:
        if key not in TOP_LEVEL:
            raise Invalid(str(key), f"unknown top-level section (known: {', '.join(TOP_LEVEL)})")
    for key in ("engine", "optimization"):
        if key not in raw:
            raise Invalid(key, "is required")
    engine = _mapping(raw["engine"], "engine")
    if "model" not in engine:
        raise Invalid("engine.model", "is required")
    if "hardware" not in engine:
        raise Invalid(
            "engine.hardware", "is required (a GPU name, or auto with optimization.hardware)"
        )
    modes = _names(engine.pop("mode", {"choices": list(MODES)}), "engine.mode", (*MODES, "afd"))
    if "afd" in modes:
        raise Invalid(
            "engine.mode",
            "afd (attention-FFN disaggregation) is not simulated by aisim",
            fix="search aggregated and / or disaggregated",
        )
    backends = _names(
        engine.pop("backend", {"choices": ["vllm", "sglang"]}), "engine.backend", BACKENDS
    )
    version = engine.pop("backend_version", None)
    if isinstance(version, dict):
        for b in version:
            if b not in backends:
                raise Invalid(
                    f"engine.backend_version.{b}", "names a backend outside engine.backend"
                )
    elif version is not None and not isinstance(version, str):
        raise Invalid(
            "engine.backend_version", "must be a version string or {backend: version}", version
        )
    opt = _mapping(raw["optimization"], "optimization")
    _only(opt, ("target", "hardware", "strict_sla", "constraints"), "optimization")
    if engine["hardware"] == "auto":
        if not isinstance(opt.get("hardware"), str) or opt["hardware"] == "auto":
            raise Invalid("optimization.hardware", "is required with engine.hardware: auto")
        engine["hardware"] = opt["hardware"]
    # an aisim extension: GPUs as a search dimension ({choices: [...]}); AISimulate takes one
    hardwares = domain(engine.pop("hardware"), "engine.hardware", "choice").values
    for i, h in enumerate(hardwares):
        if not isinstance(h, str) or not h:
            raise Invalid(f"engine.hardware.choices[{i}]", "must be a GPU name", h)
    if "afd" in engine:
        raise Invalid("engine.afd", "attention-FFN disaggregation is not simulated by aisim")
    workers = _mapping(engine.pop("workers", {}), "engine.workers")
    _only(workers, ROLES, "engine.workers")
    if "aggregated" in modes and "aggregated" not in workers:
        raise Invalid(
            "engine.workers", "aggregated mode requires workers.aggregated (an empty {} will do)"
        )
    if "disaggregated" in modes and not {"prefill", "decode"} <= set(workers):
        raise Invalid("engine.workers", "disaggregated mode requires prefill and decode workers")
    if modes == ("aggregated",) and (
        {"prefill", "decode"} & set(workers) or "kv_transfer" in engine
    ):
        raise Invalid(
            "engine.workers", "aggregated mode takes no prefill / decode workers or kv_transfer"
        )
    if modes == ("disaggregated",) and "aggregated" in workers:
        raise Invalid("engine.workers.aggregated", "is not used by disaggregated mode")
    roles = {
        role: _role(role, _mapping(workers[role], f"engine.workers.{role}"), backends)
        for role in ROLES
        if role in workers
    }
    context_length = engine.pop("context_length", "max")
    traffic_given = "traffic" in raw and raw["traffic"] is not None
    traffic = _mapping(raw.get("traffic"), "traffic") if traffic_given else dict(DEFAULT_TRAFFIC)
    load = _mapping(traffic.get("load", {"type": "concurrency"}), "traffic.load")
    load_type = load.get("type", "concurrency")
    if load_type not in LOAD_VALUE:
        raise Invalid(
            "traffic.load.type",
            "recommend searches concurrency, poisson, constant_rate or kv_capacity_fraction loads",
            load_type,
        )
    load_key, kind = LOAD_VALUE[load_type]
    default_value = 10 if load_type == "concurrency" else None
    if load.get(load_key, default_value) is None:
        raise Invalid(f"traffic.load.{load_key}", f"is required for a {load_type} load")
    load_domain = domain(
        load.get(load_key, default_value),
        f"traffic.load.{load_key}",
        kind,
        upper=1.0 if load_type == "kv_capacity_fraction" else None,
    )
    evaluation = _mapping(raw.get("evaluation"), "evaluation")
    sla = _sla(_mapping(evaluation.get("sla"), "evaluation.sla"))
    target = opt.get("target", "throughput")
    if target not in TARGETS:
        raise Invalid("optimization.target", f"must be one of {', '.join(TARGETS)}", target)
    strict = opt.get("strict_sla", False)
    if not isinstance(strict, bool):
        raise Invalid("optimization.strict_sla", "must be true or false", strict)
    if strict and not sla:
        raise Invalid("optimization.strict_sla", "requires at least one evaluation.sla bound")
    if target in SLA_TARGETS and not sla:
        raise Invalid("optimization.target", f"{target!r} requires an evaluation.sla bound")
    cons = _mapping(opt.get("constraints"), "optimization.constraints")
    _only(
        cons,
        ("max_candidate_gpus", "min_candidate_gpus", "min_goodput_rps"),
        "optimization.constraints",
    )
    max_gpus = _positive_int(
        cons.get("max_candidate_gpus", 32), "optimization.constraints.max_candidate_gpus"
    )
    min_gpus = cons.get("min_candidate_gpus")
    if min_gpus is not None:
        min_gpus = _positive_int(min_gpus, "optimization.constraints.min_candidate_gpus")
        if min_gpus > max_gpus:
            raise Invalid(
                "optimization.constraints.min_candidate_gpus",
                "is above max_candidate_gpus",
                min_gpus,
            )
    min_rps = cons.get("min_goodput_rps")
    if min_rps is not None:
        if target != "min_gpus":
            raise Invalid(
                "optimization.constraints.min_goodput_rps", "is only supported with target min_gpus"
            )
        if not isinstance(min_rps, int | float) or isinstance(min_rps, bool) or not min_rps > 0:
            raise Invalid(
                "optimization.constraints.min_goodput_rps", "must be a positive number", min_rps
            )
    if target == "min_gpus" and not load_domain.fixed:
        raise Invalid(f"traffic.load.{load_key}", "min_gpus needs one load value, not a domain")
    optimizer = _optimizer(_mapping(raw.get("optimizer"), "optimizer"))
    if "execution" in raw:
        _execution(_mapping(raw["execution"], "execution"))
    return RecommendSpec(
        source=source,
        raw=raw,
        modes=modes,
        hardwares=tuple(hardwares),
        backends=backends,
        backend_version=version,
        engine_fixed=engine,
        context_length=context_length,
        roles=roles,
        traffic=traffic,
        traffic_given=traffic_given,
        load_type=load_type,
        load_key=load_key,
        load=load_domain,
        evaluation=evaluation,
        sla=sla,
        target=target,
        strict_sla=strict,
        max_gpus=max_gpus,
        min_gpus=min_gpus,
        min_goodput_rps=None if min_rps is None else float(min_rps),
        optimizer=optimizer,
    )


def _names(raw, path: str, known: tuple) -> tuple[str, ...]:
    d = domain(raw, path, "choice")
    for v in d.values:
        if v not in known:
            raise Invalid(path, f"must be one of {', '.join(known)}", v)
    return tuple(d.values)


def _positive_int(v, path: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise Invalid(path, "must be a positive integer", v)
    return v


def _sla(sla: dict) -> dict[str, float]:
    _only(sla, ("ttft_ms", "itl_ms", "e2e_ms"), "evaluation.sla")
    for key, v in sla.items():
        if (
            not isinstance(v, int | float)
            or isinstance(v, bool)
            or not (v > 0 and math.isfinite(v))
        ):
            raise Invalid(f"evaluation.sla.{key}", "must be a positive number of ms", v)
    if "e2e_ms" in sla and ({"ttft_ms", "itl_ms"} & set(sla)):
        raise Invalid("evaluation.sla.e2e_ms", "is mutually exclusive with ttft_ms / itl_ms")
    return {k: float(v) for k, v in sla.items()}


def _optimizer(raw: dict) -> Optimizer:
    _only(
        raw,
        ("algorithm", "max_trials", "parallelism", "candidate_timeout_seconds", "seed"),
        "optimizer",
    )
    algorithm = raw.get("algorithm", "bayesian")
    if algorithm not in ("bayesian", "random"):
        raise Invalid("optimizer.algorithm", "must be bayesian or random", algorithm)
    timeout = raw.get("candidate_timeout_seconds")
    if timeout is not None and (
        not isinstance(timeout, int | float) or isinstance(timeout, bool) or not timeout > 0
    ):
        raise Invalid("optimizer.candidate_timeout_seconds", "must be a positive number", timeout)
    seed = raw.get("seed", 42)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise Invalid("optimizer.seed", "must be a non-negative integer", seed)
    return Optimizer(
        algorithm=algorithm,
        max_trials=_positive_int(raw.get("max_trials", 320), "optimizer.max_trials"),
        parallelism=_positive_int(raw.get("parallelism", 16), "optimizer.parallelism"),
        candidate_timeout_seconds=None if timeout is None else float(timeout),
        seed=seed,
    )


def _execution(raw: dict) -> None:
    _only(raw, ("resources",), "execution")
    res = _mapping(raw.get("resources"), "execution.resources")
    for key in res:
        raise Invalid(
            f"execution.resources.{key}",
            "sets the host limits of AISimulate's candidate processes, which aisim does not "
            "have (its candidates run in --jobs forked workers)",
            fix="remove it; use --jobs to bound the parallel candidates",
        )


def _role(role: str, raw: dict, backends: tuple[str, ...]) -> RoleSpace:
    path = f"engine.workers.{role}"
    if role == "aggregated":
        for key in ("context_length", "hardware"):
            if key in raw:
                raise Invalid(
                    f"{path}.{key}", "is set once for the aggregated role", fix=f"use engine.{key}"
                )
    par = _mapping(raw.pop("parallelism", {}), f"{path}.parallelism")
    _only(par, ("preset", *KNOBS), f"{path}.parallelism")
    preset = par.pop("preset", "default")
    knobs = {k: domain(v, f"{path}.parallelism.{k}", "int") for k, v in par.items()}
    if preset == "default":
        if knobs:
            raise Invalid(
                f"{path}.parallelism",
                f"cannot combine preset with independent knobs {sorted(knobs)}",
                fix="add preset: false to search those knobs",
            )
        preset_value: str | tuple = "default"
    elif preset is False or preset == {}:
        preset_value = "free"
    elif isinstance(preset, list) and preset:
        if knobs:
            raise Invalid(f"{path}.parallelism", "a preset list takes no independent knobs")
        shapes = []
        for i, entry in enumerate(preset):
            p = f"{path}.parallelism.preset[{i}]"
            entry = _mapping(entry, p)
            if set(entry) != set(KNOBS):
                raise Invalid(p, f"must give exactly the knobs {', '.join(KNOBS)}", entry)
            shapes.append({k: _positive_int(entry[k], f"{p}.{k}") for k in KNOBS})
        preset_value = tuple(shapes)
    else:
        raise Invalid(
            f"{path}.parallelism.preset", "must be default, false or a list of shapes", preset
        )
    sched = _mapping(raw.pop("scheduler", {}), f"{path}.scheduler")
    mbt = sched.pop("max_batched_tokens", None)
    mseq = sched.pop("max_sequences", None)
    kvc = _mapping(raw.pop("kv_cache", {}), f"{path}.kv_cache")
    block = kvc.pop("block_size", None)
    cap = _mapping(kvc.pop("capacity", {}), f"{path}.kv_cache.capacity")
    cap_type = cap.get("type", "default")
    fraction = cap.pop("memory_fraction", None)
    blocks = None
    if cap_type == "fixed":
        if fraction is not None:
            raise Invalid(
                f"{path}.kv_cache.capacity.memory_fraction", "is for capacity type default"
            )
        blocks = _positive_int(cap.get("blocks"), f"{path}.kv_cache.capacity.blocks")
    elif cap_type != "default":
        raise Invalid(f"{path}.kv_cache.capacity.type", "must be default or fixed", cap_type)
    block_domain = None if block is None else domain(block, f"{path}.kv_cache.block_size", "int")
    if (
        block_domain is not None
        and set(backends) <= {"vllm", "trtllm"}
        and max(block_domain.values) < 2
    ):
        raise Invalid(
            f"{path}.kv_cache.block_size", "vLLM and TensorRT-LLM need blocks of 2 tokens or more"
        )
    fixed_rest = dict(raw)
    if sched:
        fixed_rest["scheduler"] = sched
    fixed_rest["kv_cache"] = {**kvc, "capacity": cap}
    return RoleSpace(
        role=role,
        preset=preset_value,
        knobs=knobs,
        max_batched_tokens=None
        if mbt is None
        else domain(mbt, f"{path}.scheduler.max_batched_tokens", "int"),
        max_sequences=None
        if mseq is None
        else domain(mseq, f"{path}.scheduler.max_sequences", "int"),
        block_size=block_domain,
        memory_fraction=None
        if fraction is None
        else domain(fraction, f"{path}.kv_cache.capacity.memory_fraction", "float", upper=1.0),
        fixed_capacity_blocks=blocks,
        fixed=fixed_rest,
    )


def role_scheduler(space: RoleSpace) -> tuple[Domain, Domain]:
    mbt, mseq = DEFAULT_SCHEDULER[space.role]
    return (
        space.max_batched_tokens or Domain(mbt),
        space.max_sequences or Domain(mseq),
    )


def role_block(space: RoleSpace, backend: str) -> Domain:
    return space.block_size or fixed(DEFAULT_BLOCK[backend])


def role_fraction(space: RoleSpace, backend: str) -> Domain | None:
    if space.fixed_capacity_blocks is not None:
        return None
    return space.memory_fraction or fixed(DEFAULT_MEMORY_FRACTION[backend])
