"""Empirical utilisation lookups: the EMPIRICAL database mode (docs/timing.md 4.9).

An op priced empirically costs SOL(query) / util, where util is read from the op family's
collected samples (util = SOL(sample) / measured latency) in per-axis normalised log space:
every axis is log(max(v, 1e-9)), shifted by the samples' minimum and divided by their span (1
where the span is 0); the query is normalised the same way and clamped to [0, 1] per axis; an
exact hit (distance 0) returns its sample's util, otherwise the two nearest samples are
averaged with weights 1 / distance. Ties in distance keep the earlier sample.

A plan's lookup `e` owns the sample rows [off[e], off[e + 1]) of `coord` / `util`, normalised
at plan time (aisim.timing.leaf_empirical). Unused axes are 0 in both the samples and the
query, so one 3-axis routine serves the 1-axis (allreduce message size, expert tokens) and
3-axis (GEMM m, n, k; attention heads and two lengths) families.

Mirrors: AISimulate 0.13 util_empirical (k = 2 inverse-distance neighbours, p = 1).
"""

import math
from typing import NamedTuple

import numpy as np

from aisim.kernels._jit import helper

LOG_FLOOR = 1e-9


class UtilGrids(NamedTuple):
    """The plan's empirical lookups (aisim.timing.leaf_empirical). Lookup ids: GEMM op g is
    lookup g; `slot` names the attention and allreduce lookups (-1 = none)."""

    off: np.ndarray  # int64[lookups + 1] each lookup's sample rows
    lo: np.ndarray  # float64[lookups, 3] per-axis minimum of log coordinates
    span: np.ndarray  # float64[lookups, 3] per-axis span (1 where the samples do not vary)
    coord: np.ndarray  # float64[rows, 3] normalised log coordinates
    util: np.ndarray  # float64[rows] SOL / measured latency
    slot: np.ndarray  # int64[SLOT_SIZE] lookup ids of the non-GEMM families


SLOT_CONTEXT = 0  # context attention (heads, full length, batch)
SLOT_GENERATION = 1  # generation attention (heads, batch, kv length)
SLOT_ALLREDUCE = 2  # custom allreduce (message elements)
SLOT_MOE = 3  # routed experts (global tokens)
SLOT_MOE_LL = 4  # routed experts, TRT-LLM's min-latency kernel (global tokens)
SLOT_ALL_GATHER = 5  # NCCL MoE dispatch (message elements)
SLOT_REDUCE_SCATTER = 6  # NCCL MoE combine (message elements)
SLOT_SIZE = 7


@helper
def _axis(v, lo, span):
    x = (math.log(max(v, LOG_FLOOR)) - lo) / span
    if x < 0.0:
        return 0.0
    if x > 1.0:
        return 1.0
    return x


@helper
def util_at(grids, e, q0, q1, q2):
    """Interpolated util of lookup e at the raw query (q0, q1, q2); an axis the lookup does
    not use is queried at 1.0 (log 0, like its samples)."""
    x0 = _axis(q0, grids.lo[e, 0], grids.span[e, 0])
    x1 = _axis(q1, grids.lo[e, 1], grids.span[e, 1])
    x2 = _axis(q2, grids.lo[e, 2], grids.span[e, 2])
    best_d = np.inf
    best_i = -1
    next_d = np.inf
    next_i = -1
    coord = grids.coord
    for i in range(grids.off[e], grids.off[e + 1]):
        d0 = coord[i, 0] - x0
        d1 = coord[i, 1] - x1
        d2 = coord[i, 2] - x2
        d = math.sqrt(d0 * d0 + d1 * d1 + d2 * d2)
        if d < best_d:
            next_d = best_d
            next_i = best_i
            best_d = d
            best_i = i
        elif d < next_d:
            next_d = d
            next_i = i
    if best_d == 0.0 or next_i < 0:
        return grids.util[best_i]
    w0 = 1.0 / best_d
    w1 = 1.0 / next_d
    return (grids.util[best_i] * w0 + grids.util[next_i] * w1) / (w0 + w1)
