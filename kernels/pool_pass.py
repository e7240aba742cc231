"""One pool's worker pass, as both event loops run it (kernels/loop.py for one pool,
kernels/loop_pd.py for a prefill and a decode pool joined by the KV handoff): every rank of the
worker schedules and prices its batch (kernels/sched.py) at the pass start, and emits its tokens
(kernels/emission.py) at the pass end. The loops differ only in the order of one instant's
events (docs/rules.md 1.3, 9.2); everything a pass does is written here once."""

import numpy as np

from aisim.kernels import emission, invariants, passlog, queues, sched
from aisim.kernels._jit import helper
from aisim.kernels.codes import (
    CNT_BROKEN,
    CNT_COMMITTED,
    CNT_PASSES,
    CNT_PREEMPTIONS,
    PASS_STALLED,
    PASS_STARTED,
    SCHED_PROGRESS,
)
from aisim.kernels.units import phase_ms


@helper
def worker_has_work(p, ranks, w):
    for d in range(p.dp_size):
        r = w * p.dp_size + d
        if ranks.run_len[r] > 0 or ranks.wait_len[r] > 0:
            return True
    return False


@helper
def start_pass(
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
        committed_before = stats.counters[CNT_COMMITTED]
        prefill_ns, decode_ns, f = sched.schedule_rank(
            p, req, ranks, blocks, stats, log, pfx_hash, plan, memo, r, t_ms, step, mtp
        )
        # a cut-off takes the open pass's prompt tokens back out, a burst reservation's
        # victims included (their chunk stays priced: docs/rules.md 8.4)
        ranks.pass_prefill[r] = stats.counters[CNT_COMMITTED] - committed_before
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
        return flags | PASS_STALLED
    return flags | PASS_STARTED


@helper
def finish_pass(p, req, ranks, blocks, workers, stats, pfx_hash, mtp, w, t_ms):
    empty = True
    solo = False
    if p.capture:
        solo = pass_requests(req, ranks, p.dp_size, w) == 1
    for d in range(p.dp_size):
        r = w * p.dp_size + d
        if ranks.in_pass[r]:
            if ranks.rej_head[r] >= 0:
                queues.spawn_rejected(p, req, ranks, stats, r, t_ms)
            emission.emit_rank(p, req, ranks, blocks, stats, pfx_hash, r, t_ms, mtp, solo)
            ranks.in_pass[r] = False
            if p.check_invariants:
                bad = invariants.check_rank(p, req, ranks, blocks, r, 0)
                if bad != 0 and stats.counters[CNT_BROKEN] == 0:
                    stats.counters[CNT_BROKEN] = r * 100 + bad
        # the interval's step counter restarts only on a drained worker: in P/D that also
        # means no source-held KV and no destination waiting for its reservation
        if (
            ranks.run_len[r] > 0
            or ranks.wait_len[r] > 0
            or ranks.held_len[r] > 0
            or ranks.dest_pending[r] > 0
        ):
            empty = False
    workers.busy[w] = False
    if empty:
        workers.step[w] = 0
    else:
        workers.step[w] += 1


@helper
def pass_requests(req, ranks, dp_size, w):
    """Requests worker w's pass in flight works on, over its ranks: those scheduled tokens or
    activated, and the lazy decoders (captured runs: latency attribution)."""
    total = 0
    for d in range(dp_size):
        r = w * dp_size + d
        if ranks.in_pass[r]:
            total += ranks.lazy_count[r]
            for k in range(ranks.act_len[r]):
                q = ranks.act_list[r, k]
                if req.sched_tokens[q] > 0 or req.activated[q]:
                    total += 1
    return total
