"""The interpolation primitives every leaf lookup of a pass shares (docs/timing.md 4, 6.1, 6.2).

Each leaf lookup returns latency and energy together. A leaf's blend power is E / L (E = power
x measured latency, stored parallel to the latency leaves; L after any load-time SOL clamp)
when both are > 0, else 0 (unmeasured); a blended lookup blends the power with the latency's
weights and its energy is blend power x resolved latency.

The 1-D curve (custom allreduce, NCCL, routed experts): exact hit -> the leaf (its energy
verbatim); between two x -> raw linear; outside -> utilisation hold on the single nearest
boundary point (k_tail = 1): latency = SOL(query) / (SOL(x_edge) / y_edge).

Mirrors: AISimulate 0.13 perf_interp v2 (1-D curve, power blending).
"""

import math

from aisim.kernels._jit import helper


@helper
def lower_bound(v, lo, hi, x):
    """First index in [lo, hi) with v[index] >= x (hi when there is none); v sorted ascending."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if v[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@helper
def blend_power(lat, en, j):
    """Blend power of leaf j: E / L when both are positive, else 0 (unmeasured)."""
    if en[j] > 0.0 and lat[j] > 0.0:
        return en[j] / lat[j]
    return 0.0


BELOW = -2  # segment_lp: x is below the points' range
ABOVE = -3  # ... above it


@helper
def segment_lp(v, lat, en, lo, hi, x):
    """x among the sorted points v[lo:hi] with latencies lat and leaf energies en.

    Returns (latency, blend power, at): at = the exact point's index; -1 between two points
    (latency and power blended linearly); BELOW / ABOVE outside the range (latency nan, power 0:
    the caller holds).
    """
    a = lower_bound(v, lo, hi, x)
    if a < hi and v[a] == x:
        return lat[a], blend_power(lat, en, a), a
    if lo < a < hi:
        w = (x - v[a - 1]) / (v[a] - v[a - 1])
        p0 = blend_power(lat, en, a - 1)
        return lat[a - 1] + (lat[a] - lat[a - 1]) * w, p0 + (blend_power(lat, en, a) - p0) * w, -1
    return math.nan, 0.0, BELOW if a == lo else ABOVE


@helper
def median3(a, b, c):
    if a > b:
        a, b = b, a
    if b > c:
        b, c = c, b
    if a > b:
        a, b = b, a
    return b


@helper  # inlined into each curve's lookup: no call level of its own
def curve_le(q, x, y, en, sol_q, sol_first, sol_last):
    """(latency, energy) of a 1-D curve (x sorted, y latency, en leaf energy) at q.

    sol_q, sol_first, sol_last: the curve's SOL at q, x[0] and x[-1] (only the hold reads them;
    the caller knows the SOL formula).
    """
    lat, power, at = segment_lp(x, y, en, 0, x.shape[0], q)
    if at >= 0:
        return lat, en[at]
    if at == -1:
        return lat, power * lat
    if at == BELOW:
        j = 0
        util = sol_first / y[j]
    else:
        j = x.shape[0] - 1
        util = sol_last / y[j]
    lat = sol_q / util
    return lat, blend_power(y, en, j) * lat
