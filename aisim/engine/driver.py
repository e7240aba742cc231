"""Run a simulation of one or more pools: the one driver of every run.

`simulate(run, traffics, ...)` makes the kernel calls a run needs and returns one SimResult,
whatever the run's pools: the call for its pool layout (aisim.engine.one_pool for one pool,
aisim.engine.pd_pools for a prefill and a decode pool with the KV handoff), a rerun with more
room when a capture log filled up, the rerun at a virtual-time cut-off that keeps unfinished
requests out of the ITL statistics, and one error for a run that can make no progress.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from aisim import state as st
from aisim.engine import one_pool, pd_pools
from aisim.engine.deployment import RunSpec
from aisim.engine.kernel_run import timing_arrays
from aisim.engine.pool import Pool
from aisim.errors import CapacityError
from aisim.kernels.codes import (
    CNT_RELEASING,
    CNT_SPAWNED,
    CNT_TOKENIZING,
    PD_XFERS,
    ReqStatus,
    RunResult,
)
from aisim.traffic import Traffic, role_traffic


@dataclass
class SimResult:
    run: RunSpec
    traffic: Traffic  # the client pool's view of the requests (output lengths it emits)
    pools: list[Pool]  # in run order: (aggregated,) or (prefill, decode)
    stats: st.StatsState  # shared by the pools: ITL / per-user sketches, counters
    log: st.AdmissionLog | None  # captured runs: every pool's admissions
    sim_ms: float  # host time of the kernel calls
    passes: st.PassLog | None = None  # capture_passes: every pool's passes, role column set
    handoff: st.PDState | None = None  # runs with a KV handoff: its per-request times

    @cached_property
    def requests(self) -> st.RequestState:
        """The run's view of its requests (the summary's and the records' input): the one
        pool's, or the decode pool's tokens with the prefill pool's admission facts."""
        if len(self.pools) == 1:
            return self.pools[0].req
        return pd_pools.merged_requests(self.pools[0].req, self.pools[-1].req)

    @property
    def side_events_end_ms(self) -> float:
        """The last event processed besides passes and arrivals, before the cut-off if any: a
        KV transfer end or a tokenization end (0 without either)."""
        ends = [self.pools[0].req.tokenized_ms]
        if self.handoff is not None:
            ends.append(self.handoff.xfer_end_ms)
        cut = self.run.workload.max_time_ms
        return max(float(e[e <= cut].max(initial=0.0)) for e in ends)

    def without_run_fields(self) -> SimResult:
        """The result with every pool's loop-only request arrays freed (the outputs never read
        them)."""
        pools = [replace(pool, req=st.without_run_fields(pool.req)) for pool in self.pools]
        return replace(self, pools=pools)


def _layout(run: RunSpec):
    return one_pool if run.handoff is None else pd_pools


def load_engine(run: RunSpec) -> None:
    """Load the run's compiled event loop before any timed span (like importing AISimulate's
    engine extension); compiles it on a cold cache."""
    _layout(run).load(run)


def run_traffic(run: RunSpec) -> list[Traffic]:
    """Each pool's view of the workload (its block size keys the prefix hashes, its limits
    clamp the output lengths)."""
    return [role_traffic(spec, run.workload) for spec in run.pools]


def simulate(
    run: RunSpec,
    traffics: list[Traffic] | None = None,
    *,
    capture: bool = False,
    capture_passes: bool = False,
    plans=None,
    memos=None,
    lazy_decode: bool = True,
    check_invariants: bool = False,
) -> SimResult:
    """Run the simulation. `plans`: each pool's op-level PassPlan (None for other timing);
    `memos`: each pool's pass-time memo to reuse (a sweep's), or None for fresh ones.

    With a virtual-time cut-off, AISimulate computes ITL from the requests that completed, but
    which ones complete is known only at the cut-off, after their gaps were streamed. The run
    is deterministic, so a rerun with the others flagged is the same run with clean statistics.
    """
    traffics = traffics if traffics is not None else run_traffic(run)
    plans = plans if plans is not None else [None] * len(run.pools)
    memos = memos if memos is not None else [None] * len(run.pools)
    args = (run, traffics, capture, capture_passes, plans, memos, lazy_decode, check_invariants)
    result = _simulate(*args)
    max_time_ms = run.workload.max_time_ms
    if max_time_ms == float("inf"):
        return result
    first = result.pools[0].req
    reopen_unreported_rejections(first, max_time_ms)
    open_ = (result.requests.status < ReqStatus.FINISHED) & (first.status != ReqStatus.NOT_ARRIVED)
    if not open_.any():
        return result
    result = _simulate(*args, no_stats=open_)
    reopen_unreported_rejections(result.pools[0].req, max_time_ms)
    return result


def simulate_pool(spec, traffic: Traffic, **kwargs) -> SimResult:
    """simulate() of one pool on the given traffic (kernel tests; `plan`, `memo` for op-level
    timing)."""
    plan = kwargs.pop("plan", None)
    memo = kwargs.pop("memo", None)
    run = RunSpec((spec,), traffic.workload)
    return simulate(run, [traffic], plans=[plan], memos=[memo], **kwargs)


def _simulate(
    run,
    traffics,
    capture,
    capture_passes,
    plans,
    memos,
    lazy_decode,
    check_invariants,
    no_stats=None,
) -> SimResult:
    layout = _layout(run)
    n = len(traffics[-1].prompt_len)
    log_capacity = layout.first_log_capacity(n) if capture else 1
    pass_rows = 0
    if capture_passes:
        pass_rows = sum(
            pass_rows_estimate(spec, t) for spec, t in zip(run.pools, traffics, strict=True)
        )
    t0 = time.perf_counter()
    while True:
        timing = [
            timing_arrays(spec, plan, memo)
            for spec, plan, memo in zip(run.pools, plans, memos, strict=True)
        ]
        out = layout.run_once(
            run,
            traffics,
            capture,
            timing,
            log_capacity,
            no_stats,
            pass_rows,
            lazy_decode,
            check_invariants,
        )
        rerun, log_capacity, pass_rows = rerun_with_room(
            out.code, log_capacity, capture_passes, out.passes, pass_rows
        )
        if not rerun:
            break
    sim_ms = (time.perf_counter() - t0) * 1000.0
    _check_outcome(run, out)
    pools = [
        Pool(spec.role, spec, req, ranks, workers, memo if spec.timing == "op_level" else None)
        for spec, (req, ranks, workers), (_, memo) in zip(run.pools, out.pools, timing, strict=True)
    ]
    return SimResult(
        run,
        traffics[-1],
        pools,
        out.stats,
        out.log if capture else None,
        sim_ms,
        out.passes if capture_passes else None,
        out.handoff,
    )


def _events_left(out) -> bool:
    """Did the loop stop with something still to happen (a pass or transfer in flight, a
    tokenization, an arrival), that is at a cut-off rather than out of events?"""
    if any(workers.busy.any() for _, _, workers in out.pools):
        return True
    counters = out.stats.counters
    if out.handoff.scalars[PD_XFERS] > 0 or counters[CNT_TOKENIZING] > 0:
        return True
    if counters[CNT_RELEASING] > 0:  # a session turn released, not arrived yet
        return True
    # spawned (open loop: every request) but not arrived yet; a closed loop's later requests
    # arrive only at a completion, itself an event
    spawned = int(out.stats.counters[CNT_SPAWNED])
    return bool(np.any(out.pools[0][0].status[:spawned] == ReqStatus.NOT_ARRIVED))


def _check_outcome(run: RunSpec, out) -> None:
    """Raise for a run that could make no progress (a capacity error naming the pool to grow)
    or a kernel that reports an internal failure."""
    code, where = out.code, out.where
    if code == RunResult.STALLED:
        spec = run.pools[0]
        raise CapacityError(
            f"worker {where} can make no progress: its waiting requests never fit the KV pool "
            f"({spec.num_blocks} blocks of {spec.block_size} tokens per rank) or the token budget "
            f"({spec.max_tokens}); raise engine.workers.{spec.role}.kv_cache.capacity"
        )
    if code == RunResult.INVARIANT:
        raise AssertionError(f"state invariant {where % 100} broken on rank {where // 100}")
    if code != RunResult.OK:
        raise RuntimeError(
            f"internal error: event loop returned {RunResult(code).name} at worker {where}"
        )
    if out.handoff is None:
        return
    if run.workload.max_time_ms != float("inf") and _events_left(out):
        return  # stopped by the cut-off, not for want of anything to do
    stuck = pd_pools.stuck_pool(out.pools[0][0], out.pools[-1][0], out.handoff)
    if stuck is not None:
        s = run.pool(stuck)
        raise CapacityError(
            f"the {stuck} workers can make no progress: requests never fit their KV pool "
            f"({s.num_blocks} blocks of {s.block_size} tokens per rank) or token budget "
            f"({s.max_tokens}); raise engine.workers.{stuck}.kv_cache.capacity"
        )


def rerun_with_room(code, log_capacity: int, capture_passes: bool, plog, pass_rows: int):
    """After one kernel call: (rerun?, log capacity, pass rows). A full admission log (rare: many
    readmissions) reruns with 4x the room, a short pass-capture estimate with the exact size;
    the run is deterministic, so the rerun is the same run with complete logs."""
    if code == RunResult.LOG_FULL:
        return True, log_capacity * 4, pass_rows
    if capture_passes and int(plog.count[0]) > pass_rows:
        return True, log_capacity, int(plog.count[0])
    return False, log_capacity, pass_rows


def pass_rows_estimate(spec, traffic: Traffic) -> int:
    """Rows a pool's pass capture will probably need: every output token and prompt chunk spread
    over the batch the load allows (a short estimate costs one rerun, never a wrong table)."""
    n = len(traffic.prompt_len)
    if n == 0:
        return 1
    tokens = int(traffic.output_len.sum()) + int(
        (-(-traffic.prompt_len // max(1, spec.max_tokens))).sum()
    )
    batch = max(1, min(spec.max_seqs * spec.num_ranks, n))
    if traffic.workload.closed_loop:
        batch = max(1, min(batch, traffic.workload.concurrency))
    return int(tokens / batch * 1.25) + 64 * spec.num_ranks


def reopen_unreported_rejections(req, max_time_ms: float) -> None:
    """A rejection is reported when the pass that tried the admission ends; past the cut-off
    that pass never ends, so the request is still waiting (no record, no bill), as in
    AISimulate. In place."""
    late = (req.status >= ReqStatus.REJECTED) & (req.terminal_ms > max_time_ms)
    if late.any():
        req.status[late] = ReqStatus.WAITING
        req.terminal_ms[late] = np.nan
