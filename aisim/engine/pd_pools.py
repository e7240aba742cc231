"""The kernel call of a disaggregated run: a prefill and a decode pool joined by the KV handoff
(docs/rules.md 9), allocated side by side and run by kernels/loop_pd.py.

aisim.engine.driver owns everything around the call; this module sizes the two pools' buffers
and hands them to the compiled loop.
"""

from __future__ import annotations

import numpy as np

from aisim import state as st
from aisim.engine.interruptible import run_kernel
from aisim.engine.kernel_run import KernelRun, allocate_pool, table_columns, traffic_inputs
from aisim.kernels.codes import ReqStatus, Role


def load(run) -> None:
    """Load the compiled P/D loop before the timed span (see one_pool.load)."""
    from aisim.engine.one_pool import IDLE_WORKLOAD
    from aisim.traffic import synthetic

    idle = run.with_workload(IDLE_WORKLOAD)
    traffics = [synthetic(spec, IDLE_WORKLOAD) for spec in run.pools]
    timing = [(st.placeholder_plan(), st.allocate_memo(1, 16)) for _ in run.pools]
    run_once(idle, traffics, False, timing, 1, None, 0, True, False)


def first_log_capacity(n: int) -> int:
    """Admission-log rows of a captured run's first try: both pools' admissions."""
    return 4 * n + 16


def _params(spec, workload, role: Role, n: int, capture: bool, passes: bool, lazy, checks):
    return spec.kernel_params(workload, capture, lazy, checks, passes)._replace(
        max_seqs=max(1, min(spec.max_seqs, n)), role=int(role)
    )


def run_once(
    run,
    traffics,
    capture: bool,
    timing,
    log_capacity: int,
    no_stats,
    pass_rows: int,
    lazy_decode: bool,
    check_invariants: bool,
) -> KernelRun:
    """One call of the P/D loop; `timing` is [(plan arrays, memo)] per pool, `pass_rows` > 0
    captures the passes of both pools into one pass log of that many rows."""
    from aisim.kernels.loop_pd import run_disaggregated

    sp, sd = run.pools
    traffic_p, traffic_d = traffics
    (plan_p, memo_p), (plan_d, memo_d) = timing
    w = run.workload
    n = len(traffic_d.prompt_len)
    # slot rows per rank: running requests plus those holding KV outside the running list
    # (source held on the prefill side; reserved / activated on the decode side)
    in_flight = min(w.concurrency, n) if w.closed_loop else n
    rows_p = max(1, min(n, min(sp.max_seqs, n) + in_flight))
    rows_d = max(1, min(n, min(sd.max_seqs, n) + in_flight))
    cols_p = table_columns(int(traffic_p.prompt_len.max()) + 1 if n else 1, sp.block_size)
    longest_d = int((traffic_d.prompt_len + traffic_d.output_len).max()) if n else 1
    cols_d = table_columns(longest_d, sd.block_size)
    req_p, ranks_p, blocks_p, workers_p, stats, log = allocate_pool(
        sp,
        n,
        rows_p,
        cols_p,
        log_capacity,
        traffic_inputs(traffic_p, w.closed_loop, False),
        capture,
    )
    # the prefill side's one internal (unreported) token; TRT-LLM's enqueue clamp to the prefill
    # pool can leave none, and such a request is rejected there (observed)
    np.minimum(traffic_p.output_len, 1, out=req_p.output_len)
    if w.closed_loop:
        req_p.arrival_ms[:] = traffic_p.arrival_ms
    # both sides see one prompt length and one arrival time per request (the kernel spawns
    # closed-loop arrivals through either side)
    inputs_d = traffic_inputs(traffic_d, True)
    inputs_d.update(prompt_len=req_p.prompt_len, arrival_ms=req_p.arrival_ms)
    req_d, ranks_d, blocks_d, workers_d, _, _ = allocate_pool(
        sd, n, rows_d, cols_d, 1, inputs_d, capture
    )
    if no_stats is not None:
        req_d.no_stats[:] = no_stats  # decode workers stream every client-visible token gap
    pd = st.allocate_pd(n, sd.num_ranks, sd.replicas, sp.replicas)
    plog = st.allocate_passlog(max(1, pass_rows))
    code, where = run_kernel(
        run_disaggregated,
        pd,
        run.handoff,
        stats,
        log,
        st.allocate_mtp(0, None, 1),
        plog,
        _params(sp, w, Role.PREFILL, n, capture, pass_rows > 0, lazy_decode, check_invariants),
        req_p,
        ranks_p,
        blocks_p,
        workers_p,
        st.prefix_keys(traffic_p.pfx_hash, traffic_p.pfx_src_tokens, sp.block_size, cols_p),
        plan_p,
        memo_p,
        _params(sd, w, Role.DECODE, n, capture, pass_rows > 0, lazy_decode, check_invariants),
        req_d,
        ranks_d,
        blocks_d,
        workers_d,
        st.prefix_keys(traffic_d.pfx_hash, traffic_d.pfx_src_tokens, sd.block_size, cols_d),
        plan_d,
        memo_d,
    )
    pools = [(req_p, ranks_p, workers_p), (req_d, ranks_d, workers_d)]
    return KernelRun(code, where, pools, stats, log, plog, pd)


def merged_requests(req_p: st.RequestState, req_d: st.RequestState) -> st.RequestState:
    """One request view for the summary: decode-side tokens, prefill-side admission facts.

    Status: completed when the decode side finished it; rejected (or failed: its handoff could
    never fit the decode pool) when the prefill side says so; in flight otherwise.
    """
    rp, rd = req_p, req_d
    status = np.where(
        rd.status == ReqStatus.FINISHED,
        ReqStatus.FINISHED,
        np.where(rp.status == ReqStatus.FINISHED, ReqStatus.RUNNING, rp.status),
    ).astype(rd.status.dtype)
    terminal = np.where(rp.status >= ReqStatus.REJECTED, rp.terminal_ms, rd.terminal_ms)
    return rd._replace(
        status=status,
        terminal_ms=terminal,
        num_admissions=rp.num_admissions + rd.num_admissions,
        reused_first=rp.reused_first,
        reused_max=np.maximum(rp.reused_max, rd.reused_max),
    )


def stuck_pool(req_p, req_d, handoff) -> str | None:
    """Without a cut-off every request must end: the role of the pool that could make no
    progress when some did not (a prompt never source held: prefill), else None."""
    n = len(req_p.status)
    arrived = req_p.status != ReqStatus.NOT_ARRIVED
    spawned = np.count_nonzero(arrived)
    ended = (req_d.status == ReqStatus.FINISHED) | (req_p.status >= ReqStatus.REJECTED)
    if spawned == n and np.count_nonzero(ended) >= spawned:
        return None
    never_held = np.isnan(handoff.held_ms) & (req_p.status < ReqStatus.REJECTED) & arrived
    return "prefill" if np.any(never_held) else "decode"
