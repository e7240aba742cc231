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
