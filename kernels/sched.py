"""One scheduler pass of one rank, phase by phase: vLLM v1 `Scheduler.schedule` as AISimulate
runs it, with the TRT-LLM admission differences (docs/rules.md 4, 5, 6).

1. the running set (kernels/running.py): running requests first, in list order;
2. admission (kernels/admission.py): FCFS with head-of-line blocking, unless a preemption in
   phase 1 blocks it for this pass;
3. pricing (kernels/pass_price.py): the batch shape and its phase times;
4. emission (kernels/emission.py), at the pass end, called by the event loop.
"""

from aisim.kernels import admission, lazy, mtp_step, pass_price, running
from aisim.kernels._jit import helper
from aisim.kernels.codes import (
    SCHED_ADMIT_PREEMPT,
    SCHED_TRT_PREEMPT,
)
from aisim.kernels.mtp_step import mtp_on


@helper
def schedule_rank(p, req, ranks, blocks, stats, log, pfx_hash, plan, memo, r, t_ms, step, mtp):
    """Run one pass's scheduling on rank r at t_ms. Returns (prefill ns, decode ns, flags)."""
    x = ranks.pass_idx[r] + 1
    ranks.pass_idx[r] = x
    ranks.pass_start_ms[r] = t_ms
    defer = False
    if p.prefill_interval > 1 and step % p.prefill_interval != 0:
        if not ranks.capacity_bound[r] and running.has_decoder(req, ranks, r):
            defer = True
    if ranks.lazy_count[r] > 0:
        lazy.pop_due(req, ranks, r, x)
        ok, _ = lazy.fits_in_full(p, req, ranks, blocks, r, x, p.max_tokens, defer)
        if not ok:
            lazy.flush(req, ranks, r, x)
            ranks.cooldown[r] = lazy.COOLDOWN_PASSES
    if mtp_on(mtp):
        mtp_step.shape_reset(mtp, r)
    budget, flags, preempted = running.schedule_running(
        p, req, ranks, blocks, stats, pfx_hash, r, p.max_tokens, defer, x, mtp
    )
    if not preempted and not (flags & SCHED_TRT_PREEMPT):
        budget, aflags = admission.admit_waiting(
            p, req, ranks, blocks, stats, log, pfx_hash, r, t_ms, budget, defer, mtp
        )
        if aflags & SCHED_ADMIT_PREEMPT:
            preempted = True
            aflags &= ~SCHED_ADMIT_PREEMPT
        flags |= aflags
    if not defer and not preempted:
        ranks.capacity_bound[r] = ranks.wait_len[r] > 0
    ranks.deferred[r] = defer
    ranks.preempted[r] = preempted
    if mtp_on(mtp):
        return pass_price.reserve_and_price_mtp(
            p, req, ranks, blocks, stats, pfx_hash, mtp, r, plan, memo, flags
        )
    prefill_ns, decode_ns = pass_price.price_rank(p, req, ranks, r, x, plan, memo)
    return prefill_ns, decode_ns, flags
