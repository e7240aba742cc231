"""GEMM lookups: the "scattered sites" resolver of docs/timing.md 4.1, over a resolved plan.

A *site* is one collected (dtype, n, k) with its m-curve (sorted m, latency already raised to at
least SOL at load, leaf energy beside it). A planned GEMM op is either an exact site (one
neighbour, weight 1, flag exact) or up to 16 candidate neighbour sites with 1/(d^2 + 1e-12)
weights fixed at plan time (the weights do not depend on m, docs/timing.md 4.1; which 4 of them are
averaged does). Every function here is pure over arrays and scalars and returns latency and
energy (or blend power) together; optime_interp says how power is blended.

Mirrors: AISimulate 0.13 perf_interp v2 GEMM path (exact m -> measured; between m -> linear in
raw latency; outside -> median utilisation of the 3 boundary points, latency = SOL / util;
shape not collected -> IDW of per-site utilisation at the query m over the 4 nearest sites whose
m-curve covers m, or the 4 nearest when none does; power blended with the same weights, the
median of the 3 boundary powers outside).
"""

from typing import NamedTuple

import numpy as np

from aisim.kernels._jit import helper, kernel
from aisim.kernels.optime_interp import BELOW, blend_power, median3, segment_lp


class GemmSites(NamedTuple):
    """The plan's GEMM ops and the collected sites they read (aisim.timing.leaf_gemm)."""

    op_n: np.ndarray  # float64[num_gemm] the op's shape
    op_k: np.ndarray
    op_flops: np.ndarray  # FLOP/s of the op's dtype
    op_bpe: np.ndarray  # bytes per element of the op's dtype
    op_num_sites: np.ndarray  # int64[num_gemm]: 0 = exact site, else IDW candidates
    op_sites: np.ndarray  # int64[num_gemm, max candidates] site ids, nearest first
    op_weights: np.ndarray  # float64[num_gemm, max candidates] 1/(d^2 + 1e-12)
    site_off: np.ndarray  # int64[num_sites + 1] each site's rows in curve_*
    site_n: np.ndarray  # float64[num_sites]
    site_k: np.ndarray
    site_flops: np.ndarray
    site_bpe: np.ndarray
    curve_m: np.ndarray  # float64[rows] sorted per site
    curve_lat: np.ndarray  # float64[rows] ms, raised to >= SOL
    curve_en: np.ndarray  # float64[rows] W*ms of the measured latency (0 = no power)
    # static per-tensor fp8 (docs/timing.md 4.1): the compute-scale and scale-matrix deltas
    # the op saves over the dynamic fp8 GEMM of the table, each a curve over m at the op's k,
    # or two curves (the bracketing k rows) blended in k
    op_scale: np.ndarray  # int64[num_gemm, 4] curves (cs lo, cs hi, sm lo, sm hi); -1 = none
    op_scale_w: np.ndarray  # float64[num_gemm, 2] weight of the hi curve (cs, sm)
    scale_off: np.ndarray  # int64[num_curves + 1] each curve's rows in scale_*
    scale_m: np.ndarray  # float64[rows] sorted per curve
    scale_lat: np.ndarray  # float64[rows] ms
    scale_pw: np.ndarray  # float64[rows] W (0 = no power)


@helper
def gemm_sol_ms(m, n, k, flops, bytes_per_elem, mem_bw):
    """Roofline of one [m x k] @ [k x n] GEMM, ms: max(2mnk / flops, bytes (mn+mk+nk) / bw)."""
    compute = 2.0 * m * n * k / flops
    memory = bytes_per_elem * (m * n + m * k + n * k) / mem_bw
    return (compute if compute > memory else memory) * 1000.0


@helper
def gemm_op_sol_ms(gemm, g, m, mem_bw):
    """SOL of planned GEMM op g at m, ms."""
    return gemm_sol_ms(m, gemm.op_n[g], gemm.op_k[g], gemm.op_flops[g], gemm.op_bpe[g], mem_bw)


@helper
def _site_sol_ms(gemm, site, m, mem_bw):
    return gemm_sol_ms(
        m, gemm.site_n[site], gemm.site_k[site], gemm.site_flops[site], gemm.site_bpe[site], mem_bw
    )


# inlined into gemm_le: called out of line once per neighbour site, it copied the GEMM record's
# ~110 argument words per call, which cost about as much as the lookup itself
@helper
def site_lp(gemm, site, m, mem_bw):
    """(latency, blend power) of site `site` at m: exact, linear between measured m, or the
    median-of-3 utilisation hold (latency) and median-of-3 power."""
    lat = gemm.curve_lat
    en = gemm.curve_en
    cm = gemm.curve_m
    lo = gemm.site_off[site]
    hi = gemm.site_off[site + 1]
    y, power, at = segment_lp(cm, lat, en, lo, hi, m)
    if at >= -1:
        return y, power
    below = at == BELOW
    if hi - lo < 3:
        j = lo if below else hi - 1
        util = _site_sol_ms(gemm, site, cm[j], mem_bw) / lat[j]
        power = blend_power(lat, en, j)
    else:
        j = lo if below else hi - 3
        u0 = _site_sol_ms(gemm, site, cm[j], mem_bw) / lat[j]
        u1 = _site_sol_ms(gemm, site, cm[j + 1], mem_bw) / lat[j + 1]
        u2 = _site_sol_ms(gemm, site, cm[j + 2], mem_bw) / lat[j + 2]
        util = median3(u0, u1, u2)
        power = median3(
            blend_power(lat, en, j), blend_power(lat, en, j + 1), blend_power(lat, en, j + 2)
        )
    return _site_sol_ms(gemm, site, m, mem_bw) / util, power


IDW_SITES = 4  # neighbour sites averaged per query (docs/timing.md 4.1)


@helper
def covers(gemm, site, m):
    """True when site's measured m-curve spans m (the IDW only averages such sites)."""
    return gemm.curve_m[gemm.site_off[site]] <= m <= gemm.curve_m[gemm.site_off[site + 1] - 1]


@helper
def any_covers(gemm, g, m):
    """True when some candidate neighbour of GEMM op g has measured m (else the IDW falls back
    to the nearest IDW_SITES candidates, m being above every curve)."""
    for j in range(gemm.op_num_sites[g]):  # noqa: SIM110 (numba: no any() over a generator)
        if covers(gemm, gemm.op_sites[g, j], m):
            return True
    return False


@helper
def _scale_curve_lp(gemm, c, m, sol_hold):
    """(latency, power) of curve c at m: linear inside, the boundary point outside (scale
    matrix: its latency times the SOL ratio m / m_boundary of its 3mk-byte roofline)."""
    lo = gemm.scale_off[c]
    hi = gemm.scale_off[c + 1]
    xs = gemm.scale_m
    ys = gemm.scale_lat
    ps = gemm.scale_pw
    if m <= xs[lo]:
        j = lo
    elif m >= xs[hi - 1]:
        j = hi - 1
    else:
        a = lo + 1
        while xs[a] < m:
            a += 1
        if xs[a] == m:
            return ys[a], ps[a]
        w = (m - xs[a - 1]) / (xs[a] - xs[a - 1])
        return ys[a - 1] + (ys[a] - ys[a - 1]) * w, ps[a - 1] + (ps[a] - ps[a - 1]) * w
    if sol_hold and xs[j] != m:
        return ys[j] * (m / xs[j]), ps[j]
    return ys[j], ps[j]


@helper
def _scale_lp(gemm, g, j, m):
    """(latency ms, power W) of delta j (0 compute scale, 1 scale matrix) of GEMM op g at m,
    latency and power each blended in k; (0, 0) when absent."""
    c0 = gemm.op_scale[g, 2 * j]
    if c0 < 0:
        return 0.0, 0.0
    y0, p0 = _scale_curve_lp(gemm, c0, m, j == 1)
    c1 = gemm.op_scale[g, 2 * j + 1]
    if c1 < 0:
        return y0, p0
    y1, p1 = _scale_curve_lp(gemm, c1, m, j == 1)
    w = gemm.op_scale_w[g, j]
    return y0 + (y1 - y0) * w, p0 + (p1 - p0) * w


@kernel
def gemm_le(gemm, g, m, mem_bw):
    """(latency ms, energy W*ms) of planned GEMM op g at m: the table's GEMM, less the static
    fp8 deltas of an op that has them (latency floored at its SOL, energy less theirs)."""
    lat, power = _table_gemm_lp(gemm, g, m, mem_bw)
    en = power * lat
    if gemm.op_scale[g, 0] >= 0:
        cs, cs_p = _scale_lp(gemm, g, 0, m)
        sm, sm_p = _scale_lp(gemm, g, 1, m)
        lat = lat - cs - sm
        en = en - cs_p * cs - sm_p * sm
        sol = gemm_op_sol_ms(gemm, g, m, mem_bw)
        if lat < sol:
            lat = sol
    return lat, en


@helper
def _table_gemm_lp(gemm, g, m, mem_bw):
    """(latency ms, blend power W) of planned GEMM op g at m from the table's sites.

    op_num_sites[g] == 0 marks an exact site (op_sites[g, 0]); otherwise that many candidate
    neighbours, nearest first, with weights op_weights[g, :]: the first IDW_SITES whose m-curve
    covers m enter the IDW (the first IDW_SITES if none does). Energy = blend power x latency.
    """
    if gemm.op_num_sites[g] == 0:
        return site_lp(gemm, gemm.op_sites[g, 0], m, mem_bw)
    only_covering = any_covers(gemm, g, m)
    num = 0.0
    den = 0.0
    num_p = 0.0
    taken = 0
    for i in range(gemm.op_num_sites[g]):
        s = gemm.op_sites[g, i]
        if only_covering and not covers(gemm, s, m):
            continue
        lat, power = site_lp(gemm, s, m, mem_bw)
        util = _site_sol_ms(gemm, s, m, mem_bw) / lat
        w = gemm.op_weights[g, i]
        num += w * util
        den += w
        num_p += w * power
        taken += 1
        if taken == IDW_SITES:
            break
    return gemm_op_sol_ms(gemm, g, m, mem_bw) / (num / den), num_p / den
