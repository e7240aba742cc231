"""Streamed token statistics, so memory never grows with output tokens.

Per request the kernels keep first/second/last token times and a count (RequestState). Every
inter-token gap feeds two streamed distributions: ITL (ms, zero allowed) and per-user output
throughput (1000 / gap, positive gaps only). Each keeps sum, Welford mean/M2, min, max and DDSketch
(alpha 0.001) key counts. Consecutive equal gaps are common (every request decoding in the same
pair of passes sees the same gap), so they are merged as one weighted run: this keeps the log()
of the sketch key off the per-token path.
"""

import numpy as np

from aisim.kernels._jit import helper, kernel
from aisim.kernels.codes import (
    ACC_M2,
    ACC_MAX,
    ACC_MEAN,
    ACC_MIN,
    ACC_SUM,
    CNT_N,
    CNT_ZERO,
    SKETCH_BINS,
    SKETCH_OFFSET,
)

_ALPHA = 0.001
LOG_GAMMA = np.log1p(2.0 * _ALPHA / (1.0 - _ALPHA))
INV_LOG_GAMMA = 1.0 / LOG_GAMMA


@helper
def sketch_key(v):
    """DDSketch key of a positive value: ceil(ln v / ln gamma)."""
    return int(np.ceil(np.log(v) * INV_LOG_GAMMA))


@helper
def _merge(stats, row, x, k):
    acc = stats.acc
    n0 = stats.cnt[row, CNT_N]
    n1 = n0 + k
    acc[row, ACC_SUM] += x * k
    delta = x - acc[row, ACC_MEAN]
    acc[row, ACC_MEAN] += delta * k / n1
    acc[row, ACC_M2] += delta * delta * (n0 * k) / n1
    if x < acc[row, ACC_MIN]:
        acc[row, ACC_MIN] = x
    if x > acc[row, ACC_MAX]:
        acc[row, ACC_MAX] = x
    stats.cnt[row, CNT_N] = n1
    if x <= 0.0:
        stats.cnt[row, CNT_ZERO] += k
    else:
        key = sketch_key(x) + SKETCH_OFFSET
        if key < 0:
            key = 0
        elif key >= SKETCH_BINS:
            key = SKETCH_BINS - 1
        stats.bins[row, key] += k


@kernel
def flush_gaps(stats):
    """Merge the pending zero gaps (MTP bursts) and run of equal gaps into the distributions."""
    zeros = int(stats.run[2])
    if zeros > 0:
        _merge(stats, 0, 0.0, zeros)  # zero gaps have no per-user throughput sample
        stats.run[2] = 0.0
    k = int(stats.run[1])
    if k == 0:
        return
    gap = stats.run[0]
    _merge(stats, 0, gap, k)
    if gap > 0.0:
        _merge(stats, 1, 1000.0 / gap, k)
    stats.run[1] = 0.0


@helper
def record_gap(stats, gap, count):
    """Add `count` inter-token gaps of `gap` ms; negative gaps count as 0 (AISimulate clamps)."""
    if gap < 0.0:
        gap = 0.0
    if stats.run[1] > 0.0 and gap == stats.run[0]:
        stats.run[1] += count
        return
    flush_gaps(stats)
    stats.run[0] = gap
    stats.run[1] = count
