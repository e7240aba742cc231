"""What one call of an event-loop kernel takes and gives back, for every kind of run.

aisim.engine.one_pool and aisim.engine.pd_pools each make the call for their pool layout;
aisim.engine.driver decides the calls (reruns with more log room, the cut-off rerun) and turns
the last one into a SimResult.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from aisim import state as st
from aisim.traffic import Traffic


class KernelRun(NamedTuple):
    code: int  # kernels.codes.RunResult
    where: int  # the worker (or state invariant) the code is about
    pools: list  # per pool, in run order: (RequestState, RankState, WorkerState)
    stats: st.StatsState  # shared by the pools
    log: st.AdmissionLog  # shared by the pools
    passes: st.PassLog  # every pool's passes, role column set
    handoff: st.PDState | None  # the KV handoff's state (runs with more than one pool)


def table_columns(longest_tokens: int, block_size: int) -> int:
    """Block-table columns a pool needs for its longest sequence (one spare)."""
    return -(-longest_tokens // block_size) + 1


def allocate_pool(
    spec, n: int, rows: int, columns: int, log_capacity: int, inputs: dict, records: bool
):
    """One pool's state buffers (aisim.state.allocate) for n requests: rows running slots and
    `columns` block-table columns per rank; `records` keeps per-request latency attribution;
    session inputs (`turn`) size the multi-turn fields.
    Returns (req, ranks, blocks, workers, stats, log)."""
    return st.allocate(
        n,
        spec.num_ranks,
        spec.replicas,
        rows,
        spec.num_blocks,
        columns,
        log_capacity,
        spec.block_size,
        inputs,
        records,
        spec.tokenization[0],
        "turn" in inputs,
    )


def traffic_inputs(traffic: Traffic, closed_loop: bool, with_output: bool = True) -> dict:
    """RequestState fields the kernels only read, as the traffic's own arrays (st.allocate
    `requests`): a 10 M-request run would otherwise hold every length twice. Closed-loop
    arrivals and later session turns' are written by the kernel, so those get their own array."""
    inputs = {
        "prompt_len": np.ascontiguousarray(traffic.prompt_len, np.int64),
        "pfx_start": np.ascontiguousarray(traffic.pfx_start, np.int64),
        "pfx_len": np.ascontiguousarray(traffic.pfx_len, np.int32),
    }
    if with_output:
        inputs["output_len"] = np.ascontiguousarray(traffic.output_len, np.int64)
    if traffic.sessions:
        inputs["turn"] = np.ascontiguousarray(traffic.turn, np.int32)
        inputs["turn_delay_ms"] = np.ascontiguousarray(traffic.turn_delay_ms, np.float64)
        inputs["conv"] = np.ascontiguousarray(traffic.conv, np.int32)
    elif not closed_loop:
        inputs["arrival_ms"] = np.ascontiguousarray(traffic.arrival_ms, np.float64)
    return inputs


def reset_accumulators(memo: st.TimingMemo) -> None:
    """Zero a memo's per-run sums; its cached prices stay valid for the same plan."""
    memo.acc_ms[:] = 0.0
    memo.acc_energy[:] = 0.0
    memo.acc_covered[:] = 0.0
    memo.evals[:] = 0


def timing_arrays(spec, plan, memo=None):
    """(plan arrays, memo) of one pool for one kernel call. Fixed and polynomial timing take
    placeholders; an op-level pool without a memo gets a fresh one, a given memo (a sweep's,
    shared by points with the same plan) keeps its prices and has its per-run sums zeroed."""
    if spec.timing != "op_level":
        return st.placeholder_plan(), st.allocate_memo(1, 16)
    if plan is None:
        raise ValueError("op-level timing needs its PassPlan")
    if memo is None:
        return plan.arrays, st.allocate_memo(len(plan.op_names))
    reset_accumulators(memo)
    return plan.arrays, memo
