"""Routed-expert (MoE) lookups: a 1-D curve over GLOBAL tokens (timing.md 3.4).

The curve is sorted x (global tokens = local tokens x attention-DP) with latency y (ms per
layer for the whole fused gate/up/down expert computation) and leaf energy en (W*ms, 0 where
the table has no power). Inside: exact or raw linear. Outside: utilisation hold on the single
nearest boundary point (k_tail = 1): latency = SOL(query) / (SOL(x_edge) / y_edge).

`par` (float64[MOE_PAR_SIZE]) holds the slice's SOL constants (MOE_* below).

Mirrors: AISimulate 0.13 perf_interp v2 1-D curve for the MoE op.
"""

from aisim.kernels._jit import helper, kernel

MOE_TOPK = 0
MOE_HIDDEN = 1
MOE_INTER = 2
MOE_EXPERTS = 3
MOE_TP = 4
MOE_EP = 5
MOE_BPE = 6       # bytes per weight / activation element of the MoE dtype
MOE_FLOPS = 7     # tensor FLOP/s of the MoE dtype
MOE_MEM_BW = 8
MOE_DP = 9        # attention-DP: global tokens = local tokens x this
MOE_GATED = 10    # GEMMs per expert: 3 when gated (gate, up, down), else 2
MOE_PAR_SIZE = 12


@helper
def moe_sol_ms(tokens, par):
    """Roofline of the routed experts at `tokens` global tokens, ms.

    FLOPs = tokens topk h I g 2 / ep / moe_tp; bytes = bpe (tokens topk / ep h 2
    + tokens topk / ep I g / moe_tp + h I g / moe_tp min(E / ep, tokens topk / ep)),
    g = GEMMs per expert.
    """
    topk = par[MOE_TOPK]
    h = par[MOE_HIDDEN]
    inter = par[MOE_INTER]
    ep = par[MOE_EP]
    mtp = par[MOE_TP]
    g = par[MOE_GATED]
    routed = tokens * topk / ep
    flops = tokens * topk * h * inter * g * 2.0 / ep / mtp
    experts = par[MOE_EXPERTS] / ep
    touched = experts if experts < routed else routed
    nbytes = par[MOE_BPE] * (routed * h * 2.0 + routed * inter * g / mtp
                             + h * inter * g / mtp * touched)
    compute = flops / par[MOE_FLOPS]
    memory = nbytes / par[MOE_MEM_BW]
    return (compute if compute > memory else memory) * 1000.0


@helper
def _blend_power(y, en, j):
    if en[j] > 0.0 and y[j] > 0.0:
        return en[j] / y[j]
    return 0.0


@kernel
def moe_le(tokens, x, y, en, par):
    """(latency ms, energy W*ms) of one MoE layer at `tokens` global tokens."""
    n = x.shape[0]
    lo = 0
    hi = n
    while lo < hi:
        mid = (lo + hi) >> 1
        if x[mid] < tokens:
            lo = mid + 1
        else:
            hi = mid
    if lo < n and x[lo] == tokens:
        return y[lo], en[lo]
    if 0 < lo < n:
        w = (tokens - x[lo - 1]) / (x[lo] - x[lo - 1])
        lat = y[lo - 1] + (y[lo] - y[lo - 1]) * w
        p0 = _blend_power(y, en, lo - 1)
        return lat, (p0 + (_blend_power(y, en, lo) - p0) * w) * lat
    j = 0 if lo == 0 else n - 1
    util = moe_sol_ms(x[j], par) / y[j]
    lat = moe_sol_ms(tokens, par) / util
    return lat, _blend_power(y, en, j) * lat
