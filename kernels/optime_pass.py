"""One forward pass priced over a resolved op plan (timing.md 2.1-2.3, 3.5, 3.6).

The plan (aisim.timing.plan.DensePlan, a NamedTuple of arrays) lists the ops of the context
(prefill) phase at [0, consts[C_NUM_CTX_OPS]) and of the generation (decode) phase after them.
Each op has a kind, a per-token parameter (bytes or elements), an index (GEMM op) and a scale
factor (layers, or 1 for embedding / logits / embedding allreduce). The kernels write every op's
latency (ms, scale applied) into a caller-owned `out_ms` and return the phase total.

Mirrors: AISimulate 0.13 op-level estimator, dense LLAMA family: PREFILL(batch, isl, prefix)
evaluates every context op at new = isl - prefix tokens per request (attention at the full
length isl with the prefix correction (isl^2 - prefix^2) / isl^2), DECODE(batch, ctx) every
generation op at batch x (1 + nextn) tokens and kv length ctx.
"""

from aisim.kernels._jit import helper, kernel
from aisim.kernels.optime_attention import (
    KIND_CONTEXT,
    KIND_DSA_CONTEXT,
    KIND_DSA_GENERATION,
    KIND_GENERATION,
    attention_sol_ms,
    generation_5sample_ms,
    grid_latency_ms,
)
from aisim.kernels.optime_comm import allreduce_latency_ms, allreduce_sol_ms
from aisim.kernels.optime_gemm import gemm_latency_ms, gemm_sol_ms
from aisim.kernels.optime_moe import MOE_DP, moe_le

# op kinds
OP_MEM_TOKENS = 0      # memory op, bytes = tokens x param
OP_GEMM_TOKENS = 1     # GEMM at m = tokens
OP_GEMM_REQUESTS = 2   # GEMM at m = requests (logits)
OP_ATTN_CONTEXT = 3
OP_ATTN_GENERATION = 4
OP_ALLREDUCE = 5       # elements = tokens x param
OP_P2P = 6             # bytes = tokens x param, over the inter-node link
# MoE / DeepSeek family (aisim.timing.plan_moe)
OP_DSA_CONTEXT = 7     # DSA attention module, axes (prefix, new, batch)
OP_DSA_GENERATION = 8  # DSA attention module, axes (heads, batch, kv)
OP_MOE = 9             # routed experts at global tokens = tokens x attention-DP
OP_NCCL_ALL_GATHER = 10      # elements = tokens x param
OP_NCCL_REDUCE_SCATTER = 11  # elements = tokens x param
OP_OVERLAP = 12        # max(sum of ops [A_LO, B_LO), sum of ops [B_LO, B_HI)), per layer
OP_SUM = 13            # sum of the hidden ops [op_index, op_index + op_param), per layer

MODE_SILICON = 0
MODE_SOL = 1

# consts (float64 array) indices
C_MODE = 0
C_NUM_CTX_OPS = 1
C_NUM_OPS = 2
C_MEM_BW = 3            # bytes/s
C_MEM_EFF = 4           # empirical bandwidth scaling (0.8)
C_MEM_CONST_S = 5       # empirical constant latency per memory op, s (3e-6)
C_LINK_BW = 6           # intra-node bandwidth, bytes/s
C_INTER_BW = 7          # inter-node bandwidth, bytes/s
C_P2P_LAT_S = 8         # p2p latency, s
C_TP = 9                # allreduce group size
C_AR_ELEM_BYTES = 10
C_NEXTN = 11            # MTP draft tokens per decode request
C_HEADS = 12            # attention heads per rank (the lookup's num_heads)
C_CTX_EXTRA_MS = 13     # fused context extras per layer, SILICON (x1.1 applied)
C_CTX_EXTRA_SOL_MS = 14
C_GEN_EXTRA_MS = 15
C_GEN_EXTRA_SOL_MS = 16
C_NCCL_GPUS = 17        # MoE dispatch group (moe_tp x moe_ep)
C_OVL_A_LO = 18         # overlap groups: hidden ops stored after C_NUM_OPS
C_OVL_B_LO = 19
C_OVL_B_HI = 20
C_DISPATCH_AR = 21      # 1: MoE dispatch also allreduces over the attention-TP group
NUM_CONSTS = 22


@helper
def _mem_ms(nbytes, consts):
    if consts[C_MODE] == MODE_SOL:
        return nbytes / consts[C_MEM_BW] * 1000.0
    return (nbytes / (consts[C_MEM_BW] * consts[C_MEM_EFF]) + consts[C_MEM_CONST_S]) * 1000.0


@helper
def _gemm_ms(plan, g, m):
    if plan.consts[C_MODE] == MODE_SOL:
        return gemm_sol_ms(m, plan.gemm_n[g], plan.gemm_k[g], plan.gemm_flops[g],
                           plan.gemm_bpe[g], plan.consts[C_MEM_BW])
    return gemm_latency_ms(g, m, plan.gemm_n, plan.gemm_k, plan.gemm_flops, plan.gemm_bpe,
                           plan.gemm_num_sites, plan.gemm_sites, plan.gemm_weights,
                           plan.site_off, plan.site_n, plan.site_k, plan.site_flops,
                           plan.site_bpe, plan.curve_m, plan.curve_lat, plan.consts[C_MEM_BW])


@kernel
def _op_ms(plan, i, tokens, requests, batch, seq, prefix):
    """Latency of op i for one layer (before its scale factor)."""
    if plan.op_kind[i] == OP_OVERLAP:
        # decode-time overlap of the routed-expert branch (A) with the shared expert (B)
        consts = plan.consts
        a = 0.0
        for j in range(int(consts[C_OVL_A_LO]), int(consts[C_OVL_B_LO])):
            a += _leaf_ms(plan, j, tokens, requests, batch, seq, prefix)
        b = 0.0
        for j in range(int(consts[C_OVL_B_LO]), int(consts[C_OVL_B_HI])):
            b += _leaf_ms(plan, j, tokens, requests, batch, seq, prefix)
        return a if a >= b else b
    if plan.op_kind[i] == OP_SUM:
        # one reported op made of table lookups (TRT-LLM MLA block: GEMMs + attention kernel)
        total = 0.0
        lo = plan.op_index[i]
        for j in range(lo, lo + int(plan.op_param[i])):
            total += _leaf_ms(plan, j, tokens, requests, batch, seq, prefix)
        return total
    return _leaf_ms(plan, i, tokens, requests, batch, seq, prefix)


@kernel
def _leaf_ms(plan, i, tokens, requests, batch, seq, prefix):
    """Latency of a non-overlap op i for one layer (before its scale factor)."""
    consts = plan.consts
    kind = plan.op_kind[i]
    sol = consts[C_MODE] == MODE_SOL
    if kind == OP_MEM_TOKENS:
        return _mem_ms(tokens * plan.op_param[i], consts)
    if kind == OP_GEMM_TOKENS:
        return _gemm_ms(plan, plan.op_index[i], tokens)
    if kind == OP_GEMM_REQUESTS:
        return _gemm_ms(plan, plan.op_index[i], requests)
    if kind == OP_ALLREDUCE:
        elements = tokens * plan.op_param[i]
        if sol:
            return allreduce_sol_ms(elements, consts[C_TP], consts[C_AR_ELEM_BYTES],
                                    consts[C_LINK_BW])
        return allreduce_latency_ms(elements, plan.ar_x, plan.ar_y, consts[C_TP],
                                    consts[C_AR_ELEM_BYTES], consts[C_LINK_BW])
    if kind == OP_ATTN_CONTEXT:
        heads = consts[C_HEADS]
        corr = (seq * seq - prefix * prefix) / (seq * seq)
        if sol:
            return (attention_sol_ms(KIND_CONTEXT, heads, seq, batch, plan.ctx_par) * corr
                    + consts[C_CTX_EXTRA_SOL_MS])
        table = grid_latency_ms(KIND_CONTEXT, heads, seq, batch, plan.ctx_v0, plan.ctx_o0,
                                plan.ctx_v1, plan.ctx_o1, plan.ctx_v2, plan.ctx_lat,
                                plan.ctx_par, plan.scratch_d, plan.scratch_i)
        return table * corr + consts[C_CTX_EXTRA_MS]
    if kind == OP_ATTN_GENERATION:
        heads = consts[C_HEADS]
        if sol:
            return (attention_sol_ms(KIND_GENERATION, heads, batch, seq, plan.gen_par)
                    + consts[C_GEN_EXTRA_SOL_MS])
        table = generation_5sample_ms(heads, batch, seq, plan.gen_v0, plan.gen_o0,
                                      plan.gen_v1, plan.gen_o1, plan.gen_v2, plan.gen_lat,
                                      plan.gen_par, plan.scratch_d, plan.scratch_i)
        return table + consts[C_GEN_EXTRA_MS]
    if kind == OP_P2P:
        if plan.op_scale[i] == 0.0:
            return 0.0
        nbytes = tokens * plan.op_param[i]
        if sol:
            return nbytes / consts[C_INTER_BW] * 1000.0
        return (nbytes / consts[C_INTER_BW] + consts[C_P2P_LAT_S]) * 1000.0
    if kind == OP_MOE:
        lat, _e = moe_le(tokens * plan.moe_par[MOE_DP], plan.moe_x, plan.moe_y, plan.moe_en,
                         plan.moe_par)
        return lat
    if OP_NCCL_ALL_GATHER <= kind <= OP_NCCL_REDUCE_SCATTER:   # consecutive codes
        # vLLM MoE dispatch / combine: a custom allreduce of tokens x h over the MoE group
        # when attention is tensor-parallel, plus the NCCL all_gather / reduce_scatter of
        # tokens x h x attention-DP under attention-DP. An NCCL curve's SOL (bytes (n - 1) / n
        # / bw) is the allreduce SOL / 2 and only SOL ratios enter its hold, so the allreduce
        # lookup serves both.
        dp = plan.moe_par[MOE_DP]
        ms = 0.0
        if consts[C_DISPATCH_AR] != 0.0:
            ms += allreduce_latency_ms(tokens * plan.op_param[i] / dp, plan.ar_x, plan.ar_y,
                                       consts[C_NCCL_GPUS], 2.0, consts[C_LINK_BW])
        if dp > 1.0:
            if kind == OP_NCCL_ALL_GATHER:
                xs, ys = plan.ag_x, plan.ag_y
            else:
                xs, ys = plan.rs_x, plan.rs_y
            ms += allreduce_latency_ms(tokens * plan.op_param[i], xs, ys, consts[C_NCCL_GPUS],
                                       2.0, consts[C_LINK_BW])
        return ms
    if kind == OP_DSA_CONTEXT:
        return grid_latency_ms(KIND_DSA_CONTEXT, prefix + 1.0, seq - prefix, batch,
                               plan.dsa_ctx_v0, plan.dsa_ctx_o0, plan.dsa_ctx_v1,
                               plan.dsa_ctx_o1, plan.dsa_ctx_v2, plan.dsa_ctx_lat,
                               plan.dsa_ctx_par, plan.scratch_d, plan.scratch_i)
    if kind == OP_DSA_GENERATION:
        return grid_latency_ms(KIND_DSA_GENERATION, consts[C_HEADS], batch, seq,
                               plan.dsa_gen_v0, plan.dsa_gen_o0, plan.dsa_gen_v1,
                               plan.dsa_gen_o1, plan.dsa_gen_v2, plan.dsa_gen_lat,
                               plan.dsa_gen_par, plan.scratch_d, plan.scratch_i)
    return 0.0


@kernel
def price_prefill(plan, batch, isl, prefix, out_ms):
    """PREFILL(batch, isl, prefix), ms per pass per GPU; isl includes the cached prefix.

    Parameters
    ----------
    plan : DensePlan
    batch, isl, prefix : int64, requests, tokens per request (new + cached), cached tokens.
    out_ms : float64[num_ops]; Mutates [0, num_ctx_ops) with each op's latency (scaled).
    """
    new = isl - prefix
    tokens = float(batch * new)
    total = 0.0
    num_ctx = int(plan.consts[C_NUM_CTX_OPS])
    for i in range(num_ctx):
        ms = _op_ms(plan, i, tokens, float(batch), float(batch), float(isl),
                    float(prefix)) * plan.op_scale[i]
        out_ms[i] = ms
        total += ms
    return total


@kernel
def price_decode(plan, batch, ctx, out_ms):
    """DECODE(batch, ctx), ms per pass per GPU; ctx is the mean context incl. the current token.

    Every request verifies 1 + nextn tokens (MTP): GEMM m, attention batch and allreduce size
    use batch x (1 + nextn).
    Mutates out_ms[num_ctx_ops:num_ops].
    """
    eff = float(batch * (1 + int(plan.consts[C_NEXTN])))
    total = 0.0
    for i in range(int(plan.consts[C_NUM_CTX_OPS]), int(plan.consts[C_NUM_OPS])):
        ms = _op_ms(plan, i, eff, eff, eff, float(ctx), 0.0) * plan.op_scale[i]
        out_ms[i] = ms
        total += ms
    return total


@kernel
def price_range(plan, lo, hi, tokens, requests, batch, seq, prefix, out_ms):
    """Ops [lo, hi) at explicit (tokens, requests, batch, seq, prefix); returns their sum.

    For compositions other than the simulator's (the FPM API's 3-pass mixed pass, timing.md
    2.3). Mutates out_ms[lo:hi].
    """
    total = 0.0
    for i in range(lo, hi):
        ms = _op_ms(plan, i, tokens, requests, batch, seq, prefix) * plan.op_scale[i]
        out_ms[i] = ms
        total += ms
    return total
