"""Pricing a rank's pass (docs/rules.md 4.6): the batch shape (prefill set and decode set at
their floored means), the phase times of the deployment's timing (fixed, polynomial or op-level
through the memoized op plan), each phase rounded to whole nanoseconds; with MTP, the burst KV
reservation that decides the decode set first."""

from aisim.kernels import backend_rules as rules
from aisim.kernels import kv_blocks as kv
from aisim.kernels import mtp_step, optime_pass, running
from aisim.kernels._jit import helper, kernel
from aisim.kernels.codes import (
    SCHED_PROGRESS,
    SCHED_TRT_PREEMPT,
    Role,
    TimingKind,
)
from aisim.kernels.units import round_ns


@helper
def _memo_slot(kind, a, b, c, mask):
    h = (kind * 0x9E3779B1 + a * 0x85EBCA77 + b * 0xC2B2AE3D + c * 0x27D4EB2F) & 0x7FFFFFFF
    return (h ^ (h >> 15)) & mask


MEMO_WAYS = 4  # slots per set: direct mapping let two hot keys evict each other every request


@helper
def _memo_find(memo, kind, a, b, c):
    """(slot, hit): the key's slot in its 4-way set, else the slot to refill (an empty one, or
    one picked by the evaluation count: any choice gives the same prices)."""
    keys = memo.keys
    base = _memo_slot(kind, a, b, c, keys.shape[0] - 1) & ~(MEMO_WAYS - 1)
    victim = -1
    for j in range(MEMO_WAYS):
        s = base + j
        if keys[s, 0] == kind and keys[s, 1] == a and keys[s, 2] == b and keys[s, 3] == c:
            return s, True
        if victim < 0 and keys[s, 0] < 0:
            victim = s
    if victim < 0:
        victim = base + ((memo.evals[0] + memo.evals[1]) & (MEMO_WAYS - 1))
    return victim, False


@kernel
def memo_fill(plan, memo, slot, kind, a, b, c):
    """Price a phase op by op into memo slot `slot` (the rare miss path, kept out of line)."""
    if kind == 0:
        v = optime_pass.price_prefill(
            plan, a, b, c, memo.row_ms[slot], memo.row_energy[slot], memo.row_covered[slot]
        )
    else:
        v = optime_pass.price_decode(
            plan, a, b, memo.row_ms[slot], memo.row_energy[slot], memo.row_covered[slot]
        )
    keys = memo.keys
    keys[slot, 0] = kind
    keys[slot, 1] = a
    keys[slot, 2] = b
    keys[slot, 3] = c
    memo.vals[slot] = v


@helper
def op_level_ms(plan, memo, kind, a, b, c):
    """PREFILL (kind 0: batch a, isl b, prefix c) or DECODE (kind 1: batch a, ctx b), memoized.

    Pass shapes repeat massively (a steady decode batch prices the same key for thousands of
    passes); a direct-mapped cache keeps the op-level evaluation off most passes. The hit path
    is inlined: an out-of-line call copies every array descriptor of the plan and the memo,
    which cost ~0.4 us per pass (measured on a concurrency-1 run, 8.4 M passes).
    """
    slot, hit = _memo_find(memo, kind, a, b, c)
    if not hit:
        memo_fill(plan, memo, slot, kind, a, b, c)
    num_ctx = plan.scalars[0].num_ctx_ops
    if kind == 0:
        lo, hi = 0, num_ctx
    else:
        lo, hi = num_ctx, plan.scalars[0].num_ops
    # every evaluation (hit or miss) adds its per-op rows, in pass order (energy contract);
    # unsigned op and slot indices: no negative-index fix-up per access (mtp-vllm runs ~91 k
    # evaluations of 14 ops into three accumulators)
    row_ms = memo.row_ms[kv.index(slot)]
    row_energy = memo.row_energy[kv.index(slot)]
    row_covered = memo.row_covered[kv.index(slot)]
    acc_ms = memo.acc_ms
    acc_energy = memo.acc_energy
    acc_covered = memo.acc_covered
    for i in range(kv.index(lo), kv.index(hi)):
        acc_ms[i] += row_ms[i]
        acc_covered[i] += row_covered[i]
        acc_energy[i] += row_energy[i]
    memo.evals[kind] += 1
    return memo.vals[slot]


@helper
def pass_time(p, plan, memo, bs_p, isl, pfx, bs_d, ctx, sum_new, sum_ctx):
    """(prefill_ms, decode_ms) of a rank's pass from its batch shape (docs/rules.md 4.6)."""
    prefill = 0.0
    decode = 0.0
    if p.timing_kind == TimingKind.OP_LEVEL:
        if bs_p > 0 and isl != pfx:
            prefill = op_level_ms(plan, memo, 0, bs_p, isl, pfx)
        if bs_d > 0:
            decode = op_level_ms(plan, memo, 1, bs_d, ctx, 0)
    elif p.timing_kind == TimingKind.FIXED:
        if bs_p > 0 and isl != pfx:
            prefill = p.prefill_ms
        if bs_d > 0:
            decode = p.decode_ms
    else:
        if bs_p > 0 and isl != pfx:
            # AISimulate's evaluation order: each power first, the terms added left to right.
            # Another order changes the last bit and, on a half-nanosecond tie, the rounded ns
            # (a 35,000-token prefill: 1063.645472 ms, not ...473; docs/rules.md 4.6)
            t = float(bs_p * (isl - pfx))
            prefill = 4.209989e-7 * (t * t) + 1.518344e-2 * t + 16.50142
        if bs_d > 0:
            u = min(1.0, float(sum_ctx) / float(p.num_blocks * p.block_size))
            decode = max(1.0, -25.74 * (u * u) + 54.01 * u + 5.74)
    return prefill, decode


@helper
def batch_shape(req, ranks, r, x):
    """Sums describing the rank's scheduled work: (prefill requests, sum of their prompt
    positions after the pass, sum of their positions before it, decode-set size, sum of the
    decode set's L)."""
    act_list = ranks.act_list
    sched_tokens = req.sched_tokens
    computed_before = req.computed_before
    prompt_len = req.prompt_len
    num_generated = req.num_generated
    bs_p = 0
    sum_isl = 0
    sum_pfx = 0
    # lazy decoders: all in the decode set, L = lazy_sum / count + x each
    bs_d = ranks.lazy_count[r]
    sum_ctx = ranks.lazy_sum[r] + bs_d * x
    for k in range(ranks.act_len[r]):
        q = act_list[r, k]
        n = sched_tokens[q]
        if n == 0:
            if req.activated[q]:
                bs_d += 1
                sum_ctx += prompt_len[q] + num_generated[q]
            continue
        a = computed_before[q]
        b = a + n
        prompt = prompt_len[q]
        if a < prompt:
            bs_p += 1
            sum_isl += min(b, prompt)
            sum_pfx += a
        g = num_generated[q]
        if g > 0 and b == prompt + g:
            bs_d += 1
            sum_ctx += prompt + g
    return bs_p, sum_isl, sum_pfx, bs_d, sum_ctx


@helper
def price_shape(p, plan, memo, bs_p, sum_isl, sum_pfx, bs_d, sum_ctx):
    """(prefill ns, decode ns) of a batch: prefill set and decode set at their floored means,
    each phase rounded to whole nanoseconds."""
    # P/D: a prefill worker charges no decode time, a decode worker no prefill time
    # (docs/rules.md 9.1)
    if p.role == Role.PREFILL:
        bs_d = 0
    elif p.role == Role.DECODE:
        bs_p = 0
    isl = 0
    pfx = 0
    ctx = 0
    if bs_p > 0:
        isl = sum_isl // bs_p
        pfx = sum_pfx // bs_p
    if bs_d > 0:
        ctx = sum_ctx // bs_d
    prefill, decode = pass_time(
        p, plan, memo, bs_p, isl, pfx, bs_d, ctx, sum_isl - sum_pfx, sum_ctx
    )
    return round_ns(prefill), round_ns(decode)


@helper
def price_rank(p, req, ranks, r, x, plan, memo):
    """(prefill ns, decode ns) of the rank's scheduled work."""
    bs_p, sum_isl, sum_pfx, bs_d, sum_ctx = batch_shape(req, ranks, r, x)
    return price_shape(p, plan, memo, bs_p, sum_isl, sum_pfx, bs_d, sum_ctx)


@helper
def reserve_and_price_mtp(p, req, ranks, blocks, stats, pfx_hash, mtp, r, plan, memo, flags):
    """MTP: fix the prefill part, reserve the bursts' KV (preempting the last running request
    until it fits; a victim's prefill stays priced and is lost), price the surviving decode set.
    Returns (prefill ns, decode ns, flags).

    The batch sums and the bursts' block need were collected while scheduling
    (mtp_step.shape_add), so the common case sweeps the running requests no further. The
    reserved blocks are only taken by the bursts at the pass end (emit_rank).
    """
    sh = mtp.shape
    bs_p = sh[r, mtp_step.SHAPE_PREFILLS]
    sum_isl = sh[r, mtp_step.SHAPE_ISL]
    sum_pfx = sh[r, mtp_step.SHAPE_PREFIX]
    bs_d = sh[r, mtp_step.SHAPE_DECODES]
    sum_ctx = sh[r, mtp_step.SHAPE_CTX]
    need = sh[r, mtp_step.SHAPE_NEED]
    if need > 0 and not mtp_step.reserve_bursts(ranks, blocks, r, need, p.num_blocks):
        while True:
            if not rules.preempts_when_full(p):
                flags |= SCHED_TRT_PREEMPT
                break
            running.preempt_last(p, req, ranks, blocks, stats, pfx_hash, r)
            flags |= SCHED_PROGRESS
            need = mtp_step.burst_need(p, req, ranks, blocks, r)
            if mtp_step.reserve_bursts(ranks, blocks, r, need, p.num_blocks):
                break
        act_list = ranks.act_list
        bs_d = 0
        sum_ctx = 0
        for k in range(ranks.act_len[r]):
            q = act_list[r, k]
            if mtp_step.in_decode_set(req, q):
                bs_d += 1
                sum_ctx += req.prompt_len[q] + req.num_generated[q]
    prefill_ns, decode_ns = price_shape(p, plan, memo, bs_p, sum_isl, sum_pfx, bs_d, sum_ctx)
    return prefill_ns, decode_ns, flags
