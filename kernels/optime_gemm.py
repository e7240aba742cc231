"""GEMM latency lookups: the "scattered sites" resolver of timing.md 3.1, over a resolved plan.

A *site* is one collected (dtype, n, k) with its m-curve (sorted m, latency already raised to at
least SOL at load). A planned GEMM op is either an exact site (one neighbour, weight 1, flag
exact) or up to GEMM_MAX_NEIGHBOURS candidate neighbour sites with 1/(d^2 + 1e-12) weights fixed
at plan time (the weights do not depend on m, timing.md 6.3; which 4 of them are averaged
does). Every function here is pure over arrays and scalars.

Mirrors: AISimulate 0.13 perf_interp v2 GEMM path (exact m -> measured; between m -> linear in
raw latency; outside -> median utilisation of the 3 boundary points, latency = SOL / util;
shape not collected -> IDW of per-site utilisation at the query m over the 4 nearest sites whose
m-curve covers m, or the 4 nearest when none does).
"""

from aisim.kernels._jit import helper, kernel


@helper
def gemm_sol_ms(m, n, k, flops, bytes_per_elem, mem_bw):
    """Roofline of one [m x k] @ [k x n] GEMM, ms: max(2mnk / flops, bytes (mn+mk+nk) / bw)."""
    compute = 2.0 * m * n * k / flops
    memory = bytes_per_elem * (m * n + m * k + n * k) / mem_bw
    return (compute if compute > memory else memory) * 1000.0


@helper
def _median3(a, b, c):
    if a > b:
        a, b = b, a
    if b > c:
        b, c = c, b
    if a > b:
        a, b = b, a
    return b


@kernel
def site_latency_ms(site, m, site_off, site_n, site_k, site_flops, site_bpe, curve_m,
                    curve_lat, mem_bw):
    """Latency of site `site` at m: exact, linear between measured m, or median-of-3 util hold.

    curve_m / curve_lat: float64[rows], each site's rows at [site_off[site], site_off[site+1]),
    sorted by m; latency already clamped to >= SOL.
    """
    lo = site_off[site]
    hi = site_off[site + 1]
    count = hi - lo
    # binary search: first index with curve_m >= m
    a = lo
    b = hi
    while a < b:
        mid = (a + b) >> 1
        if curve_m[mid] < m:
            a = mid + 1
        else:
            b = mid
    if a < hi and curve_m[a] == m:
        return curve_lat[a]
    if lo < a < hi:
        m0 = curve_m[a - 1]
        m1 = curve_m[a]
        l0 = curve_lat[a - 1]
        w = (m - m0) / (m1 - m0)
        return l0 + (curve_lat[a] - l0) * w
    n = site_n[site]
    k = site_k[site]
    flops = site_flops[site]
    bpe = site_bpe[site]
    if count < 3:
        j = lo if a == lo else hi - 1
        util = gemm_sol_ms(curve_m[j], n, k, flops, bpe, mem_bw) / curve_lat[j]
    else:
        j = lo if a == lo else hi - 3
        u0 = gemm_sol_ms(curve_m[j], n, k, flops, bpe, mem_bw) / curve_lat[j]
        u1 = gemm_sol_ms(curve_m[j + 1], n, k, flops, bpe, mem_bw) / curve_lat[j + 1]
        u2 = gemm_sol_ms(curve_m[j + 2], n, k, flops, bpe, mem_bw) / curve_lat[j + 2]
        util = _median3(u0, u1, u2)
    return gemm_sol_ms(m, n, k, flops, bpe, mem_bw) / util


IDW_SITES = 4   # neighbour sites averaged per query (timing.md 3.1)


@helper
def covers(site, m, site_off, curve_m):
    """True when site's measured m-curve spans m (the IDW only averages such sites)."""
    return curve_m[site_off[site]] <= m <= curve_m[site_off[site + 1] - 1]


@helper
def any_covers(g, m, gemm_num_sites, gemm_sites, site_off, curve_m):
    """True when some candidate neighbour of GEMM op g has measured m (else the IDW falls back
    to the nearest IDW_SITES candidates, m being above every curve)."""
    for j in range(gemm_num_sites[g]):  # noqa: SIM110 (numba: no any() over a generator)
        if covers(gemm_sites[g, j], m, site_off, curve_m):
            return True
    return False


@kernel
def gemm_latency_ms(g, m, gemm_n, gemm_k, gemm_flops, gemm_bpe, gemm_num_sites, gemm_sites,
                    gemm_weights, site_off, site_n, site_k, site_flops, site_bpe, curve_m,
                    curve_lat, mem_bw):
    """Latency of planned GEMM op g at m (ms per call).

    gemm_num_sites[g] == 0 marks an exact site (gemm_sites[g, 0]); otherwise that many
    candidate neighbours, nearest first, with weights gemm_weights[g, :] (1/(d^2 + 1e-12)): the
    first IDW_SITES whose m-curve covers m enter the IDW (the first IDW_SITES if none does).
    """
    if gemm_num_sites[g] == 0:
        return site_latency_ms(gemm_sites[g, 0], m, site_off, site_n, site_k, site_flops,
                               site_bpe, curve_m, curve_lat, mem_bw)
    only_covering = any_covers(g, m, gemm_num_sites, gemm_sites, site_off, curve_m)
    num = 0.0
    den = 0.0
    taken = 0
    for i in range(gemm_num_sites[g]):
        s = gemm_sites[g, i]
        if only_covering and not covers(s, m, site_off, curve_m):
            continue
        lat = site_latency_ms(s, m, site_off, site_n, site_k, site_flops, site_bpe, curve_m,
                              curve_lat, mem_bw)
        util = gemm_sol_ms(m, site_n[s], site_k[s], site_flops[s], site_bpe[s], mem_bw) / lat
        w = gemm_weights[g, i]
        num += w * util
        den += w
        taken += 1
        if taken == IDW_SITES:
            break
    return gemm_sol_ms(m, gemm_n[g], gemm_k[g], gemm_flops[g], gemm_bpe[g], mem_bw) / (num / den)
