"""The disaggregated (P/D) event loop: a prefill pool and a decode pool joined by KV transfers
(docs/rules.md 9, the vLLM "source-first" handoff).

Each pool runs the ordinary per-rank pass of kernels/sched.py on its own state (its own
KernelParams with `role` prefill or decode). A request's prompt completes on a prefill rank,
whose KV it keeps ("source held"); it is routed to a decode rank, waits there until that rank
reserves its KV (one reservation per retry), is transferred, then activated at the decode
worker's next pass boundary, and from then on decodes like any running request.

At each distinct event time T, until nothing changes: apply the pass completions at T (in
pass-start order), then the transfer completions, then the arrivals, then execute the queued
handoff actions FIFO. Then start passes on idle prefill workers with work, then on idle decode
workers with work. Closed-loop replacements spawned while T is processed are routed after
those pass starts, in a second round at T (unlike the aggregated loop).
"""

import numpy as np

from aisim.kernels import kv_blocks as kv
from aisim.kernels import loop, queues, running
from aisim.kernels._jit import helper, kernel
from aisim.kernels.codes import (
    CNT_PASSES,
    CNT_SPAWNED,
    PD_Q_HEAD,
    PD_Q_TAIL,
    PD_RESERVATIONS,
    PD_RR_DECODE,
    PD_RR_PREFILL,
    PD_XFERS,
    SCHED_LOG_FULL,
    SCHED_TRT_PREEMPT,
    Backend,
    LoadKind,
    PDAction,
    ReqStatus,
    RunResult,
)
from aisim.kernels.tokstats import flush_gaps
from aisim.kernels.units import ceil_div


@helper
def _enqueue(pd, kind, q):
    cap = pd.act_kind.shape[0]
    tail = pd.scalars[PD_Q_TAIL]
    pd.act_kind[tail % cap] = kind
    pd.act_req[tail % cap] = q
    pd.scalars[PD_Q_TAIL] = tail + 1


@helper
def _fifo_push(link, heads, tails, k, q):
    link[q] = -1
    t = tails[k]
    if t >= 0:
        link[t] = q
    else:
        heads[k] = q
    tails[k] = q


@helper
def _fifo_pop(link, heads, tails, k):
    q = heads[k]
    nxt = link[q]
    heads[k] = nxt
    if nxt < 0:
        tails[k] = -1
    link[q] = -1
    return q


@helper
def _queue_by_reservation(pd, req, ranks, r, q):
    """Put activated q in decode rank r's waiting queue, before the first entry reserved after
    it, a recompute included (observed on both backends: a request reserved earlier but
    transferred later is still admitted first; a recompute stays ahead only of requests
    reserved after it). The queue is not sorted (recomputes return to its front), so the scan
    starts at the head; it runs once per activation, not per pass."""
    prev = -1
    nxt = ranks.wait_head[r]
    while nxt >= 0 and pd.reserve_seq[nxt] < pd.reserve_seq[q]:
        prev = nxt
        nxt = req.wait_next[nxt]
    if nxt < 0:
        queues.push_waiting_back(req, ranks, r, q)
        return
    req.wait_next[q] = nxt
    if prev >= 0:
        req.wait_next[prev] = q
    else:
        ranks.wait_head[r] = q
    ranks.wait_len[r] += 1


@helper
def _activated_outstanding(p, req, ranks, blocks, r):
    """TRT-LLM: blocks activated-but-not-yet-running destinations still need to complete."""
    total = 0
    q = ranks.wait_head[r]
    while q >= 0:
        if req.num_admissions[q] == 0:
            full = ceil_div(req.prompt_len[q] + req.output_len[q], p.block_size)
            total += full - blocks.slot_nblk[req.slot[q]]
        q = req.wait_next[q]
    return total


@helper
def _try_reserve(pd, p, req, ranks, blocks, pfx_hash, r, t_ms):
    """One retry on decode rank r (`_retry` checks first that one is pending and a running slot
    is free): reserve KV for the head pending destination if it fits.

    vLLM: the prompt's blocks (less active prefix hits) must fit in the free blocks. A
    destination that did not fit is tried again only once the rank's capacity generation has
    moved on (a request retired or was preempted there), whatever prefix blocks other
    destinations have materialised meanwhile; every try probes the prefix afresh. TRT-LLM
    reserves to completion: ceil((P + O) / bs) must fit beside what running and reserved
    requests still need; it takes only the prompt blocks and no prefix credit (docs/rules.md 9.3).
    """
    q = pd.pend_head[r]
    bs = p.block_size
    prompt = req.prompt_len[q]
    prompt_blocks = ceil_div(prompt, bs)
    hits = 0
    if p.backend == Backend.TRTLLM:
        full = ceil_div(prompt + req.output_len[q], bs)
        avail = (
            kv.num_free(ranks, r)
            - running.trt_outstanding(p, req, blocks, ranks, r)
            - pd.trt_need[r]
            - _activated_outstanding(p, req, ranks, blocks, r)
        )
        if full > avail:
            return
    else:
        if pd.tried_gen[q] == pd.cap_gen[r]:
            return  # tried and failed at this capacity generation
        # the destination computes no prompt token: a fully cached block-aligned prompt needs
        # no transfer at all (observed, tests/golden/pd-dest-full-hit)
        hits, active = kv.probe_prefix(
            req, blocks, pfx_hash, q, r, prompt, bs, p.prefix_caching, True
        )
        if prompt_blocks - active > kv.num_free(ranks, r):
            pd.tried_gen[q] = pd.cap_gen[r]
            return
    _fifo_pop(pd.dlink, pd.pend_head, pd.pend_tail, r)
    ranks.dest_pending[r] -= 1
    top = ranks.slot_top[r] - 1
    slot = blocks.slot_stack[r * ranks.run_list.shape[1] + top]
    ranks.slot_top[r] = top
    req.slot[q] = slot
    kv.attach_hits(req, ranks, blocks, pfx_hash, q, r, slot, hits)
    kv.grow_slot(ranks, blocks, r, slot, prompt_blocks, p.num_blocks)
    if p.backend == Backend.TRTLLM:
        pd.trt_need[r] += ceil_div(prompt + req.output_len[q], bs) - prompt_blocks
    # observed: a destination-side hit shortens the transfer but is not reported as reuse
    pd.reserved_ms[q] = t_ms
    pd.reserve_seq[q] = pd.scalars[PD_RESERVATIONS]
    pd.scalars[PD_RESERVATIONS] += 1
    pd.xfer_tokens[q] = (prompt_blocks - hits) * bs
    _enqueue(pd, PDAction.START_TRANSFER, q)


@helper
def _apply_activation(pd, p, req, ranks, blocks, pfx_hash, q, t_ms):
    r = req.rank[q]
    pd.activated_ms[q] = t_ms
    if p.prefix_caching:
        # the transferred blocks become hittable once the request is activated (observed:
        # destinations reserved at the same instant do not hit each other's prompt blocks)
        kv.register_full_blocks(
            req, blocks, pfx_hash, q, r, req.slot[q], req.prompt_len[q], p.block_size
        )
    req.status[q] = ReqStatus.WAITING
    _queue_by_reservation(pd, req, ranks, r, q)
    if p.backend == Backend.TRTLLM:
        # from now on its remaining need is counted through the running list once admitted
        pd.trt_need[r] -= ceil_div(req.prompt_len[q] + req.output_len[q], p.block_size) - ceil_div(
            req.prompt_len[q], p.block_size
        )
    _retry(pd, p, req, ranks, blocks, pfx_hash, r, t_ms)
    # the source is released once the destination holds the request (observed: a release
    # never precedes its activation, even on an idle prefill worker)
    _enqueue(pd, PDAction.RELEASE, q)


@helper
def _apply_release(pd, p, req, ranks, blocks, q, t_ms):
    queues.free_request_kv(p, req, ranks, blocks, req.rank[q], q)
    if req.status[q] != ReqStatus.FAILED:  # a failed handoff reports no release
        pd.released_ms[q] = t_ms


@helper
def _never_fits(p, req, q):
    """Whether decode pool p could never hold request q's handoff, even empty (observed:
    vLLM needs the prompt's blocks, TRT-LLM the prompt's and the first token's), or its
    prompt reaches the pool's own context limit (a decode-only context_length)."""
    tokens = req.prompt_len[q] + (1 if p.backend == Backend.TRTLLM else 0)
    return ceil_div(tokens, p.block_size) > p.num_blocks or req.prompt_len[q] >= p.max_model_len


@kernel
def _finish_pass_unit(p, req, ranks, blocks, workers, stats, pfx_hash, mtp, w, t_ms):
    loop._finish_pass(p, req, ranks, blocks, workers, stats, pfx_hash, mtp, w, t_ms)


@kernel
def _try_reserve_unit(pd, p, req, ranks, blocks, pfx_hash, r, t_ms):
    """Out of line: its four call sites would each inline the prefix probe and block growth."""
    _try_reserve(pd, p, req, ranks, blocks, pfx_hash, r, t_ms)


@helper
def _retry(pd, p, req, ranks, blocks, pfx_hash, r, t_ms):
    """A reservation retry on decode rank r; most pass ends have nothing pending, and the
    out-of-line call copies every array descriptor of its arguments."""
    if ranks.dest_pending[r] > 0 and ranks.run_len[r] < p.max_seqs:
        _try_reserve_unit(pd, p, req, ranks, blocks, pfx_hash, r, t_ms)


@helper
def _retry_stalled(pd, p, req, ranks, blocks, pfx_hash, w, t_ms):
    """A decode pass that could do nothing (its recomputes wait behind pending destinations):
    AISimulate runs it with zero duration and its end retries a reservation on each rank, then
    a new pass starts at once (observed: tests/golden/pd-decode-preempt-c12-b30 reserves five
    destinations in one instant). When nothing is reserved the worker stays idle until a
    transfer or activation changes its state; if nothing ever does, the run ends stuck and
    the caller reports it (AISimulate: "effect-free zero-duration pass"). Returns how many
    destinations were reserved."""
    before = 0
    after = 0
    for d in range(p.dp_size):
        r = w * p.dp_size + d
        before += ranks.dest_pending[r]
        _retry(pd, p, req, ranks, blocks, pfx_hash, r, t_ms)
        after += ranks.dest_pending[r]
    return before - after


@helper
def _finish_prefill(pd, p, req, ranks, blocks, workers, stats, pfx_hash, mtp, w, t_ms):
    """Prefill pass end: deferred releases, then the completed prompts become source held."""
    while pd.drel_head[w] >= 0:
        q = _fifo_pop(pd.plink, pd.drel_head, pd.drel_tail, w)
        _apply_release(pd, p, req, ranks, blocks, q, t_ms)
    _finish_pass_unit(p, req, ranks, blocks, workers, stats, pfx_hash, mtp, w, t_ms)
    for d in range(p.dp_size):
        r = w * p.dp_size + d
        for k in range(ranks.held_len[r]):
            q = ranks.held_list[r, k]
            ranks.held_list[r, k] = -1
            pd.held_ms[q] = t_ms
            _enqueue(pd, PDAction.RESERVE, q)
        ranks.held_len[r] = 0


@kernel
def _end_prefill_pass(pd, p, req, ranks, blocks, workers, stats, pfx_hash, mtp, w, t_ms):
    """`_finish_prefill` out of line: the event loop ends prefill passes at two sites (a pass
    end at t, and a zero-duration pass as it starts), and one inlined copy keeps the P/D
    kernel's compile time and memory down; prefill passes are a small share of the passes."""
    _finish_prefill(pd, p, req, ranks, blocks, workers, stats, pfx_hash, mtp, w, t_ms)


@helper
def _finish_decode(pd, p, req, ranks, blocks, workers, stats, pfx_hash, mtp, w, t_ms):
    """Decode pass end: tokens and retirements, a reservation retry per rank, then the
    activations deferred while the pass ran (each applied one retries again). A rank whose
    pass preempted or retired a request moves on to a new capacity generation first.

    Inlined, unlike the prefill pool's: decode passes are ~97% of a P/D run's passes, and an
    out-of-line call copies every array descriptor of its arguments (~90 arrays) per pass."""
    for d in range(p.dp_size):
        r = w * p.dp_size + d
        pd.run_mark[r] = ranks.run_len[r]
        if ranks.in_pass[r] and ranks.preempted[r]:
            pd.cap_gen[r] += 1
    loop._finish_pass(p, req, ranks, blocks, workers, stats, pfx_hash, mtp, w, t_ms)
    for d in range(p.dp_size):
        r = w * p.dp_size + d
        if ranks.run_len[r] < pd.run_mark[r]:
            pd.cap_gen[r] += 1  # a request retired
        _retry(pd, p, req, ranks, blocks, pfx_hash, r, t_ms)
    for d in range(p.dp_size):
        r = w * p.dp_size + d
        while pd.dact_head[r] >= 0:
            q = _fifo_pop(pd.dlink, pd.dact_head, pd.dact_tail, r)
            _apply_activation(pd, p, req, ranks, blocks, pfx_hash, q, t_ms)


@kernel
def _end_zero_decode_pass(pd, p, req, ranks, blocks, workers, stats, pfx_hash, mtp, w, t_ms):
    """`_finish_decode` out of line, for a decode pass of zero duration (rare): the inlined copy
    serves the pass ends of the event loop."""
    _finish_decode(pd, p, req, ranks, blocks, workers, stats, pfx_hash, mtp, w, t_ms)


@kernel
def _start_worker(
    p, req, ranks, blocks, workers, stats, log, pfx_hash, plan, memo, mtp, plog, w, t_ms
):
    """`_start_pass_or_idle` out of line, for the prefill pool (a small share of the passes)."""
    return _start_pass_or_idle(
        p, req, ranks, blocks, workers, stats, log, pfx_hash, plan, memo, mtp, plog, w, t_ms
    )


@helper
def _start_pass_or_idle(
    p, req, ranks, blocks, workers, stats, log, pfx_hash, plan, memo, mtp, plog, w, t_ms
):
    """Start a pass on an idle worker with work. Returns loop flags; a pass that could do
    nothing (every waiting prompt blocked on held KV) is taken back: the worker stays idle
    until a release or completion changes its capacity.

    Inlined for the decode pool: decode passes are ~97% of a P/D run's passes, and an
    out-of-line call copies every array descriptor of its arguments (~190 arrays) per pass."""
    flags = loop._start_pass(
        p, req, ranks, blocks, workers, stats, log, pfx_hash, plan, memo, mtp, plog, w, t_ms
    )
    if flags & (1 << 8):
        workers.busy[w] = False
        workers.num_passes[w] -= 1
        stats.counters[CNT_PASSES] -= 1
        for d in range(p.dp_size):
            ranks.in_pass[w * p.dp_size + d] = False
        flags &= ~(1 << 8)
    return flags


@helper
def _execute_actions(
    pd,
    transfer,
    stats,
    params_p,
    req_p,
    ranks_p,
    blocks_p,
    workers_p,
    pd_hash,
    params_d,
    req_d,
    ranks_d,
    blocks_d,
    workers_d,
    dd_hash,
    t_ms,
):
    """Run the queued handoff actions FIFO (actions may queue more)."""
    cap = pd.act_kind.shape[0]
    n_prefill_ranks = params_p.num_workers * params_p.dp_size
    n_decode_ranks = params_d.num_workers * params_d.dp_size
    while pd.scalars[PD_Q_HEAD] < pd.scalars[PD_Q_TAIL]:
        h = pd.scalars[PD_Q_HEAD]
        kind = pd.act_kind[h % cap]
        q = pd.act_req[h % cap]
        pd.scalars[PD_Q_HEAD] = h + 1
        if kind == PDAction.SUBMIT:
            r = pd.scalars[PD_RR_PREFILL] % n_prefill_ranks
            pd.scalars[PD_RR_PREFILL] += 1
            req_p.rank[q] = r
            req_p.status[q] = ReqStatus.WAITING
            queues.push_waiting_back(req_p, ranks_p, r, q)
        elif kind == PDAction.RESERVE:
            r = pd.scalars[PD_RR_DECODE] % n_decode_ranks
            pd.scalars[PD_RR_DECODE] += 1
            req_d.rank[q] = r
            if _never_fits(params_d, req_d, q):
                # the request fails when its handoff is asked for; its source KV is freed and,
                # closed loop, a replacement arrives at once (AISimulate: terminal "failed")
                req_p.status[q] = ReqStatus.FAILED
                req_p.terminal_ms[q] = t_ms
                queues.spawn_next(params_p, req_d, stats, t_ms)
                _enqueue(pd, PDAction.RELEASE, q)
                continue
            _fifo_push(pd.dlink, pd.pend_head, pd.pend_tail, r, q)
            ranks_d.dest_pending[r] += 1
            if not workers_d.busy[r // params_d.dp_size]:
                _retry(pd, params_d, req_d, ranks_d, blocks_d, dd_hash, r, t_ms)
        elif kind == PDAction.START_TRANSFER:
            delay = 0.0
            if transfer.bandwidth_gb_s > 0.0:
                tokens = req_d.prompt_len[q] if transfer.full_prompt else pd.xfer_tokens[q]
                delay = tokens * transfer.bytes_per_token / (transfer.bandwidth_gb_s * 1e9) * 1000.0
            pd.xfer_end_ms[q] = t_ms + delay
            n = pd.scalars[PD_XFERS]
            pd.xfer_list[n] = q
            pd.scalars[PD_XFERS] = n + 1
        elif kind == PDAction.ACTIVATE:
            w = req_d.rank[q] // params_d.dp_size
            if workers_d.busy[w]:
                # applied at the pass end rank by rank, each rank's in this (transfer completion)
                # order: it decides whose prompt blocks are cached first, so which copy of a
                # shared prefix later probes take, and the order of the source releases
                _fifo_push(pd.dlink, pd.dact_head, pd.dact_tail, req_d.rank[q], q)
            else:
                _apply_activation(pd, params_d, req_d, ranks_d, blocks_d, dd_hash, q, t_ms)
        else:
            w = req_p.rank[q] // params_p.dp_size
            if workers_p.busy[w]:
                _fifo_push(pd.plink, pd.drel_head, pd.drel_tail, w, q)
            else:
                _apply_release(pd, params_p, req_p, ranks_p, blocks_p, q, t_ms)


@kernel
def run_disaggregated(
    pd,
    transfer,
    stats,
    log,
    mtp,
    plog,
    params_p,
    req_p,
    ranks_p,
    blocks_p,
    workers_p,
    pd_hash,
    plan_p,
    memo_p,
    params_d,
    req_d,
    ranks_d,
    blocks_d,
    workers_d,
    dd_hash,
    plan_d,
    memo_d,
):
    """Advance the whole P/D simulation. Returns (RunResult code, detail).

    req_p and req_d share prompt_len and arrival_ms; req_p's output length is 1 (the prefill
    side's internal token), req_d's the real one. stats (gaps, counters) is shared. `mtp` is
    the NoMtp placeholder (MTP in P/D is not available yet).
    """
    n_req = req_d.prompt_len.shape[0]
    if params_p.load_kind == LoadKind.CONCURRENCY:
        first = min(params_p.concurrency, n_req)
        for k in range(first):
            req_d.arrival_ms[k] = 0.0
        stats.counters[CNT_SPAWNED] = first
    else:
        stats.counters[CNT_SPAWNED] = n_req
    n_wp = params_p.num_workers
    n_wd = params_d.num_workers
    routed = 0
    t = 0.0
    again = False  # work queued at t (a stalled decode pass reserved, a zero prefill pass ended)
    visited = False  # the loop has processed an instant (the first round of t routes nothing)
    while True:
        t_next = np.inf
        for w in range(n_wp):
            if workers_p.busy[w] and workers_p.pass_end_ms[w] < t_next:
                t_next = workers_p.pass_end_ms[w]
        for w in range(n_wd):
            if workers_d.busy[w] and workers_d.pass_end_ms[w] < t_next:
                t_next = workers_d.pass_end_ms[w]
        for k in range(pd.scalars[PD_XFERS]):
            e = pd.xfer_end_ms[pd.xfer_list[k]]
            if e < t_next:
                t_next = e
        if routed < stats.counters[CNT_SPAWNED]:
            a = req_d.arrival_ms[routed]
            if a < t_next:
                t_next = a if a > t else t
        if again:
            t_next = t
            again = False
        if t_next == np.inf:
            break
        if t_next > params_d.max_time_ms:
            break  # soft cut-off: passes and transfers in flight never end
        # a request arriving at t (open loop, or a closed-loop replacement spawned while t is
        # processed) is routed only after the passes starting at t have started (observed: a
        # prefill worker whose pass ends at t starts its next pass without it); the first round
        # of an instant routes nothing new, and the loop comes back to t for the arrivals
        first_round = not visited or t_next > t
        visited = True
        t = t_next
        spawned_before = stats.counters[CNT_SPAWNED]
        while True:
            changed = False
            # --- pass completions at t, in pass-start order (prefill before decode on ties)
            while True:
                best = -1
                best_start = np.inf
                for w in range(n_wp):
                    if workers_p.busy[w] and workers_p.pass_end_ms[w] <= t:
                        if workers_p.pass_start_ms[w] < best_start:
                            best = w
                            best_start = workers_p.pass_start_ms[w]
                for w in range(n_wd):
                    if workers_d.busy[w] and workers_d.pass_end_ms[w] <= t:
                        if workers_d.pass_start_ms[w] < best_start:
                            best = n_wp + w
                            best_start = workers_d.pass_start_ms[w]
                if best < 0:
                    break
                changed = True
                if best < n_wp:
                    _end_prefill_pass(
                        pd,
                        params_p,
                        req_p,
                        ranks_p,
                        blocks_p,
                        workers_p,
                        stats,
                        pd_hash,
                        mtp,
                        np.int64(best),
                        t,
                    )
                else:
                    _finish_decode(
                        pd,
                        params_d,
                        req_d,
                        ranks_d,
                        blocks_d,
                        workers_d,
                        stats,
                        dd_hash,
                        mtp,
                        np.int64(best - n_wp),
                        t,
                    )
            # --- transfer completions at t, in start order
            n = pd.scalars[PD_XFERS]
            kept = 0
            for k in range(n):
                q = pd.xfer_list[k]
                if pd.xfer_end_ms[q] <= t:
                    _enqueue(pd, PDAction.ACTIVATE, q)
                    changed = True
                else:
                    pd.xfer_list[kept] = q
                    kept += 1
            pd.scalars[PD_XFERS] = kept
            # --- arrivals at t, from the second round of the instant on
            while not first_round and routed < spawned_before and req_d.arrival_ms[routed] <= t:
                _enqueue(pd, PDAction.SUBMIT, routed)
                routed += 1
                changed = True
            # most instants (a decode pass end with no handoff) queue nothing
            if pd.scalars[PD_Q_HEAD] < pd.scalars[PD_Q_TAIL]:
                _execute_actions(
                    pd,
                    transfer,
                    stats,
                    params_p,
                    req_p,
                    ranks_p,
                    blocks_p,
                    workers_p,
                    pd_hash,
                    params_d,
                    req_d,
                    ranks_d,
                    blocks_d,
                    workers_d,
                    dd_hash,
                    t,
                )
                changed = True
            if not changed:
                break
        # --- start passes: idle prefill workers with work, then idle decode workers. A prefill
        # pass of zero duration (whole-prompt hits only, or a zero prefill time) ends as it
        # starts: its prompts become source held at once and the worker is driven again, all
        # before any decode pass starts; the RESERVEs it queued run in the next round at t
        for w in range(n_wp):
            while not workers_p.busy[w] and loop.worker_has_work(params_p, ranks_p, w):
                flags = _start_worker(
                    params_p,
                    req_p,
                    ranks_p,
                    blocks_p,
                    workers_p,
                    stats,
                    log,
                    pd_hash,
                    plan_p,
                    memo_p,
                    mtp,
                    plog,
                    w,
                    t,
                )
                if flags & SCHED_TRT_PREEMPT:
                    return RunResult.TRT_PREEMPTION, w
                if flags & SCHED_LOG_FULL:
                    return RunResult.LOG_FULL, w
                if not workers_p.busy[w] or workers_p.pass_end_ms[w] > t:
                    break
                _end_prefill_pass(
                    pd,
                    params_p,
                    req_p,
                    ranks_p,
                    blocks_p,
                    workers_p,
                    stats,
                    pd_hash,
                    mtp,
                    np.int64(w),
                    t,
                )
                again = True
        # A decode pass of zero duration ends as it starts and the worker is driven again at
        # once: the requests it completes are replaced, and the handoffs its end reserved are
        # started, only in the next round at t (observed: a chain of zero decode passes runs
        # through before the prefill pool admits the replacements; docs/rules.md 9.2)
        for w in range(n_wd):
            while not workers_d.busy[w] and loop.worker_has_work(params_d, ranks_d, w):
                flags = _start_pass_or_idle(
                    params_d,
                    req_d,
                    ranks_d,
                    blocks_d,
                    workers_d,
                    stats,
                    log,
                    dd_hash,
                    plan_d,
                    memo_d,
                    mtp,
                    plog,
                    w,
                    t,
                )
                if flags & SCHED_TRT_PREEMPT:
                    return RunResult.TRT_PREEMPTION, n_wp + w
                if flags & SCHED_LOG_FULL:
                    return RunResult.LOG_FULL, n_wp + w
                if not workers_d.busy[w]:
                    if _retry_stalled(pd, params_d, req_d, ranks_d, blocks_d, dd_hash, w, t) > 0:
                        again = True  # run the reservation's transfer start, then start again
                    break
                if workers_d.pass_end_ms[w] > t:
                    break
                _end_zero_decode_pass(
                    pd,
                    params_d,
                    req_d,
                    ranks_d,
                    blocks_d,
                    workers_d,
                    stats,
                    dd_hash,
                    mtp,
                    np.int64(w),
                    t,
                )
                again = True
    flush_gaps(stats)
    return RunResult.OK, -1
