"""A plain-Python reading of the EMPIRICAL utilisation rule (docs/timing.md 4.9).

Written from the rule, not from kernels/optime_empirical.py or the plan builder: it takes raw
samples (coordinates, latency), computes util = SOL / latency, normalises every axis in log
space over all samples, clamps the query, sorts all distances stably and averages the two
nearest with weights 1 / distance (an exact hit returns its own util). No pruning, no
precomputed coordinates.
"""

from __future__ import annotations

import math


def _log(v: float) -> float:
    return math.log(max(v, 1e-9))


def util(samples: list[tuple[tuple[float, ...], float]], sol, query: tuple[float, ...]) -> float:
    """samples: ((coordinates), measured latency); sol(coordinates) -> ms."""
    coords, utils = [], []
    for c, lat in samples:
        s = sol(c)
        if lat > 0.0 and s > 0.0:
            coords.append([_log(v) for v in c])
            utils.append(s / lat)
    dims = len(query)
    lo = [min(c[a] for c in coords) for a in range(dims)]
    span = [max(c[a] for c in coords) - lo[a] for a in range(dims)]
    span = [s if s > 0.0 else 1.0 for s in span]
    q = [min(1.0, max(0.0, (_log(query[a]) - lo[a]) / span[a])) for a in range(dims)]
    dist = [
        math.sqrt(sum(((c[a] - lo[a]) / span[a] - q[a]) ** 2 for a in range(dims))) for c in coords
    ]
    order = sorted(range(len(dist)), key=lambda i: dist[i])  # stable: ties keep sample order
    if dist[order[0]] == 0.0:
        return utils[order[0]]
    nearest = order[:2]
    w = [1.0 / dist[i] for i in nearest]
    return sum(utils[i] * wi for i, wi in zip(nearest, w, strict=True)) / sum(w)


def latency(samples, sol, query: tuple[float, ...]) -> float:
    """SOL(query) / util: the estimated latency, ms."""
    return sol(query) / util(samples, sol, query)


def moe_sol_ms(
    tokens: int,
    topk: int,
    hidden: int,
    inter: int,
    experts: int,
    moe_tp: int,
    moe_ep: int,
    gemms: int,
    bytes_per_elem: float,
    flops: float,
    mem_bw: float,
) -> float:
    """The routed experts' roofline with every division an integer floor (docs/timing.md 4.7),
    in Python integers."""
    routed_all = tokens * topk
    ops = routed_all * hidden * inter * gemms * 2 // moe_ep // moe_tp
    routed = routed_all // moe_ep
    weights = hidden * inter * gemms // moe_tp * min(experts // moe_ep, routed)
    nbytes = routed * hidden * 2 + routed * inter * gemms // moe_tp + weights
    return max(ops / flops * 1000.0, nbytes * bytes_per_elem / mem_bw * 1000.0)
