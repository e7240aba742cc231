"""Per-op latency, energy and covered latency of one pass (timing.md 8.1, 8.2).

Every table lookup of aisim.kernels.optime_gemm / optime_attention / optime_comm is mirrored
here returning (latency, blend power, exact): the latency arithmetic is the same expression for
expression (the tests check bit equality with price_prefill / price_decode), and the power is
blended linearly with the same weights. A leaf's blend power is E / L (E = power x measured
latency, stored in the plan's *_en arrays parallel to the latency leaves; L after the SOL
clamp) when both are > 0, else 0. Energy is then
  * an exact hit on a Grid leaf (attention, allreduce): the leaf's E verbatim;
  * everything else (GEMM exact hit included): blend power x resolved latency.
Op wrappers scale energy like latency (prefix correction, layer scale); additive analytic parts
(fused attention extras, memory ops, p2p, TP-1 allreduce, every SOL-mode estimate) carry 0 W*ms.

Per op, the kernels write latency (ms), energy (W*ms; 0 = no evidence) and covered latency
(= latency when energy > 0, else 0) into caller-owned arrays, and return the phase latency total
in the same summation order as price_prefill / price_decode.

Mirrors: AISimulate 0.13 op-level estimator energy evidence (perf_interp v2 power blending).
"""

import math

from aisim.kernels._jit import helper, kernel
from aisim.kernels.optime_attention import (
    KIND_CONTEXT,
    KIND_DSA_CONTEXT,
    KIND_DSA_GENERATION,
    KIND_GENERATION,
    _lower_bound,
    _owner,
    attention_sol_ms,
)
from aisim.kernels.optime_comm import allreduce_sol_ms
from aisim.kernels.optime_dsa import DSA_HOLD_NUM, dsa_context_hold
from aisim.kernels.optime_gemm import IDW_SITES, _median3, any_covers, covers, gemm_sol_ms
from aisim.kernels.optime_moe import MOE_DP, moe_le
from aisim.kernels.optime_pass import (
    C_AR_ELEM_BYTES,
    C_CTX_EXTRA_MS,
    C_GEN_EXTRA_MS,
    C_HEADS,
    C_LINK_BW,
    C_MEM_BW,
    C_MODE,
    C_NEXTN,
    C_NUM_CTX_OPS,
    C_NUM_OPS,
    C_OVL_A_LO,
    C_OVL_B_HI,
    C_TP,
    MODE_SOL,
    OP_ALLREDUCE,
    OP_ATTN_CONTEXT,
    OP_ATTN_GENERATION,
    OP_DSA_CONTEXT,
    OP_DSA_GENERATION,
    OP_GEMM_REQUESTS,
    OP_GEMM_TOKENS,
    OP_MOE,
    OP_OVERLAP,
    OP_SUM,
    _op_ms,
)


@helper
def _bp(lat, en, j):
    """Blend power of leaf j: E / L when both are positive, else 0 (unmeasured)."""
    if en[j] > 0.0 and lat[j] > 0.0:
        return en[j] / lat[j]
    return 0.0


# ------------------------------------------------------------------------------------ GEMM


@kernel
def site_lp(site, m, site_off, site_n, site_k, site_flops, site_bpe, curve_m, curve_lat,
            curve_en, mem_bw):
    """(latency, blend power) of site `site` at m; latency as optime_gemm.site_latency_ms."""
    lo = site_off[site]
    hi = site_off[site + 1]
    count = hi - lo
    a = lo
    b = hi
    while a < b:
        mid = (a + b) >> 1
        if curve_m[mid] < m:
            a = mid + 1
        else:
            b = mid
    if a < hi and curve_m[a] == m:
        return curve_lat[a], _bp(curve_lat, curve_en, a)
    if lo < a < hi:
        m0 = curve_m[a - 1]
        m1 = curve_m[a]
        l0 = curve_lat[a - 1]
        w = (m - m0) / (m1 - m0)
        p0 = _bp(curve_lat, curve_en, a - 1)
        return l0 + (curve_lat[a] - l0) * w, p0 + (_bp(curve_lat, curve_en, a) - p0) * w
    n = site_n[site]
    k = site_k[site]
    flops = site_flops[site]
    bpe = site_bpe[site]
    if count < 3:
        j = lo if a == lo else hi - 1
        util = gemm_sol_ms(curve_m[j], n, k, flops, bpe, mem_bw) / curve_lat[j]
        pw = _bp(curve_lat, curve_en, j)
    else:
        j = lo if a == lo else hi - 3
        u0 = gemm_sol_ms(curve_m[j], n, k, flops, bpe, mem_bw) / curve_lat[j]
        u1 = gemm_sol_ms(curve_m[j + 1], n, k, flops, bpe, mem_bw) / curve_lat[j + 1]
        u2 = gemm_sol_ms(curve_m[j + 2], n, k, flops, bpe, mem_bw) / curve_lat[j + 2]
        util = _median3(u0, u1, u2)
        pw = _median3(_bp(curve_lat, curve_en, j), _bp(curve_lat, curve_en, j + 1),
                      _bp(curve_lat, curve_en, j + 2))
    return gemm_sol_ms(m, n, k, flops, bpe, mem_bw) / util, pw


@kernel
def gemm_le(plan, g, m):
    """(latency, energy) of planned GEMM op g at m, one call; energy = blend power x latency."""
    mem_bw = plan.consts[C_MEM_BW]
    if plan.gemm_num_sites[g] == 0:
        lat, pw = site_lp(plan.gemm_sites[g, 0], m, plan.site_off, plan.site_n, plan.site_k,
                          plan.site_flops, plan.site_bpe, plan.curve_m, plan.curve_lat,
                          plan.curve_en, mem_bw)
        return lat, pw * lat
    only_covering = any_covers(g, m, plan.gemm_num_sites, plan.gemm_sites, plan.site_off,
                               plan.curve_m)
    num = 0.0
    den = 0.0
    num_p = 0.0
    taken = 0
    for i in range(plan.gemm_num_sites[g]):
        s = plan.gemm_sites[g, i]
        if only_covering and not covers(s, m, plan.site_off, plan.curve_m):
            continue   # the same pick as optime_gemm.gemm_latency_ms
        lat, pw = site_lp(s, m, plan.site_off, plan.site_n, plan.site_k, plan.site_flops,
                          plan.site_bpe, plan.curve_m, plan.curve_lat, plan.curve_en, mem_bw)
        util = gemm_sol_ms(m, plan.site_n[s], plan.site_k[s], plan.site_flops[s],
                           plan.site_bpe[s], mem_bw) / lat
        w = plan.gemm_weights[g, i]
        num += w * util
        den += w
        num_p += w * pw
        taken += 1
        if taken == IDW_SITES:
            break
    lat = gemm_sol_ms(m, plan.gemm_n[g], plan.gemm_k[g], plan.gemm_flops[g], plan.gemm_bpe[g],
                      mem_bw) / (num / den)
    return lat, (num_p / den) * lat


# ------------------------------------------------------------------------------- attention


@helper
def _level2_lp(i1, x2, o1, v2, lat, en):
    lo = o1[i1]
    hi = o1[i1 + 1]
    a = _lower_bound(v2, lo, hi, x2)
    if a < hi and v2[a] == x2:
        return lat[a], _bp(lat, en, a), a
    if lo < a < hi:
        w = (x2 - v2[a - 1]) / (v2[a] - v2[a - 1])
        p0 = _bp(lat, en, a - 1)
        return lat[a - 1] + (lat[a] - lat[a - 1]) * w, p0 + (_bp(lat, en, a) - p0) * w, -1
    return math.nan, 0.0, -1


@kernel
def _level1_lp(kind, i0, heads, x1, x2, o0, v1, o1, v2, lat, en, par, sqrt_axis1):
    """(latency, power, exact leaf index or -1)."""
    lo = o0[i0]
    hi = o0[i0 + 1]
    a = _lower_bound(v1, lo, hi, x1)
    if a < hi and v1[a] == x1:
        return _level2_lp(a, x2, o1, v2, lat, en)
    if not (lo < a < hi):
        return math.nan, 0.0, -1
    y0, p0, _e0 = _level2_lp(a - 1, x2, o1, v2, lat, en)
    y1, p1, _e1 = _level2_lp(a, x2, o1, v2, lat, en)
    ok0 = not math.isnan(y0)
    ok1 = not math.isnan(y1)
    if ok0 and ok1:
        w = (x1 - v1[a - 1]) / (v1[a] - v1[a - 1])
        pw = p0 + (p1 - p0) * w
        if sqrt_axis1:
            r0 = math.sqrt(y0)
            r = r0 + (math.sqrt(y1) - r0) * w
            return r * r, pw, -1
        return y0 + (y1 - y0) * w, pw, -1
    if ok0:
        return (y0 * (attention_sol_ms(kind, heads, x1, x2, par)
                      / attention_sol_ms(kind, heads, v1[a - 1], x2, par)), p0, -1)
    if ok1:
        return (y1 * (attention_sol_ms(kind, heads, x1, x2, par)
                      / attention_sol_ms(kind, heads, v1[a], x2, par)), p1, -1)
    return math.nan, 0.0, -1


@kernel
def grid_le(kind, x0, x1, x2, v0, o0, v1, o1, v2, lat, en, par, scratch_d, scratch_i):
    """(latency, energy) of one layer; latency as optime_attention.grid_latency_ms."""
    sqrt_axis1 = kind == KIND_CONTEXT
    n0 = v0.shape[0]
    a = _lower_bound(v0, 0, n0, x0)
    y = math.nan
    pw = 0.0
    exact = -1
    if a < n0 and v0[a] == x0:
        y, pw, exact = _level1_lp(kind, a, x0, x1, x2, o0, v1, o1, v2, lat, en, par,
                                  sqrt_axis1)
    elif 0 < a < n0:
        y0, p0, _e0 = _level1_lp(kind, a - 1, x0, x1, x2, o0, v1, o1, v2, lat, en, par,
                                 sqrt_axis1)
        y1, p1, _e1 = _level1_lp(kind, a, x0, x1, x2, o0, v1, o1, v2, lat, en, par,
                                 sqrt_axis1)
        ok0 = not math.isnan(y0)
        ok1 = not math.isnan(y1)
        if ok0 and ok1:
            w = (x0 - v0[a - 1]) / (v0[a] - v0[a - 1])
            y = y0 + (y1 - y0) * w
            pw = p0 + (p1 - p0) * w
        elif ok0:
            y = y0 * (attention_sol_ms(kind, x0, x1, x2, par)
                      / attention_sol_ms(kind, v0[a - 1], x1, x2, par))
            pw = p0
        elif ok1:
            y = y1 * (attention_sol_ms(kind, x0, x1, x2, par)
                      / attention_sol_ms(kind, v0[a], x1, x2, par))
            pw = p1
    if not math.isnan(y):
        if exact >= 0:
            return y, en[exact]
        return y, pw * y
    if kind == KIND_DSA_CONTEXT and par[DSA_HOLD_NUM] > 0.0:
        return dsa_context_hold(x0 - 1.0, x1, x2, par, scratch_d, scratch_i)
    return hold_le(kind, x0, x1, x2, v0, o0, v1, o1, v2, lat, en, par, scratch_d, scratch_i)


@kernel
def hold_le(kind, x0, x1, x2, v0, o0, v1, o1, v2, lat, en, par, best_d, best_i):
    """Multi-axis hold (latency as optime_attention.hold_latency_ms); power is the same
    taper-weighted mean over the anchors' blend powers."""
    q0 = math.log2(x0)
    q1 = math.log2(x1)
    q2 = math.log2(x2)
    num_best = 0
    for i in range(5):
        best_d[i] = math.inf
        best_i[i] = -1
    for i0 in range(v0.shape[0]):
        d0 = math.log2(v0[i0]) - q0
        for i1 in range(o0[i0], o0[i0 + 1]):
            d1 = math.log2(v1[i1]) - q1
            for i2 in range(o1[i1], o1[i1 + 1]):
                d2 = math.log2(v2[i2]) - q2
                dist = math.sqrt(d0 * d0 + d1 * d1 + d2 * d2)
                if num_best < 5 or dist < best_d[num_best - 1]:
                    j = num_best if num_best < 5 else 4
                    while j > 0 and best_d[j - 1] > dist:
                        if j < 5:
                            best_d[j] = best_d[j - 1]
                            best_i[j] = best_i[j - 1]
                        j -= 1
                    best_d[j] = dist
                    best_i[j] = i2
                    if num_best < 5:
                        num_best += 1
    if num_best == 0:
        return math.nan, 0.0
    if best_d[0] == 0.0:
        return lat[best_i[0]], en[best_i[0]]
    num_anchor = num_best if num_best < 4 else 4
    radius = best_d[4] if num_best == 5 else best_d[num_best - 1] * (1.0 + 1e-9)
    num = 0.0
    den = 0.0
    num_p = 0.0
    for j in range(num_anchor):
        i2 = best_i[j]
        i1 = _owner(o1, i2)
        i0 = _owner(o0, i1)
        util = attention_sol_ms(kind, v0[i0], v1[i1], v2[i2], par) / lat[i2]
        dj = best_d[j]
        t = (radius - dj) / (radius * dj)
        w = t * t
        num += w * util
        den += w
        num_p += w * _bp(lat, en, i2)
    if den <= 0.0:
        num = 0.0
        num_p = 0.0
        for j in range(num_anchor):
            i2 = best_i[j]
            i1 = _owner(o1, i2)
            i0 = _owner(o0, i1)
            num += attention_sol_ms(kind, v0[i0], v1[i1], v2[i2], par) / lat[i2]
            num_p += _bp(lat, en, i2)
        den = num_anchor
    y = attention_sol_ms(kind, x0, x1, x2, par) / (num / den)
    return y, (num_p / den) * y


@kernel
def generation_5sample_le(heads, batch, s, v0, o0, v1, o1, v2, lat, en, par, scratch_d,
                          scratch_i):
    """(mean latency, mean energy) of the 5 kv samples in [0.9 s, 1.1 s]."""
    s_min = int(math.floor(0.9 * s))  # noqa: RUF046 (numba typing)
    if s_min < 1:
        s_min = 1
    s_max = int(math.floor(1.1 * s))  # noqa: RUF046 (numba typing)
    if s_max < s_min:
        s_max = s_min
    total = 0.0
    total_e = 0.0
    for i in range(5):
        kv = s_min + ((s_max - s_min) * i) // 4
        y, e = grid_le(KIND_GENERATION, heads, batch, float(kv), v0, o0, v1, o1, v2, lat, en,
                       par, scratch_d, scratch_i)
        total += y
        total_e += e
    return total / 5.0, total_e / 5.0


# ----------------------------------------------------------------------------- allreduce


@kernel
def allreduce_le(elements, x, y, en, num_gpus, elem_bytes, link_bw):
    """(latency, energy) of a custom allreduce; latency as optime_comm.allreduce_latency_ms."""
    if num_gpus <= 1:
        return 0.0, 0.0
    n = x.shape[0]
    lo = 0
    hi = n
    while lo < hi:
        mid = (lo + hi) >> 1
        if x[mid] < elements:
            lo = mid + 1
        else:
            hi = mid
    if lo < n and x[lo] == elements:
        return y[lo], en[lo]
    if 0 < lo < n:
        w = (elements - x[lo - 1]) / (x[lo] - x[lo - 1])
        lat = y[lo - 1] + (y[lo] - y[lo - 1]) * w
        p0 = _bp(y, en, lo - 1)
        return lat, (p0 + (_bp(y, en, lo) - p0) * w) * lat
    j = 0 if lo == 0 else n - 1
    util = allreduce_sol_ms(x[j], num_gpus, elem_bytes, link_bw) / y[j]
    lat = allreduce_sol_ms(elements, num_gpus, elem_bytes, link_bw) / util
    return lat, _bp(y, en, j) * lat


# ------------------------------------------------------------------------------------ ops


@kernel
def _op_le(plan, i, tokens, requests, batch, seq, prefix):
    """(latency, energy) of op i for one layer, before its scale factor.

    A composite op (the MoE overlap, an OP_SUM block) carries the energy of all its hidden
    sub-ops, both overlap branches included (AISimulate, TRT-LLM DeepSeek: the overlap's
    energy is the routed plus the shared expert's); its latency is optime_pass._op_ms's.
    """
    kind = plan.op_kind[i]
    if plan.consts[C_MODE] != MODE_SOL and (kind == OP_OVERLAP or kind == OP_SUM):  # noqa: SIM109
        if kind == OP_OVERLAP:
            lo = int(plan.consts[C_OVL_A_LO])
            hi = int(plan.consts[C_OVL_B_HI])
        else:
            lo = plan.op_index[i]
            hi = lo + int(plan.op_param[i])
        e = 0.0
        for j in range(lo, hi):
            e += _leaf_le(plan, j, tokens, requests, batch, seq, prefix)[1]
        return _op_ms(plan, i, tokens, requests, batch, seq, prefix), e
    return _leaf_le(plan, i, tokens, requests, batch, seq, prefix)


@kernel
def _leaf_le(plan, i, tokens, requests, batch, seq, prefix):
    """(latency, energy) of a non-composite op i for one layer, before its scale factor."""
    consts = plan.consts
    kind = plan.op_kind[i]
    if consts[C_MODE] == MODE_SOL:
        return _op_ms(plan, i, tokens, requests, batch, seq, prefix), 0.0
    if kind == OP_GEMM_TOKENS:
        return gemm_le(plan, plan.op_index[i], tokens)
    if kind == OP_GEMM_REQUESTS:
        return gemm_le(plan, plan.op_index[i], requests)
    if kind == OP_ALLREDUCE:
        return allreduce_le(tokens * plan.op_param[i], plan.ar_x, plan.ar_y, plan.ar_en,
                            consts[C_TP], consts[C_AR_ELEM_BYTES], consts[C_LINK_BW])
    if kind == OP_ATTN_CONTEXT:
        corr = (seq * seq - prefix * prefix) / (seq * seq)
        table, e = grid_le(KIND_CONTEXT, consts[C_HEADS], seq, batch, plan.ctx_v0, plan.ctx_o0,
                           plan.ctx_v1, plan.ctx_o1, plan.ctx_v2, plan.ctx_lat, plan.ctx_en,
                           plan.ctx_par, plan.scratch_d, plan.scratch_i)
        return table * corr + consts[C_CTX_EXTRA_MS], e * corr
    if kind == OP_ATTN_GENERATION:
        table, e = generation_5sample_le(consts[C_HEADS], batch, seq, plan.gen_v0, plan.gen_o0,
                                         plan.gen_v1, plan.gen_o1, plan.gen_v2, plan.gen_lat,
                                         plan.gen_en, plan.gen_par, plan.scratch_d,
                                         plan.scratch_i)
        return table + consts[C_GEN_EXTRA_MS], e
    if kind == OP_MOE:
        return moe_le(tokens * plan.moe_par[MOE_DP], plan.moe_x, plan.moe_y, plan.moe_en,
                      plan.moe_par)
    if kind == OP_DSA_CONTEXT:
        return grid_le(KIND_DSA_CONTEXT, prefix + 1.0, seq - prefix, batch, plan.dsa_ctx_v0,
                       plan.dsa_ctx_o0, plan.dsa_ctx_v1, plan.dsa_ctx_o1, plan.dsa_ctx_v2,
                       plan.dsa_ctx_lat, plan.dsa_ctx_en, plan.dsa_ctx_par, plan.scratch_d,
                       plan.scratch_i)
    if kind == OP_DSA_GENERATION:
        return grid_le(KIND_DSA_GENERATION, consts[C_HEADS], batch, seq, plan.dsa_gen_v0,
                       plan.dsa_gen_o0, plan.dsa_gen_v1, plan.dsa_gen_o1, plan.dsa_gen_v2,
                       plan.dsa_gen_lat, plan.dsa_gen_en, plan.dsa_gen_par, plan.scratch_d,
                       plan.scratch_i)
    # memory ops, p2p: analytic; NCCL: a table without power (AISimulate reports them without
    # energy evidence)
    return _op_ms(plan, i, tokens, requests, batch, seq, prefix), 0.0


@helper
def _store(i, ms, e, scale, out_ms, out_energy_wms, out_covered_ms):
    ms = ms * scale
    e = e * scale
    out_ms[i] = ms
    if e > 0.0:
        out_energy_wms[i] = e
        out_covered_ms[i] = ms
    else:
        out_energy_wms[i] = 0.0
        out_covered_ms[i] = 0.0
    return ms


@kernel
def price_prefill_energy(plan, batch, isl, prefix, out_ms, out_energy_wms, out_covered_ms):
    """PREFILL(batch, isl, prefix) with energy evidence; returns the phase latency (ms).

    Mutates [0, num_ctx_ops) of out_ms (identical to price_prefill), out_energy_wms (W*ms,
    0 = none) and out_covered_ms (op latency when its energy > 0, else 0).
    """
    new = isl - prefix
    tokens = float(batch * new)
    total = 0.0
    num_ctx = int(plan.consts[C_NUM_CTX_OPS])
    for i in range(num_ctx):
        ms, e = _op_le(plan, i, tokens, float(batch), float(batch), float(isl), float(prefix))
        total += _store(i, ms, e, plan.op_scale[i], out_ms, out_energy_wms, out_covered_ms)
    return total


@kernel
def price_decode_energy(plan, batch, ctx, out_ms, out_energy_wms, out_covered_ms):
    """DECODE(batch, ctx) with energy evidence; writes [num_ctx_ops, num_ops) of the outputs."""
    eff = float(batch * (1 + int(plan.consts[C_NEXTN])))
    total = 0.0
    for i in range(int(plan.consts[C_NUM_CTX_OPS]), int(plan.consts[C_NUM_OPS])):
        ms, e = _op_le(plan, i, eff, eff, eff, float(ctx), 0.0)
        total += _store(i, ms, e, plan.op_scale[i], out_ms, out_energy_wms, out_covered_ms)
    return total


@kernel
def accumulate(lo, hi, out_ms, out_energy_wms, out_covered_ms, acc_ms, acc_energy_wms,
               acc_covered_ms):
    """acc[i] += out[i] for i in [lo, hi): one evaluation into the run accumulators."""
    for i in range(lo, hi):
        acc_ms[i] += out_ms[i]
        acc_covered_ms[i] += out_covered_ms[i]
        acc_energy_wms[i] += out_energy_wms[i]
