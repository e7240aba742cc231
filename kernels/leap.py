"""Decode leaps: back-to-back passes of a single-rank deployment while nothing can happen.

At low concurrency a run is millions of passes in which the only running requests are lazy
decoders (kernels/lazy.py) and no event is due: each such pass only prices the decode set,
records the token gap and advances the clock. The generic event loop pays for scanning workers,
routing and the full scheduling pass every time; this loop does only what such a *pure* pass
changes, in the same order as `pool_pass.finish_pass` / `pool_pass.start_pass` /
`sched.schedule_rank` / `emission.emit_rank` would, so results are bit-identical (the golden and
pass-compression tests run through it). It stops before any pass that could differ: an arrival
to route, a calendar event (KV block boundary, cacheable block, completion), active or waiting
requests, a rejection to report.

Only for one worker with one attention rank (no other worker's events can interleave), pass
compression on, and neither pass capture nor invariant checks.
"""

from aisim.kernels import pass_price
from aisim.kernels._jit import helper
from aisim.kernels.codes import CNT_PASSES
from aisim.kernels.tokstats import record_gap
from aisim.kernels.units import phase_ms


@helper
def _event_at(req, ranks, r, x):
    """Does any lazy decoder of rank r have its next event at rank pass x?"""
    mask = ranks.cal_head.shape[1] - 1
    q = ranks.cal_head[r, x & mask]
    while q >= 0:
        if req.ev_pass[q] == x:
            return True
        q = req.ev_next[q]
    return False


@helper
def usable(p):
    return (
        p.num_workers == 1
        and p.dp_size == 1
        and p.lazy_decode
        and not p.capture_passes
        and not p.check_invariants
    )


@helper
def run(p, req, ranks, workers, stats, plan, memo, t, next_arrival):
    """Finish the in-flight pass and start the next one while both are pure; returns the start
    time of the last pass started (the loop's current time)."""
    r = 0
    while workers.busy[0]:
        pe = workers.pass_end_ms[0]
        if next_arrival <= pe:
            break  # routed at or before pe, then admitted: not pure
        # the in-flight pass emits for lazy decoders only (no active request, no due event) and
        # the next pass would schedule exactly the lazy decoders
        if ranks.act_len[r] != 0 or ranks.due_len[r] != 0 or ranks.wait_len[r] != 0:
            break
        if ranks.rej_head[r] >= 0:
            break  # the pass rejected a request: closed loop, its replacement arrives at pe
        n_lazy = ranks.lazy_count[r]
        if n_lazy == 0 or n_lazy > p.max_tokens:
            break
        x = ranks.pass_idx[r] + 1
        if _event_at(req, ranks, r, x):
            break
        # --- finish (pool_pass.finish_pass -> emission.emit_rank with nothing due or active)
        record_gap(stats, pe - ranks.last_end_ms[r], n_lazy)
        ranks.last_end_ms[r] = pe
        if ranks.cooldown[r] > 0:
            ranks.cooldown[r] -= 1
        workers.busy[0] = False
        workers.step[0] += 1  # lazy decoders keep the rank non-empty
        t = pe
        # --- start (pool_pass.start_pass -> sched.schedule_rank: pop_due finds nothing, every
        # lazy decoder fits, no active or waiting request)
        step = workers.step[0]
        ranks.pass_idx[r] = x
        defer = False
        if p.prefill_interval > 1 and step % p.prefill_interval != 0:
            if not ranks.capacity_bound[r]:
                defer = True
        ranks.due_len[r] = 0
        if not defer:
            ranks.capacity_bound[r] = False
        ranks.deferred[r] = defer
        ranks.preempted[r] = False
        prefill_ns, decode_ns = pass_price.price_rank(p, req, ranks, r, x, plan, memo)
        dur = prefill_ns + decode_ns
        workers.busy[0] = True
        workers.pass_start_ms[0] = t
        workers.pass_end_ms[0] = t + phase_ms(prefill_ns) + phase_ms(decode_ns)
        workers.busy_ms[0] += dur / 1e6
        workers.num_passes[0] += 1
        stats.counters[CNT_PASSES] += 1
    return t
