"""Scores, SLA gates, ranking and the Pareto front of simulated candidates
(docs/recommend.md, "Scoring"). Every score is read from the candidate's prediction.json."""

from __future__ import annotations

import json
import math

PARETO_OBJECTIVES = ("throughput_per_gpu", "throughput_per_user")


def average_gpus(pred: dict) -> float:
    """GPUs billed on average over the run: gpu_hours / duration."""
    hours = pred.get("gpu_hours") or 0.0
    duration_ms = pred.get("duration_ms") or 0.0
    if hours <= 0 or duration_ms <= 0:
        return 0.0
    return hours / (duration_ms / 3.6e6)


def _per_gpu(value, pred: dict) -> float:
    gpus = average_gpus(pred)
    return (value or 0.0) / gpus if gpus > 0 else 0.0


def objective(target: str, pred: dict, used_gpus: int) -> float:
    """The target's raw value (higher is better for throughputs, lower for latencies)."""
    if target == "throughput":
        return pred.get("output_throughput_tok_s") or 0.0
    if target == "throughput_per_gpu":
        return _per_gpu(pred.get("output_throughput_tok_s"), pred)
    if target == "throughput_per_user":
        return pred.get("mean_output_token_throughput_per_user") or 0.0
    if target == "goodput":
        return pred.get("goodput_output_throughput_tok_s") or 0.0
    if target == "goodput_per_gpu":
        return _per_gpu(pred.get("goodput_output_throughput_tok_s"), pred)
    if target == "ttft":
        return pred["mean_ttft_ms"] if (pred.get("num_ttft_samples") or 0) > 0 else math.inf
    if target == "e2e_latency":
        return pred.get("mean_e2e_latency_ms") or math.inf
    if target == "min_gpus":
        return float(used_gpus)
    raise ValueError(target)


def score(target: str, pred: dict, used_gpus: int) -> float:
    """Higher is better: minimised targets are negated; pareto scores its per-GPU throughput."""
    if target == "pareto":
        return objective("throughput_per_gpu", pred, used_gpus)
    value = objective(target, pred, used_gpus)
    return -value if target in ("ttft", "e2e_latency", "min_gpus") else value


def objectives(target: str, pred: dict, used_gpus: int) -> dict | None:
    if target != "pareto":
        return None
    return {name: objective(name, pred, used_gpus) for name in PARETO_OBJECTIVES}


def infeasibility(spec, pred: dict, used_gpus: int) -> tuple[str, str] | None:
    """(category, reason) when a simulated candidate fails a gate, else None."""
    if used_gpus > spec.max_gpus:
        return "gpu_budget", f"over gpu_budget: used_gpus={used_gpus} > gpu_budget={spec.max_gpus}"
    if not pred.get("completed_requests"):
        return "no_samples", "no request completed"
    if spec.target in ("ttft", "e2e_latency"):
        key = "num_ttft_samples" if spec.target == "ttft" else "num_e2e_latency_samples"
        if not (pred.get(key) or 0) > 0:
            return "no_samples", f"{spec.target} objective has no qualifying samples ({key}=0)"
    if spec.strict_sla or spec.target == "min_gpus":
        bad = []
        for bound, field, label, samples in (
            ("ttft_ms", "mean_ttft_ms", "ttft", "num_ttft_samples"),
            ("itl_ms", "mean_tpot_ms", "tpot", "num_tpot_samples"),
            ("e2e_ms", "mean_e2e_latency_ms", "e2e", "num_e2e_latency_samples"),
        ):
            if bound not in spec.sla:
                continue
            value = pred.get(field)
            if value is None or not (pred.get(samples) or 0) > 0:
                bad.append(f"{label} has no samples")
            elif value > spec.sla[bound]:
                bad.append(f"{label} {value:g}ms > {spec.sla[bound]:g}ms")
        if bad:
            return "sla_constraint", "strict aggregate SLA violation: " + "; ".join(bad)
    if spec.min_goodput_rps is not None:
        rps = pred.get("goodput_request_throughput_rps") or 0.0
        if rps < spec.min_goodput_rps:
            return "load_constraint", (
                f"minimum goodput constraint: goodput_request_throughput_rps={rps:g} < "
                f"min_goodput_rps={spec.min_goodput_rps:g}"
            )
    return None


def _key_json(config: dict) -> str:
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def rank(target: str, feasible: list[dict]) -> list[dict]:
    """Best first. Scalar targets: score, then fewer GPUs, then the candidate's config;
    min_gpus: fewer GPUs, more goodput, lower mean E2E; pareto: the front only, by throughput
    per user (ascending), then per GPU."""
    if target == "pareto":
        front = pareto_front(feasible)
        return sorted(
            front,
            key=lambda c: (
                c["objectives"]["throughput_per_user"],
                -c["objectives"]["throughput_per_gpu"],
                c["used_gpus"],
                _key_json(c["config"]),
            ),
        )
    if target == "min_gpus":
        return sorted(
            feasible,
            key=lambda c: (
                c["used_gpus"],
                -(c["metrics"].get("goodput_output_throughput_tok_s") or 0.0),
                c["metrics"].get("mean_e2e_latency_ms") or math.inf,
                _key_json(c["config"]),
            ),
        )
    return sorted(feasible, key=lambda c: (-c["score"], c["used_gpus"], _key_json(c["config"])))


def pareto_front(cands: list[dict]) -> list[dict]:
    """The candidates no other one dominates (at least as good on both objectives, better on
    one), in O(n log n): by per-GPU throughput descending, a point survives when it is the best
    per user of its per-GPU value and beats every point of a higher per-GPU value."""
    xs = [c["objectives"][PARETO_OBJECTIVES[0]] for c in cands]
    ys = [c["objectives"][PARETO_OBJECTIVES[1]] for c in cands]
    order = sorted(range(len(cands)), key=lambda i: -xs[i])
    front = []
    best_y = -math.inf  # the best per-user value among strictly higher per-GPU values
    k = 0
    while k < len(order):
        group = [order[k]]
        while k + len(group) < len(order) and xs[order[k + len(group)]] == xs[order[k]]:
            group.append(order[k + len(group)])
        top = max(ys[i] for i in group)
        if top > best_y:
            front += [cands[i] for i in group if ys[i] == top]
            best_y = top
        k += len(group)
    return front
