"""The aggregated-mode event loop: every pass of every worker, from the first arrival to the last
terminal request, in one compiled call (docs/rules.md 1, 2.1, 7.1).

At each distinct event time T: finish the passes ending at T (in pass-start order), then route
requests created at or before T (closed-loop replacements first, they have lower indices;
session turns in (arrival, index) order, kernels/sessions.py), then
queue the requests whose tokenization ends by T (kernels/tokenizer.py; with no tokenizer a
routed request is queued at once), then start a pass on every idle worker that has work. A
worker's `attention_data` ranks run in lock-step (kernels/pool_pass.py): each rank schedules
and prices its own batch and the group pass lasts as long as the slowest participating rank.
`mtp` (MtpState or NoMtp) selects native MTP decoding at compile time (kernels/mtp_step.py).
"""

import numpy as np

from aisim.kernels import leap, pool_pass, queues, sessions, tokenizer
from aisim.kernels._jit import kernel
from aisim.kernels.codes import (
    CNT_BROKEN,
    CNT_SPAWNED,
    PASS_STALLED,
    SCHED_LOG_FULL,
    SCHED_TRT_PREEMPT,
    LoadKind,
    ReqStatus,
    RunResult,
)
from aisim.kernels.tokstats import flush_gaps


@kernel
def _end_pass(p, req, ranks, blocks, workers, stats, pfx_hash, mtp, w, t_ms):
    """`pool_pass.finish_pass` out of line, for a pass of zero duration (rare): one inlined copy
    in the event loop keeps its compile size."""
    pool_pass.finish_pass(p, req, ranks, blocks, workers, stats, pfx_hash, mtp, w, t_ms)


@kernel
def run_aggregated(p, req, ranks, blocks, workers, stats, log, pfx_hash, plan, memo, mtp, plog):
    """Advance the whole simulation. Returns (RunResult code, detail index)."""
    n_req = req.prompt_len.shape[0]
    n_workers = p.num_workers
    rr_rank = workers.rr_rank
    rr_worker = 0
    routed = 0
    if p.sessions:
        stats.counters[CNT_SPAWNED] = 0  # every turn arrives through the session heap
        sessions.start(p, req, stats)
    elif p.load_kind == LoadKind.CONCURRENCY:
        first = min(p.concurrency, n_req)
        for k in range(first):
            req.arrival_ms[k] = 0.0
        stats.counters[CNT_SPAWNED] = first
    else:
        stats.counters[CNT_SPAWNED] = n_req
    t = 0.0
    leaps = leap.usable(p)
    while True:
        # --- next event time
        t_next = np.inf
        for w in range(n_workers):
            if workers.busy[w]:
                if workers.pass_end_ms[w] < t_next:
                    t_next = workers.pass_end_ms[w]
            elif workers.ready_ms[w] > t and pool_pass.worker_has_work(p, ranks, w):
                if workers.ready_ms[w] < t_next:
                    t_next = workers.ready_ms[w]
        if routed < stats.counters[CNT_SPAWNED]:
            a = req.arrival_ms[routed]
            if a < t_next:
                t_next = a if a > t else t
        if p.sessions:
            a = sessions.next_arrival(req, stats)
            if a < t_next:
                t_next = a if a > t else t
        if p.tok_threads > 0:
            a = tokenizer.next_ready(req, stats)
            if a < t_next:
                t_next = a if a > t else t
        if t_next == np.inf:
            break
        if t_next > p.max_time_ms:
            break  # soft cut-off: passes still in flight never end; their requests stay open
        t = t_next
        # --- pass completions at t, in pass-start order
        while True:
            best = -1
            for w in range(n_workers):
                if workers.busy[w] and workers.pass_end_ms[w] <= t:
                    if best < 0 or workers.pass_start_ms[w] < workers.pass_start_ms[best]:
                        best = w
            if best < 0:
                break
            pool_pass.finish_pass(
                p, req, ranks, blocks, workers, stats, pfx_hash, mtp, np.int64(best), t
            )
            if stats.counters[CNT_BROKEN] != 0:
                return RunResult.INVARIANT, stats.counters[CNT_BROKEN]
        # --- route every request that exists by now (round robin over workers, then ranks)
        while True:
            if routed < stats.counters[CNT_SPAWNED] and req.arrival_ms[routed] <= t:
                q = routed
                routed += 1
            elif p.sessions and sessions.next_arrival(req, stats) <= t:
                q = sessions.pop(req, stats)
            else:
                break
            w = rr_worker % n_workers
            rr_worker += 1
            d = rr_rank[w] % p.dp_size
            rr_rank[w] += 1
            r = w * p.dp_size + d
            req.rank[q] = r
            req.status[q] = ReqStatus.WAITING
            if p.tok_threads > 0:
                tokenizer.enter(p, req, workers, stats, w, q)
            else:
                queues.push_waiting_back(req, ranks, r, q)
        # --- requests whose tokenization is done by now join their rank's waiting queue
        if p.tok_threads > 0:
            tokenizer.release_done(req, ranks, stats, t)
        # --- start passes on idle, ready workers with work. A pass of zero duration ends as it
        # starts and the worker is driven again at once, before the requests it completed are
        # replaced (their replacements are routed in the next round at t, docs/rules.md 1.3)
        for w in range(n_workers):
            while not workers.busy[w] and workers.ready_ms[w] <= t:
                if not pool_pass.worker_has_work(p, ranks, w):
                    break
                flags = pool_pass.start_pass(
                    p,
                    req,
                    ranks,
                    blocks,
                    workers,
                    stats,
                    log,
                    pfx_hash,
                    plan,
                    memo,
                    mtp,
                    plog,
                    w,
                    t,
                )
                if stats.counters[CNT_BROKEN] != 0:
                    return RunResult.INVARIANT, stats.counters[CNT_BROKEN]
                if flags & SCHED_TRT_PREEMPT:
                    return RunResult.TRT_PREEMPTION, w
                if flags & SCHED_LOG_FULL:
                    return RunResult.LOG_FULL, w
                if flags & PASS_STALLED:
                    return RunResult.STALLED, w
                if workers.pass_end_ms[w] > t:
                    break
                _end_pass(p, req, ranks, blocks, workers, stats, pfx_hash, mtp, np.int64(w), t)
                if stats.counters[CNT_BROKEN] != 0:
                    return RunResult.INVARIANT, stats.counters[CNT_BROKEN]
        if leaps:
            a = np.inf
            if routed < stats.counters[CNT_SPAWNED]:
                a = req.arrival_ms[routed]
            if p.sessions:
                a = min(a, sessions.next_arrival(req, stats))
            if p.tok_threads > 0:
                a = min(a, tokenizer.next_ready(req, stats))
            t = leap.run(p, req, ranks, workers, stats, plan, memo, t, a)
    flush_gaps(stats)
    return RunResult.OK, -1
