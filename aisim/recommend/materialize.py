"""A candidate -> the concrete predict config it runs (the `recommendations/NNNN.yaml` files,
which `aisim predict -c` and `aisimulate predict -c` both run unchanged)."""

from __future__ import annotations

import copy
import math
from typing import Any

from aisim.errors import AisimError


def _role_mapping(spec, role: str, choice, source_role: str | None = None) -> dict:
    space = spec.roles[source_role or role]
    out = copy.deepcopy(dict(space.fixed))
    out["parallelism"] = choice.par
    sched = dict(out.get("scheduler") or {})
    sched["max_batched_tokens"] = choice.max_batched_tokens
    sched["max_sequences"] = choice.max_sequences
    out["scheduler"] = sched
    kvc = dict(out.get("kv_cache") or {})
    kvc["block_size"] = choice.block_size
    cap = dict(kvc.get("capacity") or {"type": "default"})
    if choice.memory_fraction is not None:
        cap["memory_fraction"] = choice.memory_fraction
    kvc["capacity"] = cap
    out["kv_cache"] = kvc
    order = ("parallelism", "scheduler", "kv_cache")
    return {**{k: out[k] for k in order}, **{k: v for k, v in out.items() if k not in order}}


def _absolute_trace_paths(traffic: dict, source: str) -> None:
    """Trace paths are relative to the recommend YAML; the candidate configs live elsewhere."""
    from pathlib import Path

    src = traffic.get("source")
    if isinstance(src, dict) and isinstance(src.get("paths"), list):
        base = Path(source).resolve().parent
        src["paths"] = [
            p if not isinstance(p, str) or Path(p).is_absolute() else str(base / p)
            for p in src["paths"]
        ]


def predict_config(spec, cand, space, single_role: str | None = None, concurrency=None) -> dict:
    """The predict config of `cand`. `single_role` probes one role's shape (a disaggregated
    role is probed with the same shape on both roles, since a pool needs its partner to
    validate). A kv_capacity_fraction load becomes the concurrency it resolves to (given, or 1
    for a probe)."""
    traffic = copy.deepcopy(dict(spec.traffic))
    _absolute_trace_paths(traffic, spec.source)
    load = dict(traffic.get("load") or {"type": "concurrency"})
    if spec.load_type == "kv_capacity_fraction":
        load = {"type": "concurrency", "concurrency": int(concurrency or 1)}
    else:
        load[spec.load_key] = cand.load
        load.setdefault("type", spec.load_type)
    traffic["load"] = load
    engine: dict[str, Any] = {"mode": cand.mode}
    engine.update(copy.deepcopy(dict(spec.engine_fixed)))
    engine["hardware"] = cand.hardware
    engine["backend"] = cand.backend
    engine["backend_version"] = cand.backend_version
    engine["context_length"] = spec.context_length
    roles = dict(cand.roles)
    if single_role is not None and cand.mode == "disaggregated":
        choice = roles[single_role]
        roles = {"prefill": choice, "decode": choice}
    engine["workers"] = {role: _role_mapping(spec, role, choice) for role, choice in roles.items()}
    if cand.mode == "aggregated":
        engine.pop("kv_transfer", None)
    out = {"traffic": traffic, "engine": engine}
    if spec.evaluation:
        out["evaluation"] = copy.deepcopy(dict(spec.evaluation))
    return out


def kv_load_concurrency(spec, cand, space) -> tuple[int | None, str | None, dict]:
    """kv_capacity_fraction f -> the concurrency max(1, floor(f x floor(C / (ISL + OSL // 2))))
    where C is the KV tokens of the serving role's pool (per rank, whole blocks) x attention-DP
    x replicas: the aggregated role, or the decode role of a disaggregated pair. Returns
    (concurrency, infeasibility reason, details)."""
    from aisim.config.load import parse_config
    from aisim.engine.spec import memory_breakdown

    role = "aggregated" if cand.mode == "aggregated" else "decode"
    choice = cand.role(role)
    cfg = parse_config(predict_config(spec, cand, space, concurrency=1), spec.source)
    if choice.memory_fraction is None:
        per_rank = spec.roles[role].fixed_capacity_blocks * choice.block_size
    else:
        est = memory_breakdown(cfg, cfg.engine.workers[role], space.model, role, strict=False)
        per_rank = max(0, est.kv_tokens) // choice.block_size * choice.block_size
    par = choice.par
    capacity_tokens = per_rank * par["attention_data"] * par["replicas"]
    src = spec.traffic.get("source") or {}
    isl = int(src.get("input_tokens", 1024))
    osl = int(src.get("output_tokens", 128))
    per_request = isl + osl // 2
    requests = capacity_tokens // per_request
    details = {
        "kv_load_ratio": cand.load,
        "kv_load_capacity_tokens": capacity_tokens,
        "kv_load_concurrency_capacity": requests,
    }
    if requests < 1:
        return (
            None,
            (
                f"candidate KV capacity infeasible: {capacity_tokens} tokens hold no "
                f"{per_request}-token request"
            ),
            details,
        )
    return max(1, math.floor(cand.load * requests)), None, details


def concrete(spec, cand, space) -> tuple[dict | None, str | None, str | None, dict]:
    """(predict config, reason category, reason, details) of a candidate to simulate; the
    config is None when materialising it shows it cannot run."""
    from aisim.config.load import parse_config

    details: dict = {}
    concurrency = None
    try:
        if spec.load_type == "kv_capacity_fraction":
            concurrency, why, details = kv_load_concurrency(spec, cand, space)
            if why is not None:
                return None, "kv_capacity", why, details
        raw = predict_config(spec, cand, space, concurrency=concurrency)
        parse_config(raw, spec.source)
    except AisimError as exc:
        text = str(exc.format_message()).removeprefix(f"{spec.source}: ")
        return (
            None,
            "adapter_constraint",
            f"generated prediction config is infeasible: {text}",
            details,
        )
    if concurrency is not None:
        details["concurrency"] = concurrency
    return raw, None, None, details
