"""DeepSeek-V3.2 DSA attention modules outside the measured grid (docs/timing.md 4.8).

The DSA module tables are read by the raw grid of `optime_attention` (context axes
(prefix + 1, new tokens, batch) at the rank's head count; generation axes (heads, batch, kv)).
Two things are DSA-specific and live here:

* the "regime-aware" SOL used for ragged brackets and the utilisation hold. Context, with
  s = prefix + n, h heads per rank, T = index_topk:
    FLOPs = b (n (2 W + kv_b h) + idx n s [s > T]) at fp8 rate
            + b attn_h h sum_{i=1..n} min(prefix + i, T) at bf16 rate,
    bytes = W + b (new_h h n + key_h h min(s, T) + idx_key s [s > T]);
  generation (s = kv): the indexer always runs and the latent KV is read once for all heads:
    FLOPs = b (2 W + kv_b h + idx s) at fp8 + b attn_h h min(s, T) at bf16,
    bytes = W + b (key min(s, T) + idx_key s);
  W = W0 + Wh h the fp8 weights read once per call. The indexer terms switch on above T
  (the regime where the lightning indexer selects the top-T keys).
* the context hold borrows other head counts: the 4 nearest leaves in joint log2 space over
  (heads, prefix, new tokens, batch) of every head count of the key slice, where a prefix of 0
  is infinitely far from any positive prefix (log2 0 = -inf: a fresh prompt only borrows
  fresh-prompt leaves and a continuation only cached-prefix ones), tapered Shepard weights
  ((R - d) / (R d))^2 with R the 5th nearest distance, latency = SOL(query) / mean util.

Both fitted to AISimulate 0.13's per-op figures and SOL parts (`static_phase_diagnostics`),
exact on V3.2 vLLM ADP8 and TRT-LLM ADP8 / TP8 (see NOTES.md, "DeepSeek attention modules
outside the grid"). A dense MLA module (V3 / R1) sets DSA_TOPK = 0: its generation module uses
`mla_generation_sol_ms` and the plain 3-axis hold; its context module is read as context
attention (aisim.timing.family_deepseek_mla).

The hold's leaves are packed into the tail of the module's `par` array (no extra plan field):
par[DSA_HOLD_NUM] leaves from DSA_PAR_SIZE on, each DSA_LEAF_SIZE floats
(heads, prefix, new tokens, batch, latency, energy), in (heads, prefix, new, batch) order.
"""

import math

from aisim.kernels._jit import helper, kernel

# slots after optime_attention's PAR_* ones (PAR_NUM_KV_HEADS = heads per rank,
# PAR_FLOPS = bf16 tensor FLOP/s, PAR_MEM_BW = bytes/s are shared)
_PAR_NUM_KV_HEADS = 0
_PAR_FLOPS = 3
_PAR_MEM_BW = 5
DSA_TOPK = 8  # index_topk; 0 = dense MLA module (not DSA)
DSA_W0 = 9  # fp8 weight bytes read once per call, head-independent part
DSA_WH = 10  # ... per attention head (q_b, o_proj)
DSA_KVB_FLOPS_H = 11  # kv_b up-projection FLOPs per new token per head (fp8 rate)
DSA_ATTN_FLOPS_H = 12  # sparse MLA FLOPs per (query, key) per head (bf16 rate)
DSA_IDX_FLOPS = 13  # indexer FLOPs per (query, key) (fp8 rate)
DSA_IDX_KEY_BYTES = 14  # indexer key bytes per cached token
DSA_NEW_BYTES_H = 15  # bytes per new token per head (context)
DSA_KEY_BYTES_H = 16  # latent KV bytes per attended key per head (context)
DSA_KEY_BYTES = 17  # latent KV bytes per attended key (generation reads it once)
DSA_FP8_FLOPS = 18
DSA_HOLD_NUM = 19  # packed context hold leaves (see module doc)
# dense MLA modules (DSA_TOPK = 0) reuse DSA_W0 (kv_b weight bytes per head),
# DSA_KVB_FLOPS_H, DSA_KEY_BYTES and DSA_FP8_FLOPS, plus:
MLA_GEN_SEQ_BYTES_H = 20  # generation bytes per sequence per head besides the latent KV
DSA_PAR_SIZE = 24
DSA_LEAF_SIZE = 6


@helper
def _causal_keys(n, p, topk):
    """Sum over the new tokens i = 1..n of min(p + i, topk): keys each query attends to."""
    if p + n <= topk:
        return n * p + n * (n + 1.0) / 2.0
    if p >= topk:
        return n * topk
    k = topk - p
    return k * p + k * (k + 1.0) / 2.0 + (n - k) * topk


@helper
def dsa_context_sol_ms(h, p, n, b, par):
    """SOL of one context DSA module call: h heads, prefix p, n new tokens, batch b; ms."""
    topk = par[DSA_TOPK]
    s = p + n
    sparse = s > topk
    w = par[DSA_W0] + par[DSA_WH] * h
    fp8 = n * (2.0 * w + par[DSA_KVB_FLOPS_H] * h)
    if sparse:
        fp8 += par[DSA_IDX_FLOPS] * n * s
    attn = par[DSA_ATTN_FLOPS_H] * h * _causal_keys(n, p, topk)
    compute = b * (fp8 / par[DSA_FP8_FLOPS] + attn / par[_PAR_FLOPS])
    keys = s if s < topk else topk
    per_seq = par[DSA_NEW_BYTES_H] * h * n + par[DSA_KEY_BYTES_H] * h * keys
    if sparse:
        per_seq += par[DSA_IDX_KEY_BYTES] * s
    memory = (w + b * per_seq) / par[_PAR_MEM_BW]
    return (compute if compute > memory else memory) * 1000.0


@helper
def dsa_generation_sol_ms(h, b, s, par):
    """SOL of one generation DSA module call: h heads, batch b, kv length s; ms."""
    topk = par[DSA_TOPK]
    w = par[DSA_W0] + par[DSA_WH] * h
    keys = s if s < topk else topk
    fp8 = 2.0 * w + par[DSA_KVB_FLOPS_H] * h + par[DSA_IDX_FLOPS] * s
    compute = b * (fp8 / par[DSA_FP8_FLOPS] + par[DSA_ATTN_FLOPS_H] * h * keys / par[_PAR_FLOPS])
    memory = (w + b * (par[DSA_KEY_BYTES] * keys + par[DSA_IDX_KEY_BYTES] * s)) / par[_PAR_MEM_BW]
    return (compute if compute > memory else memory) * 1000.0


@helper
def mla_generation_sol_ms(h, b, s, par):
    """SOL of one generation dense-MLA module call (kv s includes the new token), ms:
    FLOPs = b (kv_b h [fp8] + h (latent + kv_lora) s [bf16]),
    bytes = W_kvb h + b (seq_h h + latent kv_bytes (s - 1)), W_kvb = the kv_b weights per head.
    """
    compute = b * (
        par[DSA_KVB_FLOPS_H] * h / par[DSA_FP8_FLOPS]
        + par[DSA_ATTN_FLOPS_H] * h * s / 2.0 / par[_PAR_FLOPS]
    )
    memory = (
        par[DSA_W0] * h + b * (par[MLA_GEN_SEQ_BYTES_H] * h + par[DSA_KEY_BYTES] * (s - 1.0))
    ) / par[_PAR_MEM_BW]
    return (compute if compute > memory else memory) * 1000.0


@helper
def _prefix_gap(a, b):
    """log2 distance along the prefix axis; a zero prefix is infinitely far from a positive one."""
    if a == 0.0 or b == 0.0:
        return 0.0 if a == b else math.inf
    return math.log2(a) - math.log2(b)


@kernel
def dsa_context_hold(p, n, b, par, best_d, best_i):
    """(latency, energy) of the context utilisation hold over every head count's leaves.

    best_d float64[>=5], best_i int64[>=5]: caller-owned scratch.
    """
    h = par[_PAR_NUM_KV_HEADS]
    qh = math.log2(h)
    qn = math.log2(n)
    qb = math.log2(b)
    num_leaves = int(par[DSA_HOLD_NUM])
    num_best = 0
    for i in range(5):
        best_d[i] = math.inf
        best_i[i] = -1
    for j in range(num_leaves):
        o = DSA_PAR_SIZE + DSA_LEAF_SIZE * j
        dp = _prefix_gap(par[o + 1], p)
        if math.isinf(dp):
            continue
        dh = math.log2(par[o]) - qh
        dn = math.log2(par[o + 2]) - qn
        db = math.log2(par[o + 3]) - qb
        dist = math.sqrt(dh * dh + dp * dp + dn * dn + db * db)
        if num_best < 5 or dist < best_d[num_best - 1]:
            k = num_best if num_best < 5 else 4
            while k > 0 and best_d[k - 1] > dist:
                if k < 5:
                    best_d[k] = best_d[k - 1]
                    best_i[k] = best_i[k - 1]
                k -= 1
            best_d[k] = dist
            best_i[k] = j
            if num_best < 5:
                num_best += 1
    if num_best == 0:
        return math.nan, 0.0
    if best_d[0] == 0.0:
        o = DSA_PAR_SIZE + DSA_LEAF_SIZE * best_i[0]
        return par[o + 4], par[o + 5]
    num_anchor = num_best if num_best < 4 else 4
    radius = best_d[4] if num_best == 5 else best_d[num_best - 1] * (1.0 + 1e-9)
    num = 0.0
    num_p = 0.0
    den = 0.0
    for k in range(num_anchor):
        o = DSA_PAR_SIZE + DSA_LEAF_SIZE * best_i[k]
        lat = par[o + 4]
        util = dsa_context_sol_ms(par[o], par[o + 1], par[o + 2], par[o + 3], par) / lat
        power = par[o + 5] / lat if par[o + 5] > 0.0 and lat > 0.0 else 0.0
        t = (radius - best_d[k]) / (radius * best_d[k])
        w = t * t
        num += w * util
        num_p += w * power
        den += w
    if den <= 0.0:
        # every anchor at the radius: equal weights
        num = 0.0
        num_p = 0.0
        for k in range(num_anchor):
            o = DSA_PAR_SIZE + DSA_LEAF_SIZE * best_i[k]
            lat = par[o + 4]
            num += dsa_context_sol_ms(par[o], par[o + 1], par[o + 2], par[o + 3], par) / lat
            num_p += par[o + 5] / lat if par[o + 5] > 0.0 and lat > 0.0 else 0.0
        den = num_anchor
    y = dsa_context_sol_ms(h, p, n, b, par) / (num / den)
    return y, (num_p / den) * y
