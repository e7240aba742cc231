"""Attention lookups over one resolved key slice (docs/timing.md 4.2, 4.3), latency and energy.

A slice (`GridSlice`) is a 3-level nest, CSR style: axis-0 values v0[A0] with offsets o0[A0+1]
into axis-1 values v1, offsets o1 into axis-2 values v2, and leaf latencies lat[A2] (ms per
layer) with their energies en[A2] (W*ms, 0 = no power; optime_interp says how it blends).
  context attention:    axes (num_heads, seq, batch), sqrt(latency) blended along seq;
  generation attention: axes (num_heads, batch, kv_len), raw linear on every axis, leaves
                        already raised to at least SOL at load.
`par` (float64[PAR_SIZE]) holds the slice's constants for its SOL (see PAR_* below).

Per axis: an exact key collapses the level; between two keys the two branches are blended
(sqrt space on the context seq axis, raw elsewhere); when only one branch has data (the
staircase edge) the survivor is rescaled by SOL(query) / SOL(query with that one axis at the
survivor coordinate) -- the other axes stay at the query's coordinates even inside a bracket
branch of an outer axis (checked on the DSA modules, where the cached-prefix axis brackets);
when no branch has data, or the query is outside an axis's range, the whole lookup falls
to the multi-axis utilisation hold: the 4 nearest leaves in joint log2 space, tapered Shepard
weights ((R - d) / (R d))^2 with R the 5th nearest distance, latency = SOL(query) / mean util.
The same grid serves the DeepSeek attention modules (kinds KIND_DSA_*, SOL from optime_dsa).

Mirrors: AISimulate 0.13 perf_interp v2 Grid resolver (context / generation attention).
"""

import math
from typing import NamedTuple

import numpy as np

from aisim.kernels._jit import helper, kernel
from aisim.kernels.optime_dsa import (
    DSA_HOLD_NUM,
    DSA_TOPK,
    dsa_context_hold,
    dsa_context_sol_ms,
    dsa_generation_sol_ms,
    mla_generation_sol_ms,
)
from aisim.kernels.optime_interp import blend_power, lower_bound, segment_lp

KIND_CONTEXT = 0
KIND_GENERATION = 1
# DeepSeek DSA attention modules (docs/timing.md 4.8): raw linear on every axis, own SOL
KIND_DSA_CONTEXT = 2  # axes (cached prefix + 1, new tokens, batch); heads fixed by the slice
KIND_DSA_GENERATION = 3  # axes (num_heads, batch, kv_len)

PAR_NUM_KV_HEADS = 0  # kv heads per rank (ignored when PAR_MHA is 1: kv heads = heads)
PAR_HEAD_DIM = 1
PAR_KV_BYTES = 2  # bytes per KV element
PAR_FLOPS = 3  # tensor FLOP/s of the fmha dtype
PAR_WINDOW = 4  # sliding window, 0 = none
PAR_MEM_BW = 5  # bytes/s
PAR_MHA = 6  # 1 when the slice key is the MHA sentinel (n_kv_lookup = 0)
PAR_SIZE = 8
# DSA kinds reuse the slots: PAR_NUM_KV_HEADS = heads per rank, PAR_HEAD_DIM = latent q/k dim
# (kv_lora_rank + rope dim), PAR_WINDOW = index_topk (keys each query attends to)


class GridSlice(NamedTuple):
    """One key slice of an attention (or attention-module) table (aisim.timing.leaf_attention)."""

    v0: np.ndarray  # float64[A0] axis-0 values, ascending
    o0: np.ndarray  # int64[A0 + 1] offsets into v1
    v1: np.ndarray  # float64[A1]
    o1: np.ndarray  # int64[A1 + 1] offsets into v2
    v2: np.ndarray  # float64[A2]
    lat: np.ndarray  # float64[A2] ms per layer
    en: np.ndarray  # float64[A2] W*ms (0 = no power)
    par: np.ndarray  # float64[>= PAR_SIZE] the slice's SOL constants


@helper
def dsa_sol_ms(kind, x0, x1, x2, par):
    """SOL of one DSA / MLA module call at grid coordinates, ms (ragged brackets, hold).

    context: x0 = prefix + 1, x1 = new tokens, x2 = batch (heads fixed by the slice);
    generation: x0 = heads, x1 = batch, x2 = kv. DSA modules: `optime_dsa`'s fitted SOL;
    dense MLA modules (DSA_TOPK = 0): the fitted MLA generation SOL.
    """
    if par[DSA_TOPK] <= 0.0:
        # (vLLM's dense MLA context module is read as context attention:
        # aisim.timing.family_deepseek_mla)
        return mla_generation_sol_ms(x0, x1, x2, par)
    if kind == KIND_DSA_CONTEXT:
        return dsa_context_sol_ms(par[PAR_NUM_KV_HEADS], x0 - 1.0, x1, x2, par)
    return dsa_generation_sol_ms(x0, x1, x2, par)


@helper
def attention_sol_ms(kind, heads, x1, x2, par):
    """SOL of one layer at axis coordinates (heads, x1, x2), ms.

    context (x1 = seq s, x2 = batch b): FLOPs 2 b s^2 n d 2 / 2 (window w < s: 2 b s w n d 2),
      bytes 2 b (2 n s d) + kv_bytes b 2 n_kv s d.
    generation (x1 = batch b, x2 = kv s): FLOPs 2 b n d 2 k, bytes b (n d 2 + 2 n_kv k d
      kv_bytes + n d 2) over the k = s - 1 cached keys (window w < s - 1: k = w).
    """
    if kind >= KIND_DSA_CONTEXT:
        return dsa_sol_ms(kind, heads, x1, x2, par)
    d = par[PAR_HEAD_DIM]
    n_kv = heads if par[PAR_MHA] != 0.0 else par[PAR_NUM_KV_HEADS]
    kvb = par[PAR_KV_BYTES]
    if kind == KIND_CONTEXT:
        s = x1
        b = x2
        w = par[PAR_WINDOW]
        if w > 0.0 and w < s:
            flops = 2.0 * b * s * w * heads * d * 2.0
        else:
            flops = 2.0 * b * s * s * heads * d * 2.0 / 2.0
        nbytes = 2.0 * b * (2.0 * heads * s * d) + kvb * b * 2.0 * n_kv * s * d
    else:
        b = x1
        k = x2 - 1.0
        w = par[PAR_WINDOW]
        if w > 0.0 and w < k:
            k = w
        flops = 2.0 * b * heads * d * 2.0 * k
        nbytes = b * (heads * d * 2.0 + 2.0 * n_kv * k * d * kvb + heads * d * 2.0)
    compute = flops / par[PAR_FLOPS]
    memory = nbytes / par[PAR_MEM_BW]
    return (compute if compute > memory else memory) * 1000.0


@helper
def context_sol_prefix_ms(heads, seq, prefix, batch, par):
    """SOL of one context-attention layer over seq = new + prefix tokens per request, ms.

    The prefix's work is already done: FLOPs 2 b (s^2 - p^2) n d 2 / 2 (window w < s:
    2 b (s - p) w n d 2), Q read and output write over the s - p new tokens only, the KV write
    over all s: bytes 2 b (2 n (s - p) d) + kv_bytes b 2 n_kv s d. prefix 0 is attention_sol_ms.
    """
    d = par[PAR_HEAD_DIM]
    n_kv = heads if par[PAR_MHA] != 0.0 else par[PAR_NUM_KV_HEADS]
    b = batch
    s = seq
    p = prefix
    w = par[PAR_WINDOW]
    if w > 0.0 and w < s:
        flops = 2.0 * b * (s - p) * w * heads * d * 2.0
    else:
        flops = 2.0 * b * (s * s - p * p) * heads * d * 2.0 / 2.0
    nbytes = 2.0 * b * (heads * (s - p) * d + heads * (s - p) * d) + par[PAR_KV_BYTES] * b * (
        2.0 * n_kv * s * d
    )
    compute = flops / par[PAR_FLOPS] * 1000.0
    memory = nbytes / par[PAR_MEM_BW] * 1000.0
    return compute if compute > memory else memory


@helper
def _level2_le(i1, x2, grid):
    """(latency, blend power, exact leaf index or < 0) along axis 2 under axis-1 entry i1;
    latency nan outside the axis's range."""
    return segment_lp(grid.v2, grid.lat, grid.en, grid.o1[i1], grid.o1[i1 + 1], x2)


@kernel
def _level1_le(kind, i0, heads, x1, x2, grid, sqrt_axis1):
    """(latency, blend power, exact leaf index or < 0) under axis-0 entry i0."""
    v1 = grid.v1
    par = grid.par
    lo = grid.o0[i0]
    hi = grid.o0[i0 + 1]
    a = lower_bound(v1, lo, hi, x1)
    if a < hi and v1[a] == x1:
        return _level2_le(a, x2, grid)
    if not (lo < a < hi):
        return math.nan, 0.0, -1
    y0, p0, _e0 = _level2_le(a - 1, x2, grid)
    y1, p1, _e1 = _level2_le(a, x2, grid)
    ok0 = not math.isnan(y0)
    ok1 = not math.isnan(y1)
    if ok0 and ok1:
        w = (x1 - v1[a - 1]) / (v1[a] - v1[a - 1])
        power = p0 + (p1 - p0) * w
        if sqrt_axis1:
            r0 = math.sqrt(y0)
            r = r0 + (math.sqrt(y1) - r0) * w
            return r * r, power, -1
        return y0 + (y1 - y0) * w, power, -1
    if ok0:
        return (
            y0
            * (
                attention_sol_ms(kind, heads, x1, x2, par)
                / attention_sol_ms(kind, heads, v1[a - 1], x2, par)
            ),
            p0,
            -1,
        )
    if ok1:
        return (
            y1
            * (
                attention_sol_ms(kind, heads, x1, x2, par)
                / attention_sol_ms(kind, heads, v1[a], x2, par)
            ),
            p1,
            -1,
        )
    return math.nan, 0.0, -1


@kernel
def grid_le(kind, x0, x1, x2, grid, scratch_d, scratch_i):
    """(latency ms, energy W*ms) of one layer at (x0, x1, x2) over the slice, with the
    fall-backs of the module doc. An exact hit on a leaf carries that leaf's energy verbatim;
    any other lookup blend power x latency.

    scratch_d float64[>=5], scratch_i int64[>=5]: caller-owned scratch for the hold.
    """
    sqrt_axis1 = kind == KIND_CONTEXT
    v0 = grid.v0
    par = grid.par
    n0 = v0.shape[0]
    a = lower_bound(v0, 0, n0, x0)
    y = math.nan
    power = 0.0
    exact = -1
    if a < n0 and v0[a] == x0:
        y, power, exact = _level1_le(kind, a, x0, x1, x2, grid, sqrt_axis1)
    elif 0 < a < n0:
        y0, p0, _e0 = _level1_le(kind, a - 1, x0, x1, x2, grid, sqrt_axis1)
        y1, p1, _e1 = _level1_le(kind, a, x0, x1, x2, grid, sqrt_axis1)
        ok0 = not math.isnan(y0)
        ok1 = not math.isnan(y1)
        if ok0 and ok1:
            w = (x0 - v0[a - 1]) / (v0[a] - v0[a - 1])
            y = y0 + (y1 - y0) * w
            power = p0 + (p1 - p0) * w
        elif ok0:
            y = y0 * (
                attention_sol_ms(kind, x0, x1, x2, par)
                / attention_sol_ms(kind, v0[a - 1], x1, x2, par)
            )
            power = p0
        elif ok1:
            y = y1 * (
                attention_sol_ms(kind, x0, x1, x2, par) / attention_sol_ms(kind, v0[a], x1, x2, par)
            )
            power = p1
    if not math.isnan(y):
        if exact >= 0:
            return y, grid.en[exact]
        return y, power * y
    if kind == KIND_DSA_CONTEXT and par[DSA_HOLD_NUM] > 0.0:
        # the DSA / MLA module context hold also borrows other head counts (optime_dsa)
        return dsa_context_hold(x0 - 1.0, x1, x2, par, scratch_d, scratch_i)
    return hold_le(kind, x0, x1, x2, grid, scratch_d, scratch_i)


@kernel
def hold_le(kind, x0, x1, x2, grid, best_d, best_i):
    """Multi-axis utilisation hold over the 4 nearest leaves (log2 space), tapered weights;
    the power is the same taper-weighted mean over the anchors' blend powers."""
    v0 = grid.v0
    o0 = grid.o0
    v1 = grid.v1
    o1 = grid.o1
    v2 = grid.v2
    lat = grid.lat
    en = grid.en
    par = grid.par
    q0 = math.log2(x0)
    q1 = math.log2(x1)
    q2 = math.log2(x2)
    num_best = 0
    for i in range(5):
        best_d[i] = math.inf
        best_i[i] = -1
    # leaves walked in nest order (ties keep the earlier leaf)
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
        # the leaf's axis-0 / axis-1 coordinates
        i1 = _owner(o1, i2)
        i0 = _owner(o0, i1)
        util = attention_sol_ms(kind, v0[i0], v1[i1], v2[i2], par) / lat[i2]
        dj = best_d[j]
        t = (radius - dj) / (radius * dj)
        w = t * t
        num += w * util
        den += w
        num_p += w * blend_power(lat, en, i2)
    if den <= 0.0:
        # every anchor at the radius: equal weights
        num = 0.0
        num_p = 0.0
        for j in range(num_anchor):
            i2 = best_i[j]
            i1 = _owner(o1, i2)
            i0 = _owner(o0, i1)
            num += attention_sol_ms(kind, v0[i0], v1[i1], v2[i2], par) / lat[i2]
            num_p += blend_power(lat, en, i2)
        den = num_anchor
    y = attention_sol_ms(kind, x0, x1, x2, par) / (num / den)
    return y, (num_p / den) * y


@helper
def _owner(off, child):
    """Index p with off[p] <= child < off[p + 1]."""
    lo = 0
    hi = off.shape[0] - 1
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        if off[mid] <= child:
            lo = mid
        else:
            hi = mid
    return lo


@kernel
def generation_5sample_le(heads, batch, s, grid, scratch_d, scratch_i):
    """(mean latency, mean energy) of 5 lookups at kv in [0.9 s, 1.1 s] (docs/timing.md 4.3)."""
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
        y, e = grid_le(KIND_GENERATION, heads, batch, float(kv), grid, scratch_d, scratch_i)
        total += y
        total_e += e
    return total / 5.0, total_e / 5.0
