"""Run one aggregated simulation: allocate state, hand it to the compiled event loop, collect."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from aisim import state as st
from aisim.engine.interruptible import run_kernel
from aisim.engine.pool import Pool
from aisim.engine.spec import EngineSpec
from aisim.engine.workload import WorkloadSpec
from aisim.errors import CapacityError
from aisim.traffic import Traffic


@dataclass
class SimResult:
    spec: EngineSpec
    traffic: Traffic
    req: st.RequestState
    workers: st.WorkerState
    stats: st.StatsState
    log: st.AdmissionLog | None
    sim_ms: float  # host time of the kernel call
    memo: st.TimingMemo | None = None  # op-level runs: the energy accumulators
    passes: st.PassLog | None = None  # capture_passes: one row per rank per pass
    ranks: st.RankState | None = None  # final rank state (a cut-off run reads its open passes)

    @property
    def pools(self) -> list[Pool]:
        return [Pool(self.spec.role, self.spec, self.req, self.ranks)]

    @property
    def requests(self) -> st.RequestState:
        """The run's view of its requests (the summary's and the records' input)."""
        return self.req

    handoff_end_ms = 0.0  # no KV handoff between pools


IDLE_WORKLOAD = WorkloadSpec(load="concurrency", num_requests=0)
"""The workload of load_engine's empty run (a kernel specialization depends on no traffic)."""


def load_engine(spec: EngineSpec) -> None:
    """Load the compiled event loop (numba runtime set-up + cached machine code, ~0.2 s), the
    counterpart of importing AISimulate's engine extension; compiles it on a cold cache."""
    from aisim.kernels.loop import run_aggregated

    state = st.allocate(0, 1, 1, 1, 1, 1, 1, spec.block_size)
    run_kernel(
        run_aggregated,
        spec.kernel_params(IDLE_WORKLOAD, False)._replace(
            max_seqs=1, num_blocks=1, num_workers=1, dp_size=1
        ),
        *state,
        st.prefix_keys(np.zeros(0, np.uint64), 0, 1, 1),
        st.placeholder_plan(),
        st.allocate_memo(1, 16),
        st.allocate_mtp(spec.nextn, spec.nextn_accepted, 1),
        st.allocate_passlog(1),
    )


def simulate(
    spec: EngineSpec,
    traffic: Traffic,
    capture: bool = False,
    lazy_decode: bool = True,
    check_invariants: bool = False,
    plan=None,
    capture_passes: bool = False,
    memo=None,
    no_stats: np.ndarray | None = None,
) -> SimResult:
    """Run the event loop; `plan` is the op-level PassPlan when spec.timing == "op_level".

    `memo` (op-level only) may be a TimingMemo of the same plan reused from an earlier run (a
    sweep's shared pass-time memo): its cached prices are kept, its run accumulators zeroed.
    `no_stats` (bool[N]) keeps those requests' token gaps out of the ITL statistics.
    """
    from aisim.kernels.codes import RunResult
    from aisim.kernels.loop import run_aggregated

    n = len(traffic.prompt_len)
    longest = int((traffic.prompt_len + traffic.output_len).max()) if n else 1
    row_blocks = -(-longest // spec.block_size) + 1
    max_running = max(1, min(spec.max_seqs, n))
    log_capacity = 2 * n + 16 if capture else 1
    workload = traffic.workload
    params = spec.kernel_params(workload, capture, lazy_decode, check_invariants, capture_passes)
    if spec.timing == "op_level":
        if plan is None:
            raise ValueError("op-level timing needs its PassPlan")
        if memo is None:
            memo = st.allocate_memo(len(plan.op_names))
        else:
            reset_accumulators(memo)
        arrays = plan.arrays
    else:
        arrays, memo = st.placeholder_plan(), st.allocate_memo(1, 16)
    keys = st.prefix_keys(traffic.pfx_hash, traffic.pfx_src_tokens, spec.block_size, row_blocks)
    pass_rows = pass_rows_estimate(spec, traffic) if capture_passes else 1
    inputs = traffic_inputs(traffic, workload.closed_loop)
    t0 = time.perf_counter()
    while True:
        req, ranks, blocks, workers, stats, log = st.allocate(
            n,
            spec.num_ranks,
            spec.replicas,
            max_running,
            spec.num_blocks,
            row_blocks,
            log_capacity,
            spec.block_size,
            inputs,
        )
        if workload.closed_loop:
            req.arrival_ms[:] = traffic.arrival_ms
        if no_stats is not None:
            req.no_stats[:] = no_stats
        workers.ready_ms[:] = spec.startup_ms
        mtp = st.allocate_mtp(spec.nextn, spec.nextn_accepted, spec.num_ranks)
        plog = st.allocate_passlog(pass_rows)
        if spec.timing == "op_level":
            reset_accumulators(memo)
        code, where = run_kernel(
            run_aggregated,
            params._replace(max_seqs=max_running),
            req,
            ranks,
            blocks,
            workers,
            stats,
            log,
            keys,
            arrays,
            memo,
            mtp,
            plog,
        )
        rerun, log_capacity, pass_rows = rerun_with_room(
            code, log_capacity, capture_passes, plog, pass_rows
        )
        if not rerun:
            break
    sim_ms = (time.perf_counter() - t0) * 1000.0
    if code == RunResult.STALLED:
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
    return SimResult(
        spec,
        traffic,
        req,
        workers,
        stats,
        log if capture else None,
        sim_ms,
        memo if spec.timing == "op_level" else None,
        plog if capture_passes else None,
        ranks,
    )


def rerun_with_room(code, log_capacity: int, capture_passes: bool, plog, pass_rows: int):
    """After one kernel call: (rerun?, log capacity, pass rows). A full admission log (rare: many
    readmissions) reruns with 4x the room, a short pass-capture estimate with the exact size;
    the run is deterministic, so the rerun is the same run with complete logs."""
    from aisim.kernels.codes import RunResult

    if code == RunResult.LOG_FULL:
        return True, log_capacity * 4, pass_rows
    if capture_passes and int(plog.count[0]) > pass_rows:
        return True, log_capacity, int(plog.count[0])
    return False, log_capacity, pass_rows


def traffic_inputs(traffic: Traffic, closed_loop: bool, with_output: bool = True) -> dict:
    """RequestState fields the kernels only read, as the traffic's own arrays (st.allocate
    `requests`): a 10 M-request run would otherwise hold every length twice. Closed-loop
    arrivals are written by the kernel, so those get their own array."""
    inputs = {
        "prompt_len": np.ascontiguousarray(traffic.prompt_len, np.int64),
        "pfx_start": np.ascontiguousarray(traffic.pfx_start, np.int64),
        "pfx_len": np.ascontiguousarray(traffic.pfx_len, np.int32),
    }
    if with_output:
        inputs["output_len"] = np.ascontiguousarray(traffic.output_len, np.int64)
    if not closed_loop:
        inputs["arrival_ms"] = np.ascontiguousarray(traffic.arrival_ms, np.float64)
    return inputs


def reset_accumulators(memo: st.TimingMemo) -> None:
    """Zero a memo's per-run sums; its cached prices stay valid for the same plan."""
    memo.acc_ms[:] = 0.0
    memo.acc_energy[:] = 0.0
    memo.acc_covered[:] = 0.0
    memo.evals[:] = 0


def pass_rows_estimate(spec: EngineSpec, traffic: Traffic) -> int:
    """Rows a pass capture will probably need: every output token and prompt chunk spread over
    the batch the load allows (a short estimate costs one rerun, never a wrong table)."""
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


def simulate_until_cutoff(
    spec: EngineSpec, traffic: Traffic, capture: bool = False, plan=None, **kwargs
) -> SimResult:
    """Run; at a virtual-time cut-off, rerun once so unfinished requests' gaps leave the ITL.

    AISimulate computes ITL from the requests that completed, but which ones complete is known
    only at the cut-off, after their gaps were streamed. The run is deterministic, so the rerun
    with those requests flagged is the same run with clean statistics.
    """
    from aisim.kernels.codes import ReqStatus

    result = simulate(spec, traffic, capture=capture, plan=plan, **kwargs)
    max_time_ms = traffic.workload.max_time_ms
    if max_time_ms == float("inf"):
        return result
    reopen_unreported_rejections(result.req, max_time_ms)
    status = result.req.status
    open_ = (status == ReqStatus.WAITING) | (status == ReqStatus.RUNNING)
    if not open_.any():
        return result
    result = simulate(spec, traffic, capture=capture, plan=plan, no_stats=open_, **kwargs)
    reopen_unreported_rejections(result.req, max_time_ms)
    return result


def reopen_unreported_rejections(req, max_time_ms: float) -> None:
    """A rejection is reported when the pass that tried the admission ends; past the cut-off
    that pass never ends, so the request is still waiting (no record, no bill), as in
    AISimulate. In place."""
    from aisim.kernels.codes import ReqStatus

    late = (req.status >= ReqStatus.REJECTED) & (req.terminal_ms > max_time_ms)
    if late.any():
        req.status[late] = ReqStatus.WAITING
        req.terminal_ms[late] = np.nan
