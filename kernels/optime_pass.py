"""One forward pass priced over a resolved op plan, latency and energy together.

Rules: docs/timing.md 1.1 (PREFILL / DECODE), 3 (op plans), 4 (lookups), 6.2 (energy).

The plan (`OpPlan`, built by aisim.timing) lists the ops of the context (prefill) phase at
[0, num_ctx_ops) and of the generation (decode) phase up to num_ops (PassScalars); hidden
sub-ops of composite ops follow. Each op has a kind, a per-token parameter (bytes or elements),
an index (GEMM op, or first hidden sub-op) and a scale factor (layers, or 1 for embedding /
logits / embedding allreduce). Every lookup returns latency and energy together (optime_interp
says how energy is blended); the kernels write per op latency (ms, scale applied), energy
(W*ms, 0 = no evidence) and covered latency (= latency when its energy > 0, else 0) into
caller-owned arrays, and return the phase latency total (the op sum in op order).

Energy per op: table lookups carry the table's; the additive analytic parts (fused attention
extras, memory ops, p2p, TP-1 allreduce, every SOL-mode op) and NCCL (a table without power)
carry 0. Op wrappers scale energy like latency (prefix correction, layer scale). A composite op
(the MoE overlap, an OP_SUM block) carries the energy of all its hidden sub-ops, both overlap
branches included (AISimulate, TRT-LLM DeepSeek: the overlap's energy is the routed plus the
shared expert's).

Mirrors: AISimulate 0.13 op-level estimator: PREFILL(batch, isl, prefix) evaluates every
context op at new = isl - prefix tokens per request (attention at the full length isl with the
prefix correction (isl^2 - prefix^2) / isl^2), DECODE(batch, ctx) every generation op at
batch x (1 + nextn) tokens and kv length ctx.
"""

from typing import NamedTuple

import numpy as np

from aisim.kernels._jit import helper, kernel
from aisim.kernels.optime_attention import (
    KIND_CONTEXT,
    KIND_DSA_CONTEXT,
    KIND_DSA_GENERATION,
    KIND_GENERATION,
    GridSlice,
    attention_sol_ms,
    context_sol_prefix_ms,
    generation_5sample_le,
    grid_le,
)
from aisim.kernels.optime_comm import (
    Curve,
    allreduce_le,
    allreduce_sol_ms,
    moe_dispatch_empirical_ms,
    moe_dispatch_ms,
)
from aisim.kernels.optime_empirical import (
    SLOT_ALL_GATHER,
    SLOT_ALLREDUCE,
    SLOT_CONTEXT,
    SLOT_GENERATION,
    SLOT_REDUCE_SCATTER,
    UtilGrids,
    util_at,
)
from aisim.kernels.optime_gemm import GemmSites, gemm_le, gemm_op_sol_ms
from aisim.kernels.optime_moe import MOE_DP, MoeCurve, moe_empirical_ms, moe_le

# op kinds
OP_MEM_TOKENS = 0  # memory op, bytes = tokens x param
OP_GEMM_TOKENS = 1  # GEMM at m = tokens
OP_GEMM_REQUESTS = 2  # GEMM at m = requests (logits)
OP_ATTN_CONTEXT = 3
OP_ATTN_GENERATION = 4
OP_ALLREDUCE = 5  # elements = tokens x param
OP_P2P = 6  # bytes = tokens x param, over the inter-node link
OP_DSA_CONTEXT = 7  # DeepSeek attention module, axes (prefix, new, batch)
OP_DSA_GENERATION = 8  # DeepSeek attention module, axes (heads, batch, kv)
OP_MOE = 9  # routed experts at global tokens = tokens x attention-DP
OP_NCCL_ALL_GATHER = 10  # MoE dispatch, elements = tokens x param
OP_NCCL_REDUCE_SCATTER = 11  # MoE combine, elements = tokens x param
OP_OVERLAP = 12  # max(sum of ops [a_lo, b_lo), sum of ops [b_lo, b_hi)), per layer
OP_SUM = 13  # sum of the hidden ops [index, index + param), each times its scale, per layer
# the layers of a sliding-window model that attend within the window read their own slice
OP_ATTN_CONTEXT_BANDED = 14
OP_ATTN_GENERATION_BANDED = 15
# the DSA layers that reuse another layer's indexer (GLM-5.2 / 5.3 on vLLM) read their own
# module slice (the skip_indexer rows)
OP_DSA_CONTEXT_SKIP = 16
OP_DSA_GENERATION_SKIP = 17

MODE_SILICON = 0
MODE_SOL = 1
MODE_EMPIRICAL = 2  # GEMM, attention, allreduce and experts at SOL / util (optime_empirical)


class PassScalars(NamedTuple):
    """The plan's scalars by name and type. The kernels read them from `OpPlan.scalars`, a
    one-element array of the record dtype PASS_SCALARS made from these fields
    (aisim.timing.plan_record.pass_scalars): passed whole to a kernel that is not inlined, a
    plan then costs one array argument. As a tuple of 22 scalars (14 of them floats, past the
    8 float argument registers) the plan's ~500 argument words were no longer pushed but copied
    through the caller's frame, measured ~1.5 us per call instead of ~0.1 us."""

    mode: int  # MODE_SILICON, MODE_SOL or MODE_EMPIRICAL
    num_ctx_ops: int  # context ops are [0, num_ctx_ops)
    num_ops: int  # reported ops; hidden sub-ops follow
    nextn: int  # MTP draft tokens per decode request
    mem_bw: float  # bytes/s
    mem_eff: float  # empirical bandwidth scaling (0.8)
    mem_const_s: float  # empirical constant latency per memory op, s (3e-6)
    link_bw: float  # per-GPU link of the allreduce group (NVLink within a node), bytes/s
    inter_bw: float  # inter-node bandwidth, bytes/s
    p2p_latency_s: float
    allreduce_gpus: float  # OP_ALLREDUCE group (attention tensor parallel)
    allreduce_elem_bytes: float
    heads: float  # attention heads per rank (the lookups' num_heads)
    ctx_extra_ms: float  # fused context attention extras per layer, SILICON (x1.1)
    ctx_extra_sol_ms: float
    gen_extra_ms: float
    gen_extra_sol_ms: float
    dispatch_gpus: float  # MoE dispatch group (moe_tensor x moe_expert)
    dispatch_bw: float  # its per-GPU link, bytes/s (the EMPIRICAL NCCL roofline)
    dispatch_allreduce: bool  # the MoE dispatch also allreduces over the attention-TP group
    overlap_a_lo: int  # OP_OVERLAP: routed branch [a_lo, b_lo), shared [b_lo, b_hi)
    overlap_b_lo: int
    overlap_b_hi: int


PASS_SCALARS = np.dtype(
    [
        (name, {int: np.int64, float: np.float64, bool: np.bool_}[kind])
        for name, kind in PassScalars.__annotations__.items()
    ],
    align=True,
)


class OpList(NamedTuple):
    kind: np.ndarray  # int64[ops] OP_* code
    index: np.ndarray  # int64[ops] GEMM op index, first hidden sub-op of OP_SUM, or -1
    param: np.ndarray  # float64[ops] bytes or elements per token (OP_SUM: sub-op count)
    scale: np.ndarray  # float64[ops] layers (or 1) multiplier


class OpPlan(NamedTuple):
    """Everything the pass kernels read; leaves a model does not use are 1-element stand-ins
    (one plan type: the event loop compiles once)."""

    scalars: np.ndarray  # PASS_SCALARS[1]
    ops: OpList
    gemm: GemmSites
    context_attention: GridSlice
    generation_attention: GridSlice
    banded_context_attention: GridSlice  # sliding-window layers (window_size rows)
    banded_generation_attention: GridSlice
    dsa_context: GridSlice  # DeepSeek attention modules
    dsa_generation: GridSlice
    dsa_context_skip: GridSlice  # ... of the layers that reuse another layer's indexer
    dsa_generation_skip: GridSlice
    allreduce: Curve  # custom allreduce (attention TP; vLLM MoE dispatch)
    all_gather: Curve  # NCCL MoE dispatch
    reduce_scatter: Curve  # NCCL MoE combine
    moe: MoeCurve
    empirical: UtilGrids  # the EMPIRICAL mode's util samples
    scratch_d: np.ndarray  # float64[8] scratch for the attention hold
    scratch_i: np.ndarray  # int64[8]


@helper
def _mem_ms(nbytes, s):
    if s.mode == MODE_SOL:
        return nbytes / s.mem_bw * 1000.0
    return (nbytes / (s.mem_bw * s.mem_eff) + s.mem_const_s) * 1000.0


@kernel
def _leaf_le(plan, i, tokens, requests, batch, seq, prefix):
    """(latency ms, energy W*ms) of the non-composite op i for one layer, before its scale."""
    s = plan.scalars[0]
    kind = plan.ops.kind[i]
    sol = s.mode == MODE_SOL
    if kind == OP_MEM_TOKENS:
        return _mem_ms(tokens * plan.ops.param[i], s), 0.0
    if kind == OP_GEMM_TOKENS or kind == OP_GEMM_REQUESTS:  # noqa: SIM109 (numba)
        m = tokens if kind == OP_GEMM_TOKENS else requests
        g = plan.ops.index[i]
        if sol:
            return gemm_op_sol_ms(plan.gemm, g, m, s.mem_bw), 0.0
        if s.mode == MODE_EMPIRICAL:
            util = util_at(plan.empirical, g, m, plan.gemm.op_n[g], plan.gemm.op_k[g])
            return gemm_op_sol_ms(plan.gemm, g, m, s.mem_bw) / util, 0.0
        return gemm_le(plan.gemm, g, m, s.mem_bw)
    if kind == OP_ALLREDUCE:
        elements = tokens * plan.ops.param[i]
        if sol:
            return allreduce_sol_ms(
                elements, s.allreduce_gpus, s.allreduce_elem_bytes, s.link_bw
            ), 0.0
        if s.mode == MODE_EMPIRICAL:
            if s.allreduce_gpus <= 1:
                return 0.0, 0.0
            lookup = plan.empirical.slot[SLOT_ALLREDUCE]
            return allreduce_sol_ms(
                elements, s.allreduce_gpus, s.allreduce_elem_bytes, s.link_bw
            ) / util_at(plan.empirical, lookup, elements, 1.0, 1.0), 0.0
        return allreduce_le(
            elements, plan.allreduce, s.allreduce_gpus, s.allreduce_elem_bytes, s.link_bw
        )
    if kind == OP_ATTN_CONTEXT or kind == OP_ATTN_CONTEXT_BANDED:  # noqa: SIM109 (numba)
        grid = plan.context_attention if kind == OP_ATTN_CONTEXT else plan.banded_context_attention
        if sol:  # the prefix enters the roofline itself, not as the correction factor
            return (
                context_sol_prefix_ms(s.heads, seq, prefix, batch, grid.par) + s.ctx_extra_sol_ms
            ), 0.0
        if s.mode == MODE_EMPIRICAL:  # the prefix enters the query's SOL, as in SOL mode
            lookup = plan.empirical.slot[SLOT_CONTEXT]
            util = util_at(plan.empirical, lookup, s.heads, seq, batch)
            return context_sol_prefix_ms(s.heads, seq, prefix, batch, grid.par) / util + (
                s.ctx_extra_ms
            ), 0.0
        corr = (seq * seq - prefix * prefix) / (seq * seq)
        table, e = grid_le(KIND_CONTEXT, s.heads, seq, batch, grid, plan.scratch_d, plan.scratch_i)
        return table * corr + s.ctx_extra_ms, e * corr
    if kind == OP_ATTN_GENERATION or kind == OP_ATTN_GENERATION_BANDED:  # noqa: SIM109
        grid = (
            plan.generation_attention
            if kind == OP_ATTN_GENERATION
            else plan.banded_generation_attention
        )
        if sol:
            return (
                attention_sol_ms(KIND_GENERATION, s.heads, batch, seq, grid.par)
                + s.gen_extra_sol_ms
            ), 0.0
        if s.mode == MODE_EMPIRICAL:  # one read at the kv length, no five-sample mean
            lookup = plan.empirical.slot[SLOT_GENERATION]
            util = util_at(plan.empirical, lookup, s.heads, batch, seq)
            sol_ms = attention_sol_ms(KIND_GENERATION, s.heads, batch, seq, grid.par)
            return sol_ms / util + s.gen_extra_ms, 0.0
        table, e = generation_5sample_le(s.heads, batch, seq, grid, plan.scratch_d, plan.scratch_i)
        return table + s.gen_extra_ms, e
    if kind == OP_P2P:
        if plan.ops.scale[i] == 0.0:
            return 0.0, 0.0
        nbytes = tokens * plan.ops.param[i]
        if sol:
            return nbytes / s.inter_bw * 1000.0, 0.0
        return (nbytes / s.inter_bw + s.p2p_latency_s) * 1000.0, 0.0
    # the MoE / DeepSeek ops are priced from their tables in either mode (MoE plans are
    # SILICON or EMPIRICAL; EMPIRICAL estimates the routed experts and the attention-DP
    # dispatch / combine, with no energy); a SOL plan still reports no energy
    if kind == OP_MOE:
        if s.mode == MODE_EMPIRICAL:
            return moe_empirical_ms(tokens, plan.moe, plan.empirical), 0.0
        lat, e = moe_le(tokens, plan.moe)
    elif OP_NCCL_ALL_GATHER <= kind <= OP_NCCL_REDUCE_SCATTER:  # consecutive codes
        if s.mode == MODE_EMPIRICAL:
            return moe_dispatch_empirical_ms(
                tokens * plan.ops.param[i],
                plan.moe.par[MOE_DP],
                plan.empirical,
                SLOT_ALL_GATHER if kind == OP_NCCL_ALL_GATHER else SLOT_REDUCE_SCATTER,
                s.dispatch_gpus,
                s.link_bw,
                s.dispatch_bw,
                s.dispatch_allreduce,
            ), 0.0
        nccl = plan.all_gather if kind == OP_NCCL_ALL_GATHER else plan.reduce_scatter
        lat = moe_dispatch_ms(
            tokens * plan.ops.param[i],
            plan.moe.par[MOE_DP],
            plan.allreduce,
            nccl,
            s.dispatch_gpus,
            s.link_bw,
            s.dispatch_allreduce,
        )
        e = 0.0
    elif kind == OP_DSA_CONTEXT or kind == OP_DSA_CONTEXT_SKIP:  # noqa: SIM109 (numba)
        lat, e = grid_le(
            KIND_DSA_CONTEXT,
            prefix + 1.0,
            seq - prefix,
            batch,
            plan.dsa_context if kind == OP_DSA_CONTEXT else plan.dsa_context_skip,
            plan.scratch_d,
            plan.scratch_i,
        )
    elif kind == OP_DSA_GENERATION or kind == OP_DSA_GENERATION_SKIP:  # noqa: SIM109
        lat, e = grid_le(
            KIND_DSA_GENERATION,
            s.heads,
            batch,
            seq,
            plan.dsa_generation if kind == OP_DSA_GENERATION else plan.dsa_generation_skip,
            plan.scratch_d,
            plan.scratch_i,
        )
    else:
        return 0.0, 0.0
    return lat, 0.0 if sol else e


@kernel
def _op_le(plan, i, tokens, requests, batch, seq, prefix):
    """(latency ms, energy W*ms) of op i for one layer, before its scale factor."""
    kind = plan.ops.kind[i]
    if kind == OP_OVERLAP:
        # decode-time overlap of the routed-expert branch (a) with the shared expert (b)
        s = plan.scalars[0]
        e = 0.0
        a = 0.0
        for j in range(s.overlap_a_lo, s.overlap_b_lo):
            lat, ej = _leaf_le(plan, j, tokens, requests, batch, seq, prefix)
            a += lat
            e += ej
        b = 0.0
        for j in range(s.overlap_b_lo, s.overlap_b_hi):
            lat, ej = _leaf_le(plan, j, tokens, requests, batch, seq, prefix)
            b += lat
            e += ej
        return (a if a >= b else b), e
    if kind == OP_SUM:
        # one reported op made of table lookups (TRT-LLM MLA block: GEMMs + attention kernel;
        # the full and sliding-window attention layers of a banded model, scaled by their
        # layer counts)
        total = 0.0
        e = 0.0
        lo = plan.ops.index[i]
        for j in range(lo, lo + int(plan.ops.param[i])):
            lat, ej = _leaf_le(plan, j, tokens, requests, batch, seq, prefix)
            total += lat * plan.ops.scale[j]
            e += ej * plan.ops.scale[j]
        return total, e
    return _leaf_le(plan, i, tokens, requests, batch, seq, prefix)


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


# inlined into price_prefill / price_decode (the event loop's miss path): a call level that
# copies the plan's ~480 argument words, per phase, saved
@helper
def price_range(
    plan, lo, hi, tokens, requests, batch, seq, prefix, out_ms, out_energy_wms, out_covered_ms
):
    """Ops [lo, hi) at explicit (tokens, requests, batch, seq, prefix); returns their latency
    sum in op order.

    Mutates [lo, hi) of out_ms (ms, scale applied), out_energy_wms (W*ms, 0 = none) and
    out_covered_ms (the op's latency when its energy > 0, else 0).
    """
    total = 0.0
    for i in range(lo, hi):
        ms, e = _op_le(plan, i, tokens, requests, batch, seq, prefix)
        total += _store(i, ms, e, plan.ops.scale[i], out_ms, out_energy_wms, out_covered_ms)
    return total


@kernel
def price_prefill(plan, batch, isl, prefix, out_ms, out_energy_wms, out_covered_ms):
    """PREFILL(batch, isl, prefix), ms per pass per GPU; isl includes the cached prefix.

    Parameters
    ----------
    plan : OpPlan
    batch, isl, prefix : int64, requests, tokens per request (new + cached), cached tokens.
    out_ms, out_energy_wms, out_covered_ms : float64[>= num_ops]; Mutates [0, num_ctx_ops)
        (see price_range).
    """
    tokens = float(batch * (isl - prefix))
    return price_range(
        plan,
        0,
        plan.scalars[0].num_ctx_ops,
        tokens,
        float(batch),
        float(batch),
        float(isl),
        float(prefix),
        out_ms,
        out_energy_wms,
        out_covered_ms,
    )


@kernel
def price_decode(plan, batch, ctx, out_ms, out_energy_wms, out_covered_ms):
    """DECODE(batch, ctx), ms per pass per GPU; ctx is the mean context incl. the current token.

    Every request verifies 1 + nextn tokens (MTP): GEMM m, attention batch and allreduce size
    use batch x (1 + nextn). Mutates [num_ctx_ops, num_ops) of the outputs (see price_range).
    """
    s = plan.scalars[0]
    eff = float(batch * (1 + s.nextn))
    return price_range(
        plan,
        s.num_ctx_ops,
        s.num_ops,
        eff,
        eff,
        eff,
        float(ctx),
        0.0,
        out_ms,
        out_energy_wms,
        out_covered_ms,
    )


@kernel
def accumulate(
    lo, hi, out_ms, out_energy_wms, out_covered_ms, acc_ms, acc_energy_wms, acc_covered_ms
):
    """acc[i] += out[i] for i in [lo, hi): one evaluation into the run accumulators."""
    for i in range(lo, hi):
        acc_ms[i] += out_ms[i]
        acc_covered_ms[i] += out_covered_ms[i]
        acc_energy_wms[i] += out_energy_wms[i]
