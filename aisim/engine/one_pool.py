"""The kernel call of a one-pool (aggregated) run: allocate its state, run kernels/loop.py.

aisim.engine.driver owns everything around the call (reruns, errors, the result); this module
only sizes the buffers for one pool and hands them to the compiled loop.
"""

from __future__ import annotations

import numpy as np

from aisim import state as st
from aisim.engine.interruptible import run_kernel
from aisim.engine.kernel_run import KernelRun, allocate_pool, table_columns, traffic_inputs
from aisim.engine.workload import WorkloadSpec

IDLE_WORKLOAD = WorkloadSpec(load="concurrency", num_requests=0)
"""The workload of an empty run (a kernel specialization depends on no traffic)."""


def load(run) -> None:
    """Load the compiled loop (numba runtime set-up + cached machine code, ~0.2 s), the
    counterpart of importing AISimulate's engine extension; compiles it on a cold cache."""
    from aisim.kernels.loop import run_aggregated

    (spec,) = run.pools
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


def first_log_capacity(n: int) -> int:
    """Admission-log rows of a captured run's first try: admissions plus readmissions."""
    return 2 * n + 16


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
    """One call of the one-pool loop; `timing` is [(plan arrays, memo)], `pass_rows` > 0
    captures its passes."""
    from aisim.kernels.loop import run_aggregated

    (spec,) = run.pools
    (traffic,) = traffics
    (arrays, memo), *_ = timing
    workload = run.workload
    n = len(traffic.prompt_len)
    longest = int((traffic.prompt_len + traffic.output_len).max()) if n else 1
    row_blocks = table_columns(longest, spec.block_size)
    max_running = max(1, min(spec.max_seqs, n))
    params = spec.kernel_params(workload, capture, lazy_decode, check_invariants, pass_rows > 0)
    params = params._replace(sessions=traffic.sessions)
    inputs = traffic_inputs(traffic, workload.closed_loop)
    req, ranks, blocks, workers, stats, log = allocate_pool(
        spec, n, max_running, row_blocks, log_capacity, inputs, capture
    )
    if workload.closed_loop or traffic.sessions:
        req.arrival_ms[:] = traffic.arrival_ms
    if no_stats is not None:
        req.no_stats[:] = no_stats
    workers.ready_ms[:] = spec.startup_ms
    plog = st.allocate_passlog(max(1, pass_rows))
    code, where = run_kernel(
        run_aggregated,
        params._replace(max_seqs=max_running),
        req,
        ranks,
        blocks,
        workers,
        stats,
        log,
        st.prefix_keys(traffic.pfx_hash, traffic.pfx_src_tokens, spec.block_size, row_blocks),
        arrays,
        memo,
        st.allocate_mtp(spec.nextn, spec.nextn_accepted, spec.num_ranks),
        plog,
    )
    return KernelRun(code, where, [(req, ranks, workers)], stats, log, plog, None)
