"""The disaggregated (P/D) event loop: a prefill pool and a decode pool joined by KV transfers
(docs/rules.md 9, the vLLM "source-first" handoff).

Each pool runs the ordinary per-rank pass of kernels/sched.py on its own state (its own
KernelParams with `role` prefill or decode). A request's prompt completes on a prefill rank,
whose KV it keeps ("source held"); it is routed to a decode rank, waits there until that rank
reserves its KV (one reservation per retry), is transferred, then activated at the decode
worker's next pass boundary, and from then on decodes like any running request.

At each distinct event time T, until nothing changes: apply the pass completions at T (in
pass-start order), then the transfer completions, then the arrivals, then the requests whose
tokenization ends by T (kernels/tokenizer.py), then execute the queued handoff actions FIFO.
Then start passes on idle prefill workers with work, then on idle decode workers with work. A
request is released for routing once per round, after the actions and before the pass starts,
and routed in the next round at T: a closed-loop replacement spawned by a completion or an
action is routed after the passes starting at T have started (unlike the aggregated loop), one
spawned by a zero-duration pass a round later still.
"""

import numpy as np

from aisim.kernels import pool_pass, queues, tokenizer
from aisim.kernels._jit import helper, kernel
from aisim.kernels.codes import (
    CNT_PASSES,
    CNT_SPAWNED,
    PASS_STALLED,
    PD_Q_HEAD,
    PD_Q_TAIL,
    PD_RR_DECODE,
    PD_RR_PREFILL,
    PD_XFERS,
    SCHED_LOG_FULL,
    SCHED_TRT_PREEMPT,
    LoadKind,
    PDAction,
    ReqStatus,
    RunResult,
)
from aisim.kernels.pd_handoff import (
    apply_activation,
    apply_release,
    enqueue,
    fifo_pop,
    fifo_push,
    finish_pass_unit,
    never_fits,
    retry,
    retry_stalled,
)
from aisim.kernels.tokstats import flush_gaps


@helper
def _finish_prefill(pd, p, req, ranks, blocks, workers, stats, pfx_hash, mtp, w, t_ms):
    """Prefill pass end: deferred releases, then the completed prompts become source held."""
    while pd.drel_head[w] >= 0:
        q = fifo_pop(pd.plink, pd.drel_head, pd.drel_tail, w)
        apply_release(pd, p, req, ranks, blocks, q, t_ms)
    finish_pass_unit(p, req, ranks, blocks, workers, stats, pfx_hash, mtp, w, t_ms)
    for d in range(p.dp_size):
        r = w * p.dp_size + d
        for k in range(ranks.held_len[r]):
            q = ranks.held_list[r, k]
            ranks.held_list[r, k] = -1
            pd.held_ms[q] = t_ms
            enqueue(pd, PDAction.RESERVE, q)
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
    activations deferred while the pass ran are queued (each applied one retries again). A
    rank whose pass preempted or retired a request moves on to a new capacity generation first.

    Inlined, unlike the prefill pool's: decode passes are ~97% of a P/D run's passes, and an
    out-of-line call copies every array descriptor of its arguments (~90 arrays) per pass."""
    for d in range(p.dp_size):
        r = w * p.dp_size + d
        pd.run_mark[r] = ranks.run_len[r]
        if ranks.in_pass[r] and ranks.preempted[r]:
            pd.cap_gen[r] += 1
    pool_pass.finish_pass(p, req, ranks, blocks, workers, stats, pfx_hash, mtp, w, t_ms)
    for d in range(p.dp_size):
        r = w * p.dp_size + d
        if ranks.run_len[r] < pd.run_mark[r]:
            pd.cap_gen[r] += 1  # a request retired
        retry(pd, p, req, ranks, blocks, pfx_hash, r, t_ms)
    # the deferred activations rejoin the action queue (rank by rank, each rank's in transfer
    # completion order) behind the actions queued so far at t: a prompt that became source
    # held at a prefill pass end earlier in this instant reserves its destination before their
    # blocks become hittable (9 hit blocks, not 15, in golden
    # difftest-pd-reserve-before-deferred-activation)
    for d in range(p.dp_size):
        r = w * p.dp_size + d
        while pd.dact_head[r] >= 0:
            q = fifo_pop(pd.dlink, pd.dact_head, pd.dact_tail, r)
            enqueue(pd, PDAction.ACTIVATE, q)


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
    flags = pool_pass.start_pass(
        p, req, ranks, blocks, workers, stats, log, pfx_hash, plan, memo, mtp, plog, w, t_ms
    )
    if flags & PASS_STALLED:
        workers.busy[w] = False
        workers.num_passes[w] -= 1
        stats.counters[CNT_PASSES] -= 1
        for d in range(p.dp_size):
            ranks.in_pass[w * p.dp_size + d] = False
        flags &= ~PASS_STALLED
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
            if params_p.tok_threads > 0:
                tokenizer.enter(params_p, req_p, workers_p, stats, r // params_p.dp_size, q)
            else:
                queues.push_waiting_back(req_p, ranks_p, r, q)
        elif kind == PDAction.RESERVE:
            r = pd.scalars[PD_RR_DECODE] % n_decode_ranks
            pd.scalars[PD_RR_DECODE] += 1
            req_d.rank[q] = r
            if never_fits(params_d, req_d, q):
                # the request fails when its handoff is asked for; its source KV is freed and,
                # closed loop, a replacement arrives at once (AISimulate: terminal "failed")
                req_p.status[q] = ReqStatus.FAILED
                req_p.terminal_ms[q] = t_ms
                queues.spawn_next(params_p, req_d, stats, q, t_ms)
                enqueue(pd, PDAction.RELEASE, q)
                continue
            fifo_push(pd.dlink, pd.pend_head, pd.pend_tail, r, q)
            ranks_d.dest_pending[r] += 1
            if not workers_d.busy[r // params_d.dp_size]:
                retry(pd, params_d, req_d, ranks_d, blocks_d, dd_hash, r, t_ms)
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
                fifo_push(pd.dlink, pd.dact_head, pd.dact_tail, req_d.rank[q], q)
            else:
                apply_activation(pd, params_d, req_d, ranks_d, blocks_d, dd_hash, q, t_ms)
        else:
            w = req_p.rank[q] // params_p.dp_size
            if workers_p.busy[w]:
                fifo_push(pd.plink, pd.drel_head, pd.drel_tail, w, q)
            else:
                apply_release(pd, params_p, req_p, ranks_p, blocks_p, q, t_ms)


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
    released = stats.counters[CNT_SPAWNED]  # requests the next round may route (by index)
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
        if params_p.tok_threads > 0:
            a = tokenizer.next_ready(req_p, stats)
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
                    enqueue(pd, PDAction.ACTIVATE, q)
                    changed = True
                else:
                    pd.xfer_list[kept] = q
                    kept += 1
            pd.scalars[PD_XFERS] = kept
            # --- arrivals at t, from the second round of the instant on
            while not first_round and routed < released and req_d.arrival_ms[routed] <= t:
                enqueue(pd, PDAction.SUBMIT, routed)
                routed += 1
                changed = True
            # --- tokenizations done by t: into the prefill rank's waiting queue
            if params_p.tok_threads > 0:
                if tokenizer.release_done(req_p, ranks_p, stats, t):
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
        # the requests spawned so far are routed from the next round on; those a zero-duration
        # pass spawns below wait one round more (observed: a replacement of a request a zero
        # prefill pass rejects misses the pass its predecessor's sibling starts)
        released = stats.counters[CNT_SPAWNED]
        # --- start passes: idle prefill workers with work, then idle decode workers. A prefill
        # pass of zero duration (whole-prompt hits only, or a zero prefill time) ends as it
        # starts: its prompts become source held at once and the worker is driven again, all
        # before any decode pass starts; the RESERVEs it queued run in the next round at t
        for w in range(n_wp):
            while not workers_p.busy[w] and pool_pass.worker_has_work(params_p, ranks_p, w):
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
            while not workers_d.busy[w] and pool_pass.worker_has_work(params_d, ranks_d, w):
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
                    if retry_stalled(pd, params_d, req_d, ranks_d, blocks_d, dd_hash, w, t) > 0:
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
