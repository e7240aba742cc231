"""One scheduler pass of one rank: vLLM v1 scheduling with the TRT-LLM admission differences.

Mirrors vLLM v1 `Scheduler.schedule` as AISimulate runs it (behaviour.md 4, 6, 7, 17): running
requests first in list order, each taking min(remaining known tokens, budget); a failed block
allocation preempts the LAST running request (LIFO, possibly itself) and blocks admission for the
pass; then FCFS admission with head-of-line blocking. vLLM admits when the whole known sequence
fits in the blocks not referenced by live requests; TRT-LLM (GUARANTEED_NO_EVICT) admits when
the request's to-completion footprint fits beside the to-completion needs of running requests,
and therefore never preempts.

All tokens of a pass are stamped at its end, where `emit_rank` advances outputs and retires
requests.
"""

import numpy as np

from aisim.kernels import kv_blocks as kv
from aisim.kernels import lazy, mtp_step, optime_pass
from aisim.kernels._jit import helper, kernel
from aisim.kernels.codes import (
    CNT_ADMISSIONS,
    CNT_COMMITTED,
    CNT_LAZY,
    CNT_LOG,
    CNT_PREEMPTIONS,
    CNT_REJECTIONS,
    CNT_SPAWNED,
    Backend,
    LoadKind,
    ReqStatus,
    Role,
    TimingKind,
)
from aisim.kernels.mtp_step import mtp_on
from aisim.kernels.tokstats import record_gap

# schedule_rank status flags
SCHED_PROGRESS = 1
SCHED_TRT_PREEMPT = 2
SCHED_LOG_FULL = 4


@helper
def ceil_div(a, b):
    return -((-a) // b)


@helper
def round_ns(ms):
    """A phase duration as AISimulate's clock adds it: whole nanoseconds, nearest."""
    if ms <= 0.0:
        return np.int64(0)
    return np.int64(np.floor(ms * 1e6 + 0.5))


@helper
def phase_ms(ns):
    """A whole-nanosecond phase duration in ms as the clock adds it: seconds plus nanoseconds
    over 1e9 (Rust's Duration::as_secs_f64), times 1000. The pass end is
    start + phase_ms(prefill) + phase_ms(decode), two float additions (docs/rules.md, "Clock")."""
    whole = ns // 1_000_000_000
    return (np.float64(whole) + np.float64(ns - whole * 1_000_000_000) / 1e9) * 1000.0


@helper
def spawn_next(p, req, stats, t_ms):
    """Closed loop: a request reaching a terminal state brings in the next one at t_ms."""
    if p.load_kind == LoadKind.CONCURRENCY:
        k = stats.counters[CNT_SPAWNED]
        if k < req.prompt_len.shape[0]:
            req.arrival_ms[k] = t_ms
            stats.counters[CNT_SPAWNED] = k + 1


@helper
def push_waiting_back(req, ranks, r, i):
    req.wait_next[i] = -1
    t = ranks.wait_tail[r]
    if t >= 0:
        req.wait_next[t] = i
    else:
        ranks.wait_head[r] = i
    ranks.wait_tail[r] = i
    ranks.wait_len[r] += 1


@helper
def push_waiting_front(req, ranks, r, i):
    h = ranks.wait_head[r]
    req.wait_next[i] = h
    ranks.wait_head[r] = i
    if h < 0:
        ranks.wait_tail[r] = i
    ranks.wait_len[r] += 1


@helper
def pop_waiting(req, ranks, r):
    i = ranks.wait_head[r]
    n = req.wait_next[i]
    ranks.wait_head[r] = n
    if n < 0:
        ranks.wait_tail[r] = -1
    req.wait_next[i] = -1
    ranks.wait_len[r] -= 1
    return i


@helper
def free_request_kv(p, req, ranks, blocks, r, i):
    s = req.slot[i]
    kv.release_slot(ranks, blocks, r, s, p.num_blocks)
    top = ranks.slot_top[r]
    # rows per rank = run_list width (P/D sides hold more rows than max_seqs: held KV)
    blocks.slot_stack[r * ranks.run_list.shape[1] + top] = s
    ranks.slot_top[r] = top + 1
    req.slot[i] = -1


@kernel
def preempt_last(p, req, ranks, blocks, stats, pfx_hash, r):
    """Evict the last running request: free its KV, recompute later from the queue front."""
    n = ranks.run_len[r] - 1
    v = ranks.run_list[r, n]
    ranks.run_list[r, n] = -1
    ranks.run_len[r] = n
    # preemption only happens in exact passes, where every running request is active
    a = ranks.act_len[r] - 1
    if a >= 0 and ranks.act_list[r, a] == v:
        ranks.act_list[r, a] = -1
        ranks.act_len[r] = a
    if p.prefix_caching:
        kv.publish_owner_blocks(req, blocks, pfx_hash, v, r, req.slot[v])
    free_request_kv(p, req, ranks, blocks, r, v)
    req.num_computed[v] = 0
    req.sched_tokens[v] = 0
    req.drafting[v] = False
    req.draft_slots[v] = 0
    req.status[v] = ReqStatus.WAITING
    push_waiting_front(req, ranks, r, v)
    stats.counters[CNT_PREEMPTIONS] += 1
    return v


@kernel
def reject(p, req, ranks, stats, r, i, t_ms):
    """Reject request i at its admission attempt. It is reported (and, closed loop, replaced)
    when the pass that tried to admit it ends (see settle_rejections)."""
    req.status[i] = ReqStatus.REJECTED
    req.terminal_ms[i] = t_ms
    stats.counters[CNT_REJECTIONS] += 1
    req.rej_next[i] = ranks.rej_head[r]
    ranks.rej_head[r] = i


@helper
def settle_rejections(p, req, ranks, stats, r, end_ms):
    """At the start of rank r's pass: its rejections take effect at the pass end, in order."""
    i = ranks.rej_head[r]
    if i < 0:
        return
    # the list is newest first: reverse it so replacements spawn in rejection order
    prev = -1
    while i >= 0:
        nxt = req.rej_next[i]
        req.rej_next[i] = prev
        prev = i
        i = nxt
    i = prev
    while i >= 0:
        req.terminal_ms[i] = end_ms
        spawn_next(p, req, stats, end_ms)
        nxt = req.rej_next[i]
        req.rej_next[i] = -1
        i = nxt
    ranks.rej_head[r] = -1


@helper
def trt_outstanding(p, req, blocks, ranks, r):
    """Blocks running requests will still need to reach completion (TRT-LLM reservation)."""
    total = 0
    for k in range(ranks.run_len[r]):
        q = ranks.run_list[r, k]
        full = ceil_div(req.prompt_len[q] + req.output_len[q], p.block_size)
        total += full - blocks.slot_nblk[req.slot[q]]
    return total


@helper
def schedule_running(p, req, ranks, blocks, stats, pfx_hash, r, budget, defer, x, mtp):
    """Running requests in list order. Returns (budget left, flags, preempted).

    Active requests are scheduled one by one; lazy ones (all scheduled in full, guaranteed by
    lazy.fits_in_full) only act when due, merged in running order so KV operations keep the
    exact order of the per-request algorithm.
    """
    # Arrays are bound to locals once: reading a NamedTuple field inside the loop costs an
    # atomic reference-count pair per access.
    bs = p.block_size
    act_list = ranks.act_list
    prompt_len = req.prompt_len
    num_computed = req.num_computed
    num_generated = req.num_generated
    slots = req.slot
    slot_nblk = blocks.slot_nblk
    slot_nhashed = blocks.slot_nhashed
    sched_tokens = req.sched_tokens
    computed_before = req.computed_before
    seq = req.seq
    flags = 0
    committed = 0
    preempted = False
    n_due = ranks.due_len[r]
    d = 0
    if ranks.lazy_count[r] > 0:
        budget -= ranks.lazy_count[r]
        flags |= SCHED_PROGRESS
    i = 0
    while i < ranks.act_len[r]:
        if budget == 0:
            break
        q = kv.index(act_list[r, i])
        while d < n_due and seq[ranks.due_list[r, d]] < seq[q]:
            run_due_event(p, req, ranks, blocks, pfx_hash, r, x, ranks.due_list[r, d])
            d += 1
        prompt = prompt_len[q]
        c = num_computed[q]
        if defer and c < prompt:
            i += 1
            continue
        g = num_generated[q]
        n = min(prompt + g - c, budget)
        charge = n
        if mtp_on(mtp):
            if req.drafting[q]:
                if p.backend == Backend.VLLM:
                    # vLLM charges 1 + nextn verification slots (fewer if the budget or the
                    # context limit runs out, and then walks fewer rates) for the known token
                    charge = min(1 + p.nextn, budget, p.max_model_len - prompt - g)
                    req.draft_slots[q] = charge
                else:
                    req.draft_slots[q] = 1 + p.nextn  # TRT-LLM: drafts are not budgeted
            elif p.backend == Backend.TRTLLM and c + n == prompt and g == 0:
                req.draft_slots[q] = 1 + p.nextn  # TRT-LLM drafts from the prefill pass on
        slot = kv.index(slots[q])
        # divisions are slow and a decode crosses a block boundary once per block_size steps
        if c + n > slot_nblk[slot] * bs:
            target = ceil_div(c + n, bs)
            need = target - slot_nblk[slot]
            self_preempted = False
            while need > kv.num_free(ranks, r):
                if p.backend == Backend.TRTLLM:
                    stats.counters[CNT_COMMITTED] += committed
                    return budget, flags | SCHED_TRT_PREEMPT, preempted
                v = preempt_last(p, req, ranks, blocks, stats, pfx_hash, r)
                preempted = True
                flags |= SCHED_PROGRESS
                if v == q:
                    self_preempted = True
                    break
            if self_preempted:
                break
            kv.grow_slot(ranks, blocks, r, slot, target, p.num_blocks)
        computed_before[q] = c
        sched_tokens[q] = n
        num_computed[q] = c + n
        if p.prefix_caching and c + n >= (slot_nhashed[slot] + 1) * bs:
            kv.register_full_blocks(req, blocks, pfx_hash, q, r, slot, c + n, bs)
        if c < prompt:
            committed += n
        budget -= charge
        flags |= SCHED_PROGRESS
        if mtp_on(mtp):
            mtp_step.shape_add_known(p, req, ranks, blocks, mtp, r, q, c, n, prompt, g, slot)
        i += 1
    while d < n_due:
        run_due_event(p, req, ranks, blocks, pfx_hash, r, x, ranks.due_list[r, d])
        d += 1
    stats.counters[CNT_COMMITTED] += committed
    return budget, flags, preempted


@kernel
def run_due_event(p, req, ranks, blocks, pfx_hash, r, x, q):
    """A lazy request's block boundary / full block / completion at rank pass x."""
    bs = p.block_size
    slot = req.slot[q]
    after = lazy.due_position(req, ranks, r, x, q) + 1
    if after > blocks.slot_nblk[slot] * bs:
        kv.grow_slot(ranks, blocks, r, slot, blocks.slot_nblk[slot] + 1, p.num_blocks)
    if p.prefix_caching and after >= (blocks.slot_nhashed[slot] + 1) * bs:
        kv.register_full_blocks(req, blocks, pfx_hash, q, r, slot, after, bs)
    if x - req.lazy_base[q] == req.output_len[q] - req.gen_base[q]:
        req.finishing[q] = True  # emits its last token at this pass end
    else:
        lazy.cal_insert(req, ranks, r, q, lazy.next_event(p, req, blocks, q))


@helper
def admit_waiting(p, req, ranks, blocks, stats, log, pfx_hash, r, t_ms, budget, defer, mtp):
    """FCFS admission with head-of-line blocking. Returns (budget left, flags)."""
    bs = p.block_size
    nb = p.num_blocks
    flags = 0
    outstanding = -1  # TRT-LLM reservation, summed over running only when a head is tested
    if ranks.dest_pending[r] > 0 and p.backend == Backend.VLLM:
        return budget, admit_activated_only(p, req, ranks, stats, log, r, t_ms)
    while ranks.wait_len[r] > 0 and ranks.run_len[r] < p.max_seqs:
        q = ranks.wait_head[r]
        prompt = req.prompt_len[q]
        known = prompt + req.num_generated[q]
        fresh = req.num_admissions[q] == 0
        if fresh and p.role == Role.DECODE:
            # P/D activation: KV already reserved and materialised; no budget, no prefill
            admit_activated(p, req, ranks, stats, log, r, q, t_ms)
            flags |= SCHED_PROGRESS | admission_log_flags(p, log, stats)
            continue
        too_big = prompt >= p.max_model_len
        if fresh and not too_big:
            if p.backend == Backend.TRTLLM:
                too_big = req.output_len[q] <= 0
            else:
                too_big = ceil_div(prompt, bs) > nb
        if too_big:
            pop_waiting(req, ranks, r)
            reject(p, req, ranks, stats, r, q, t_ms)
            flags |= SCHED_PROGRESS
            continue
        trt = p.backend == Backend.TRTLLM
        hits, active = kv.probe_prefix(req, blocks, pfx_hash, q, r, known, bs, p.prefix_caching,
                                       trt)
        if mtp_on(mtp):
            if not trt and hits > 0:
                hits, active = mtp_step.drop_last_hit(hits, active)
        if p.backend == Backend.TRTLLM:
            need = ceil_div(prompt + req.output_len[q], bs) - active
            if outstanding < 0:
                outstanding = trt_outstanding(p, req, blocks, ranks, r)
            avail = nb - ranks.num_referenced[r] - outstanding
        else:
            need = ceil_div(known, bs) - active
            avail = nb - ranks.num_referenced[r]
        if need > avail:
            break
        hit_tokens = hits * bs
        remaining = known - hit_tokens
        n = min(remaining, budget)
        # TRT-LLM: a fully cached prompt needs no budget; it joins this pass's decode set
        # (context L = P) and emits its first token at the pass end
        if n == 0 and remaining > 0:
            break
        if not p.chunked_prefill and remaining > budget:
            break
        if defer and remaining > 1:
            break
        pop_waiting(req, ranks, r)
        top = ranks.slot_top[r] - 1
        slot = blocks.slot_stack[r * ranks.run_list.shape[1] + top]
        ranks.slot_top[r] = top
        req.slot[q] = slot
        ranks.run_list[r, ranks.run_len[r]] = q
        ranks.run_len[r] += 1
        ranks.act_list[r, ranks.act_len[r]] = q
        ranks.act_len[r] += 1
        req.seq[q] = stats.counters[CNT_ADMISSIONS]
        req.status[q] = ReqStatus.RUNNING
        kv.attach_hits(req, ranks, blocks, pfx_hash, q, r, slot, hits)
        kv.grow_slot(ranks, blocks, r, slot, ceil_div(hit_tokens + n, bs), nb)
        req.computed_before[q] = hit_tokens
        req.sched_tokens[q] = n
        req.num_computed[q] = hit_tokens + n
        req.activated[q] = remaining == 0
        if mtp_on(mtp):
            if trt and remaining == n and req.num_generated[q] == 0:
                req.draft_slots[q] = 1 + p.nextn  # TRT-LLM drafts from the prefill pass on
            mtp_step.shape_add(p, req, ranks, blocks, mtp, r, q)
        if p.prefix_caching:
            kv.register_full_blocks(req, blocks, pfx_hash, q, r, slot, hit_tokens + n, bs)
        if hit_tokens < prompt:
            stats.counters[CNT_COMMITTED] += n
        if fresh:
            req.first_admit_ms[q] = t_ms
            req.reused_first[q] = hit_tokens
        if hit_tokens > req.reused_max[q]:
            req.reused_max[q] = hit_tokens
        req.num_admissions[q] += 1
        stats.counters[CNT_ADMISSIONS] += 1
        if p.capture:
            k = stats.counters[CNT_LOG]
            if k >= log.req.shape[0]:
                flags |= SCHED_LOG_FULL
            else:
                log.req[k] = q
                log.at_ms[k] = t_ms
                log.reused[k] = hit_tokens
                log.readmit[k] = not fresh
                log.pool[k] = p.role
                stats.counters[CNT_LOG] = k + 1
        if p.backend == Backend.TRTLLM:
            if outstanding >= 0:
                outstanding += ceil_div(prompt + req.output_len[q], bs) - blocks.slot_nblk[slot]
        budget -= n
        flags |= SCHED_PROGRESS
        if budget == 0 and n == 0:
            # TRT-LLM: a fully cached prompt is admitted even with no budget left, and then
            # admission stops. An admission that spends the budget on tokens does not stop it:
            # the next head is still rejected if it can never run, and admitted if it is fully
            # cached (observed); any other head finds no budget and waits.
            break
    return budget, flags


@helper
def admission_log_flags(p, log, stats):
    if p.capture and stats.counters[CNT_LOG] > log.req.shape[0]:
        return SCHED_LOG_FULL
    return 0


@helper
def admit_activated(p, req, ranks, stats, log, r, q, t_ms):
    """Decode side of P/D: an activated request joins the running list with its prompt computed.

    It is in this pass's decode set with L = P and emits its first token at the pass end
    (behaviour.md 10.1 item 7); its blocks were taken at reservation.
    """
    pop_waiting(req, ranks, r)
    ranks.run_list[r, ranks.run_len[r]] = q
    ranks.run_len[r] += 1
    ranks.act_list[r, ranks.act_len[r]] = q
    ranks.act_len[r] += 1
    req.seq[q] = stats.counters[CNT_ADMISSIONS]
    req.status[q] = ReqStatus.RUNNING
    prompt = req.prompt_len[q]
    req.computed_before[q] = prompt
    req.sched_tokens[q] = 0
    req.num_computed[q] = prompt
    req.activated[q] = True
    req.first_admit_ms[q] = t_ms
    req.num_admissions[q] += 1
    stats.counters[CNT_ADMISSIONS] += 1
    if p.capture:
        k = stats.counters[CNT_LOG]
        if k < log.req.shape[0]:
            log.req[k] = q
            log.at_ms[k] = t_ms
            log.reused[k] = req.reused_first[q]
            log.readmit[k] = False
            log.pool[k] = p.role
        stats.counters[CNT_LOG] = k + 1


@helper
def admit_activated_only(p, req, ranks, stats, log, r, t_ms):
    """P/D vLLM decode rank with destinations still waiting for a reservation: recomputes after
    preemption stay queued (not admitted, even when they would fit) and the activated requests
    behind them, whose KV is held already, are admitted in queue order. Observed on AISimulate
    (tests/golden/pd-decode-kv-pressure-preempt*): without a pending destination the queue is
    the usual head-of-line FCFS, with one an activated request passes blocked recomputes.
    Returns flags."""
    flags = 0
    prev = -1
    q = ranks.wait_head[r]
    while q >= 0 and ranks.run_len[r] < p.max_seqs:
        nxt = req.wait_next[q]
        if req.num_admissions[q] > 0:
            prev = q
        else:
            if prev >= 0:
                # unlink from the middle and put it at the head, where admit_activated pops
                req.wait_next[prev] = nxt
                if nxt < 0:
                    ranks.wait_tail[r] = prev
                ranks.wait_len[r] -= 1
                push_waiting_front(req, ranks, r, q)
            admit_activated(p, req, ranks, stats, log, r, q, t_ms)
            flags |= SCHED_PROGRESS | admission_log_flags(p, log, stats)
        q = nxt
    return flags


@helper
def has_decoder(req, ranks, r):
    if ranks.lazy_count[r] > 0:
        return True
    for k in range(ranks.act_len[r]):
        q = ranks.act_list[r, k]
        if req.num_computed[q] >= req.prompt_len[q]:
            return True
    return False


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
        v = optime_pass.price_prefill(plan, a, b, c, memo.row_ms[slot], memo.row_energy[slot],
                                      memo.row_covered[slot])
    else:
        v = optime_pass.price_decode(plan, a, b, memo.row_ms[slot], memo.row_energy[slot],
                                     memo.row_covered[slot])
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
    """(prefill_ms, decode_ms) of a rank's pass from its batch shape (behaviour.md 4.4)."""
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
            t = float(bs_p * (isl - pfx))
            prefill = 4.209989e-7 * t * t + 1.518344e-2 * t + 16.50142
        if bs_d > 0:
            u = min(1.0, float(sum_ctx) / float(p.num_blocks * p.block_size))
            decode = max(1.0, -25.74 * u * u + 54.01 * u + 5.74)
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
    # P/D: a prefill worker charges no decode time, a decode worker no prefill time (4.5)
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
    prefill, decode = pass_time(p, plan, memo, bs_p, isl, pfx, bs_d, ctx, sum_isl - sum_pfx,
                                sum_ctx)
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
            if p.backend == Backend.TRTLLM:
                flags |= SCHED_TRT_PREEMPT
                break
            preempt_last(p, req, ranks, blocks, stats, pfx_hash, r)
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


@helper
def schedule_rank(p, req, ranks, blocks, stats, log, pfx_hash, plan, memo, r, t_ms, step, mtp):
    """Run one pass's scheduling on rank r at t_ms. Returns (prefill ns, decode ns, flags)."""
    x = ranks.pass_idx[r] + 1
    ranks.pass_idx[r] = x
    defer = False
    if p.prefill_interval > 1 and step % p.prefill_interval != 0:
        if not ranks.capacity_bound[r] and has_decoder(req, ranks, r):
            defer = True
    if ranks.lazy_count[r] > 0:
        lazy.pop_due(req, ranks, r, x)
        ok, _ = lazy.fits_in_full(p, req, ranks, blocks, r, x, p.max_tokens, defer)
        if not ok:
            lazy.flush(req, ranks, r, x)
            ranks.cooldown[r] = lazy.COOLDOWN_PASSES
    if mtp_on(mtp):
        mtp_step.shape_reset(mtp, r)
    budget, flags, preempted = schedule_running(
        p, req, ranks, blocks, stats, pfx_hash, r, p.max_tokens, defer, x, mtp)
    if not preempted and not (flags & SCHED_TRT_PREEMPT):
        budget, aflags = admit_waiting(
            p, req, ranks, blocks, stats, log, pfx_hash, r, t_ms, budget, defer, mtp)
        flags |= aflags
    if not defer and not preempted:
        ranks.capacity_bound[r] = ranks.wait_len[r] > 0
    ranks.deferred[r] = defer
    ranks.preempted[r] = preempted
    if mtp_on(mtp):
        return reserve_and_price_mtp(p, req, ranks, blocks, stats, pfx_hash, mtp, r, plan, memo,
                                     flags)
    prefill_ns, decode_ns = price_rank(p, req, ranks, r, x, plan, memo)
    return prefill_ns, decode_ns, flags


@helper
def emit_rank(p, req, ranks, blocks, stats, pfx_hash, r, t_ms, mtp):
    """Pass end on rank r: every request whose known sequence is computed emits one token (MTP:
    a drafting decoder emits its burst, every token stamped now).

    Completions are retired in running order (closed-loop replacements and KV release order
    depend on it); steady decoders with two or more tokens turn lazy.
    """
    x = ranks.pass_idx[r]
    act_list = ranks.act_list
    sched_tokens = req.sched_tokens
    num_generated = req.num_generated
    num_computed = req.num_computed
    prompt_len = req.prompt_len
    output_len = req.output_len
    first_token = req.first_token_ms
    second_token = req.second_token_ms
    last_token = req.last_token_ms
    gap_run = stats.run
    n_lazy = ranks.lazy_count[r]
    if n_lazy > 0:
        record_gap(stats, t_ms - ranks.last_end_ms[r], n_lazy)
    any_done = False
    for k in range(ranks.due_len[r]):
        q = ranks.due_list[r, k]
        if req.finishing[q]:
            lazy.materialize(req, ranks, r, q, x - req.lazy_base[q], t_ms)
            any_done = True
    ranks.due_len[r] = 0
    may_turn_lazy = not mtp_on(mtp) and p.lazy_decode and ranks.cooldown[r] == 0
    kept = 0
    n_act = ranks.act_len[r]
    for k in range(n_act):
        q = kv.index(act_list[r, k])
        n = sched_tokens[q]
        sched_tokens[q] = 0
        g = num_generated[q]
        activated = req.activated[q]
        if activated:
            req.activated[q] = False
            n = 1
        known = prompt_len[q] + g
        if n > 0 and num_computed[q] == known:
            out_len = output_len[q]
            quiet = req.no_stats[q]
            burst = 1
            if mtp_on(mtp):
                s = req.draft_slots[q]
                if s > 0:
                    req.draft_slots[q] = 0
                    burst = min(mtp_step.burst_tokens(mtp, r, s), out_len - g)
                    # computed stays one short of the known length between passes
                    num_computed[q] = known + burst - 1
                if not activated:  # its tokens fill blocks the burst reservation set aside
                    mtp_step.grow_after_burst(p, req, ranks, blocks, pfx_hash, r, q, known,
                                              burst)
                req.drafting[q] = True
            if g == 0:
                first_token[q] = t_ms
            else:
                gap = t_ms - last_token[q]
                if quiet:
                    pass
                elif gap_run[1] > 0.0 and gap == gap_run[0]:
                    gap_run[1] += 1.0
                else:
                    record_gap(stats, gap, 1)
                if g == 1:
                    second_token[q] = t_ms
            if mtp_on(mtp):
                if burst > 1:
                    if not quiet:
                        gap_run[2] += burst - 1  # a burst's tokens share one timestamp: ITL 0
                    if g == 0:
                        second_token[q] = t_ms
            last_token[q] = t_ms
            g += burst
            num_generated[q] = g
            if g >= out_len:
                req.finishing[q] = True
                any_done = True
                continue
            if g >= 2 and may_turn_lazy and not quiet:  # lazy gaps are all counted
                lazy.make_lazy(p, req, ranks, blocks, r, q, x)
                stats.counters[CNT_LAZY] += 1
                continue
        act_list[r, kept] = q
        kept += 1
    for k in range(kept, n_act):
        act_list[r, k] = -1
    ranks.act_len[r] = kept
    if any_done:
        retire_finished(p, req, ranks, blocks, stats, r, t_ms)
    ranks.last_end_ms[r] = t_ms
    if ranks.cooldown[r] > 0:
        ranks.cooldown[r] -= 1


@helper
def retire_finished(p, req, ranks, blocks, stats, r, t_ms):
    """Drop finishing requests from the running list, in running order."""
    run_list = ranks.run_list
    kept = 0
    n_run = ranks.run_len[r]
    for k in range(n_run):
        q = kv.index(run_list[r, k])
        if req.finishing[q]:
            req.finishing[q] = False
            if p.role == Role.PREFILL:
                # P/D source held: the prompt is done but its KV stays until the transfer
                # releases it; the P/D loop routes it to a decode rank
                req.status[q] = ReqStatus.FINISHED
                req.terminal_ms[q] = t_ms
                ranks.held_list[r, ranks.held_len[r]] = q
                ranks.held_len[r] += 1
                continue
            free_request_kv(p, req, ranks, blocks, r, q)
            req.status[q] = ReqStatus.FINISHED
            req.terminal_ms[q] = t_ms
            spawn_next(p, req, stats, t_ms)
            continue
        run_list[r, kept] = q
        kept += 1
    for k in range(kept, n_run):
        run_list[r, k] = -1
    ranks.run_len[r] = kept
