"""Routed-expert (MoE) lookups: a 1-D curve over GLOBAL tokens (docs/timing.md 4.7).

The curve (`MoeCurve`) is sorted x (global tokens = local tokens x attention-DP) with latency y
(ms per layer for the whole fused gate/up/down expert computation) and leaf energy en (W*ms, 0
where the table has no power), read by optime_interp.curve_le (exact or raw linear inside,
utilisation hold on the nearest boundary point outside). A second curve (ll_*) holds TRT-LLM's
min-latency kernel rows, read instead up to par[MOE_LL_TOKENS] global tokens.

`par` (float64[MOE_PAR_SIZE]) holds the slice's SOL constants (MOE_* below). In the EMPIRICAL
mode `moe_empirical_ms` prices the layer as SOL / util from the same curves' samples.

Mirrors: AISimulate 0.13 perf_interp v2 1-D curve for the MoE op.
"""

from typing import NamedTuple

import numpy as np

from aisim.kernels._jit import helper, kernel
from aisim.kernels.optime_empirical import SLOT_MOE, SLOT_MOE_LL, util_at
from aisim.kernels.optime_interp import curve_le

MOE_TOPK = 0
MOE_HIDDEN = 1
MOE_INTER = 2
MOE_EXPERTS = 3
MOE_TP = 4
MOE_EP = 5
MOE_BPE = 6  # bytes per weight / activation element of the MoE dtype
MOE_FLOPS = 7  # tensor FLOP/s of the MoE dtype
MOE_MEM_BW = 8
MOE_DP = 9  # attention-DP: global tokens = local tokens x this
MOE_GATED = 10  # GEMMs per expert: 3 when gated (gate, up, down), else 2
MOE_LL_TOKENS = 11  # the min-latency curve serves passes of at most this many global tokens
MOE_PAR_SIZE = 12


class MoeCurve(NamedTuple):
    """The routed experts' curve and SOL constants (aisim.timing.leaf_moe)."""

    x: np.ndarray  # float64[n] global tokens, ascending
    y: np.ndarray  # float64[n] ms per layer
    en: np.ndarray  # float64[n] W*ms (0 = no power)
    par: np.ndarray  # float64[MOE_PAR_SIZE]
    ll_x: np.ndarray  # the min-latency kernel's curve, same units (unused when
    ll_y: np.ndarray  # par[MOE_LL_TOKENS] < 0)
    ll_en: np.ndarray


@helper
def moe_sol_ms(tokens, par):
    """Roofline of the routed experts at `tokens` global tokens, ms.

    With T = tokens topk and g GEMMs per expert: FLOPs = T h I g 2 // ep // moe_tp; bytes =
    bpe (T // ep h 2 + T // ep I g // moe_tp + h I g // moe_tp min(E // ep, T // ep)), every
    division an integer floor as in AISimulate (a decode pass of fewer routed tokens than
    ranks has a zero roofline).
    """
    t = np.int64(round(tokens)) * np.int64(par[MOE_TOPK])
    h = np.int64(par[MOE_HIDDEN])
    inter = np.int64(par[MOE_INTER])
    ep = max(np.int64(par[MOE_EP]), np.int64(1))
    mtp = max(np.int64(par[MOE_TP]), np.int64(1))
    g = np.int64(par[MOE_GATED])
    experts = np.int64(par[MOE_EXPERTS])
    ops = t * h * inter * g * 2 // ep // mtp
    routed = t // ep
    touched = min(experts // ep, routed)
    nbytes = routed * h * 2 + routed * inter * g // mtp + h * inter * g // mtp * touched
    compute = float(ops) / par[MOE_FLOPS] * 1000.0
    memory = float(nbytes) * par[MOE_BPE] / par[MOE_MEM_BW] * 1000.0
    return compute if compute > memory else memory


@kernel
def moe_le(local_tokens, moe):
    """(latency ms, energy W*ms) of one MoE layer at `local_tokens` tokens of this rank (the
    curve is read at global tokens = local x attention-DP; small passes read the min-latency
    curve when the plan has one)."""
    par = moe.par
    tokens = local_tokens * par[MOE_DP]
    if tokens <= par[MOE_LL_TOKENS]:
        x, y, en = moe.ll_x, moe.ll_y, moe.ll_en
    else:
        x, y, en = moe.x, moe.y, moe.en
    return curve_le(
        tokens,
        x,
        y,
        en,
        moe_sol_ms(tokens, par),
        moe_sol_ms(x[0], par),
        moe_sol_ms(x[x.shape[0] - 1], par),
    )


@kernel
def moe_empirical_ms(local_tokens, moe, grids):
    """Latency (ms) of one MoE layer in the EMPIRICAL mode: SOL / util at the global token
    count, util from the min-latency kernel's samples where that curve would serve."""
    par = moe.par
    tokens = local_tokens * par[MOE_DP]
    e = grids.slot[SLOT_MOE]
    if tokens <= par[MOE_LL_TOKENS] and grids.slot[SLOT_MOE_LL] >= 0:
        e = grids.slot[SLOT_MOE_LL]
    return moe_sol_ms(tokens, par) / util_at(grids, e, tokens, 1.0, 1.0)
