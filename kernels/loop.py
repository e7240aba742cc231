"""The aggregated-mode event loop: every pass of every worker, from the first arrival to the last
terminal request, in one compiled call (docs/rules.md 1, 2.1, 7.1).

At each distinct event time T: finish the passes ending at T (in pass-start order), then route
requests created at or before T (closed-loop replacements first, they have lower indices), then
start a pass on every idle worker that has work. A worker's `attention_data` ranks run in
lock-step: each rank schedules and prices its own batch and the group pass lasts as long as the
slowest participating rank. `mtp` (MtpState or NoMtp) selects native MTP decoding at compile
time (kernels/mtp_step.py).
"""

import numpy as np

from aisim.kernels import emission, invariants, leap, passlog, queues, sched
from aisim.kernels._jit import helper, kernel
from aisim.kernels.codes import (
    CNT_BROKEN,
    CNT_PASSES,
    CNT_PREEMPTIONS,
    CNT_SPAWNED,
    SCHED_LOG_FULL,
    SCHED_PROGRESS,
    SCHED_TRT_PREEMPT,
    LoadKind,
    ReqStatus,
    RunResult,
)
from aisim.kernels.tokstats import flush_gaps
from aisim.kernels.units import phase_ms


@helper
def worker_has_work(p, ranks, w):
    for d in range(p.dp_size):
        r = w * p.dp_size + d
        if ranks.run_len[r] > 0 or ranks.wait_len[r] > 0:
            return True
    return False


@helper
def _start_pass(
    p, req, ranks, blocks, workers, stats, log, pfx_hash, plan, memo, mtp, plog, w, t_ms
):
    """Schedule every rank of worker w with work; returns flags (0 when nothing ran)."""
    dur_max = np.int64(0)
    prefill_max = np.int64(0)
    first_row = plog.count[0]
    flags = 0
    ran = False
    step = workers.step[w]
    for d in range(p.dp_size):
        r = w * p.dp_size + d
        if ranks.run_len[r] == 0 and ranks.wait_len[r] == 0:
            ranks.in_pass[r] = False
            continue
        ranks.in_pass[r] = True
        ran = True
        preempted_before = stats.counters[CNT_PREEMPTIONS]
        prefill_ns, decode_ns, f = sched.schedule_rank(
            p, req, ranks, blocks, stats, log, pfx_hash, plan, memo, r, t_ms, step, mtp
        )
        dur = prefill_ns + decode_ns
        if p.capture_passes:
            passlog.record_rank(
                p, req, ranks, plog, r, w, t_ms, stats.counters[CNT_PREEMPTIONS] - preempted_before
            )
        flags |= f
        if p.check_invariants:
            used = ranks.lazy_count[r]
            for k in range(ranks.act_len[r]):
                used += req.sched_tokens[ranks.act_list[r, k]]
            bad = invariants.check_rank(p, req, ranks, blocks, r, used)
            if bad != 0 and stats.counters[CNT_BROKEN] == 0:
                stats.counters[CNT_BROKEN] = r * 100 + bad
        if dur > dur_max:
            dur_max = dur
            prefill_max = prefill_ns
    if not ran:
        return 0
    workers.busy[w] = True
    workers.pass_start_ms[w] = t_ms
    workers.pass_end_ms[w] = t_ms + phase_ms(prefill_max) + phase_ms(dur_max - prefill_max)
    for d in range(p.dp_size):
        queues.settle_rejections(p, req, ranks, stats, w * p.dp_size + d, workers.pass_end_ms[w])
    workers.busy_ms[w] += dur_max / 1e6
    if p.capture_passes:
        passlog.close_pass(plog, first_row, workers.pass_end_ms[w])
    workers.num_passes[w] += 1
    stats.counters[CNT_PASSES] += 1
    if dur_max == 0 and not (flags & SCHED_PROGRESS):
        return flags | 1 << 8  # stalled marker
    return flags | 1 << 9  # started marker


@helper
def _finish_pass(p, req, ranks, blocks, workers, stats, pfx_hash, mtp, w, t_ms):
    empty = True
    for d in range(p.dp_size):
        r = w * p.dp_size + d
        if ranks.in_pass[r]:
            if ranks.rej_head[r] >= 0:
                queues.spawn_rejected(p, req, ranks, stats, r, t_ms)
            emission.emit_rank(p, req, ranks, blocks, stats, pfx_hash, r, t_ms, mtp)
            ranks.in_pass[r] = False
            if p.check_invariants:
                bad = invariants.check_rank(p, req, ranks, blocks, r, 0)
                if bad != 0 and stats.counters[CNT_BROKEN] == 0:
                    stats.counters[CNT_BROKEN] = r * 100 + bad
        if ranks.run_len[r] > 0 or ranks.wait_len[r] > 0:
            empty = False
    workers.busy[w] = False
    if empty:
        workers.step[w] = 0
    else:
        workers.step[w] += 1


@kernel
def _end_pass(p, req, ranks, blocks, workers, stats, pfx_hash, mtp, w, t_ms):
    """`_finish_pass` out of line, for a pass of zero duration (rare): one inlined copy in the
    event loop keeps its compile size."""
    _finish_pass(p, req, ranks, blocks, workers, stats, pfx_hash, mtp, w, t_ms)


@kernel
def run_aggregated(p, req, ranks, blocks, workers, stats, log, pfx_hash, plan, memo, mtp, plog):
    """Advance the whole simulation. Returns (RunResult code, detail index)."""
    n_req = req.prompt_len.shape[0]
    n_workers = p.num_workers
    rr_rank = workers.rr_rank
    rr_worker = 0
    routed = 0
    if p.load_kind == LoadKind.CONCURRENCY:
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
            elif workers.ready_ms[w] > t and worker_has_work(p, ranks, w):
                if workers.ready_ms[w] < t_next:
                    t_next = workers.ready_ms[w]
        if routed < stats.counters[CNT_SPAWNED]:
            a = req.arrival_ms[routed]
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
            _finish_pass(p, req, ranks, blocks, workers, stats, pfx_hash, mtp, np.int64(best), t)
            if stats.counters[CNT_BROKEN] != 0:
                return RunResult.INVARIANT, stats.counters[CNT_BROKEN]
        # --- route every request that exists by now (round robin over workers, then ranks)
        while routed < stats.counters[CNT_SPAWNED] and req.arrival_ms[routed] <= t:
            w = rr_worker % n_workers
            rr_worker += 1
            d = rr_rank[w] % p.dp_size
            rr_rank[w] += 1
            r = w * p.dp_size + d
            req.rank[routed] = r
            req.status[routed] = ReqStatus.WAITING
            queues.push_waiting_back(req, ranks, r, routed)
            routed += 1
        # --- start passes on idle, ready workers with work. A pass of zero duration ends as it
        # starts and the worker is driven again at once, before the requests it completed are
        # replaced (their replacements are routed in the next round at t, docs/rules.md 1.3)
        for w in range(n_workers):
            while not workers.busy[w] and workers.ready_ms[w] <= t:
                if not worker_has_work(p, ranks, w):
                    break
                flags = _start_pass(
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
                if flags & (1 << 8):
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
            t = leap.run(p, req, ranks, workers, stats, plan, memo, t, a)
    flush_gaps(stats)
    return RunResult.OK, -1
