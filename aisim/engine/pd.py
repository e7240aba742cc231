"""Disaggregated prefill/decode runs (docs/rules.md 9): one EngineSpec per role, the workload,
the transfer model, and the call into the compiled P/D event loop (kernels/loop_pd.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from aisim import state as st
from aisim.engine import run as aggregated
from aisim.engine.interruptible import run_kernel
from aisim.engine.pool import Pool
from aisim.engine.run import (
    reopen_unreported_rejections,
    rerun_with_room,
    reset_accumulators,
    traffic_inputs,
)
from aisim.engine.spec import EngineSpec, resolve_role
from aisim.engine.workload import WorkloadSpec, resolve_workload
from aisim.errors import CapacityError, NotAvailableError
from aisim.kernels.codes import ReqStatus, Role, RunResult
from aisim.traffic import Traffic, role_traffic


@dataclass(frozen=True)
class PDSpec:
    prefill: EngineSpec
    decode: EngineSpec
    transfer: st.TransferParams
    workload: WorkloadSpec

    @property
    def role(self) -> str:
        return "disaggregated"

    @property
    def timing(self) -> str:
        return self.decode.timing


@dataclass
class PDResult:
    spec: PDSpec
    traffic: Traffic  # the decode role's view (output lengths it will emit)
    req_p: st.RequestState
    req_d: st.RequestState
    pd: st.PDState
    stats: st.StatsState
    log: st.AdmissionLog | None
    sim_ms: float
    memo_p: st.TimingMemo | None = None
    memo_d: st.TimingMemo | None = None
    ranks_p: st.RankState | None = None  # final rank states (a cut-off run reads open passes)
    ranks_d: st.RankState | None = None
    passes: st.PassLog | None = None  # capture_passes: both pools' passes, role column set

    @property
    def pools(self) -> list[Pool]:
        return [
            Pool("prefill", self.spec.prefill, self.req_p, self.ranks_p),
            Pool("decode", self.spec.decode, self.req_d, self.ranks_d),
        ]

    @cached_property
    def requests(self) -> st.RequestState:
        """The run's view of its requests: decode-side tokens, prefill-side admission facts
        (merged once: the summary and the records both read it)."""
        return merged_requests(self)

    @property
    def handoff_end_ms(self) -> float:
        """The last KV transfer end processed (before the cut-off, if any)."""
        xfer = self.pd.xfer_end_ms
        return float(xfer[xfer <= self.spec.workload.max_time_ms].max(initial=0.0))


def resolve_pd(cfg) -> PDSpec:
    """Config (mode disaggregated) -> per-role specs and the KV-transfer parameters."""
    from aisim.config import unsupported_features
    from aisim.memory import transfer_kv_bytes_per_token

    missing = unsupported_features(cfg)
    if missing:
        raise NotAvailableError(f"{cfg.source_path}: {missing[0]}")
    if cfg.engine.nextn > 0:
        raise NotAvailableError(
            f"{cfg.source_path}: engine.nextn: native MTP with disaggregated prefill/decode is "
            "not available yet in aisim; use aggregated mode or nextn 0"
        )
    workload = resolve_workload(cfg)
    prefill = resolve_role(cfg, "prefill", workload)
    decode = resolve_role(cfg, "decode", workload)
    kvt = cfg.engine.kv_transfer
    bandwidth = 0.0
    bytes_per_token = 0.0
    full_prompt = False
    if kvt is not None:
        full_prompt = kvt.timing_mode == "full_prompt"
        if kvt.bandwidth_gb_per_second is not None:
            bandwidth = float(kvt.bandwidth_gb_per_second)
        if kvt.bytes_per_token == "auto":
            # KV bytes of one token on one source (prefill) rank
            bytes_per_token = float(
                transfer_kv_bytes_per_token(
                    prefill.model, prefill.tensor, prefill.kvcache_quant_mode
                )
            )
        else:
            bytes_per_token = float(kvt.bytes_per_token)
    transfer = st.TransferParams(bytes_per_token, bandwidth, full_prompt)
    return PDSpec(prefill, decode, transfer, workload)


def _params(
    spec: EngineSpec, workload: WorkloadSpec, role: Role, n: int, capture: bool, passes: bool
):
    params = spec.kernel_params(workload, capture, capture_passes=passes)._replace(
        max_seqs=max(1, min(spec.max_seqs, n)), role=int(role)
    )
    return params


def _run(
    pdspec: PDSpec,
    traffic_p: Traffic,
    traffic_d: Traffic,
    capture: bool,
    plans,
    log_capacity: int,
    no_stats: np.ndarray | None = None,
    pass_rows: int = 0,
):
    """One call of the P/D loop; `pass_rows` > 0 captures the passes of both pools into one
    pass log of that many rows."""
    from aisim.kernels.loop_pd import run_disaggregated

    sp, sd, w = pdspec.prefill, pdspec.decode, pdspec.workload
    n = len(traffic_d.prompt_len)
    # slot rows per rank: running requests plus those holding KV outside the running list
    # (source held on the prefill side; reserved / activated on the decode side)
    in_flight = min(w.concurrency, n) if w.closed_loop else n
    rows_p = max(1, min(n, min(sp.max_seqs, n) + in_flight))
    rows_d = max(1, min(n, min(sd.max_seqs, n) + in_flight))
    longest_p = int(traffic_p.prompt_len.max()) + 1 if n else 1
    longest_d = int((traffic_d.prompt_len + traffic_d.output_len).max()) if n else 1
    closed_loop = w.closed_loop
    req_p, ranks_p, blocks_p, workers_p, stats, log = st.allocate(
        n,
        sp.num_ranks,
        sp.replicas,
        rows_p,
        sp.num_blocks,
        -(-longest_p // sp.block_size) + 1,
        log_capacity,
        sp.block_size,
        traffic_inputs(traffic_p, closed_loop, with_output=False),
    )
    # the prefill side's one internal (unreported) token; TRT-LLM's enqueue clamp to the prefill
    # pool can leave none, and such a request is rejected there (observed)
    np.minimum(traffic_p.output_len, 1, out=req_p.output_len)
    if closed_loop:
        req_p.arrival_ms[:] = traffic_p.arrival_ms
    # both sides see one prompt length and one arrival time per request (the kernel spawns
    # closed-loop arrivals through either side)
    inputs_d = traffic_inputs(traffic_d, True)
    inputs_d.update(prompt_len=req_p.prompt_len, arrival_ms=req_p.arrival_ms)
    req_d, ranks_d, blocks_d, workers_d, _, _ = st.allocate(
        n,
        sd.num_ranks,
        sd.replicas,
        rows_d,
        sd.num_blocks,
        -(-longest_d // sd.block_size) + 1,
        1,
        sd.block_size,
        inputs_d,
    )
    if no_stats is not None:
        req_d.no_stats[:] = no_stats  # decode workers stream every client-visible token gap
    pd = st.allocate_pd(n, sd.num_ranks, sd.replicas, sp.replicas)
    (plan_p, memo_p), (plan_d, memo_d) = plans
    plog = st.allocate_passlog(max(1, pass_rows))
    code, where = run_kernel(
        run_disaggregated,
        pd,
        pdspec.transfer,
        stats,
        log,
        st.allocate_mtp(0, None, 1),
        plog,
        _params(sp, w, Role.PREFILL, n, capture, pass_rows > 0),
        req_p,
        ranks_p,
        blocks_p,
        workers_p,
        st.prefix_keys(
            traffic_p.pfx_hash,
            traffic_p.pfx_src_tokens,
            sp.block_size,
            -(-longest_p // sp.block_size) + 1,
        ),
        plan_p,
        memo_p,
        _params(sd, w, Role.DECODE, n, capture, pass_rows > 0),
        req_d,
        ranks_d,
        blocks_d,
        workers_d,
        st.prefix_keys(
            traffic_d.pfx_hash,
            traffic_d.pfx_src_tokens,
            sd.block_size,
            -(-longest_d // sd.block_size) + 1,
        ),
        plan_d,
        memo_d,
    )
    return code, where, req_p, req_d, pd, stats, log, ranks_p, ranks_d, plog


def _timing_arrays(spec: EngineSpec, plan, memo=None):
    """(plan arrays, memo) of one role; a given memo (shared by a sweep's points with the same
    plan) keeps its prices and has its per-run sums zeroed."""
    if spec.timing != "op_level":
        return st.placeholder_plan(), st.allocate_memo(1, 16)
    if memo is None:
        return plan.arrays, st.allocate_memo(len(plan.op_names))
    reset_accumulators(memo)
    return plan.arrays, memo


def load_engine_pd(pdspec: PDSpec) -> None:
    """Load the compiled P/D loop before the timed span (see run.load_engine)."""
    from aisim.engine.run import IDLE_WORKLOAD
    from aisim.traffic import synthetic

    idle = PDSpec(pdspec.prefill, pdspec.decode, pdspec.transfer, IDLE_WORKLOAD)
    plans = [(st.placeholder_plan(), st.allocate_memo(1, 16)) for _ in range(2)]
    traffic_p = synthetic(pdspec.prefill, IDLE_WORKLOAD)
    _run(idle, traffic_p, synthetic(pdspec.decode, IDLE_WORKLOAD), False, plans, 1)


def simulate_pd(
    pdspec: PDSpec,
    capture: bool = False,
    plans=(None, None),
    capture_passes: bool = False,
    memos=(None, None),
) -> PDResult:
    """Run the P/D loop. With a virtual-time cut-off, run once more with the unfinished
    requests' token gaps kept out of the ITL statistics (see run.simulate_until_cutoff).
    `memos`: each role's pass-time memo to reuse (a sweep's), or None for a fresh one."""
    traffic_p = role_traffic(pdspec.prefill, pdspec.workload)
    traffic_d = role_traffic(pdspec.decode, pdspec.workload)
    result = _simulate_pd(pdspec, traffic_p, traffic_d, capture, plans, memos, capture_passes)
    max_time_ms = pdspec.workload.max_time_ms
    if max_time_ms == float("inf"):
        return result
    reopen_unreported_rejections(result.req_p, max_time_ms)
    open_ = result.requests.status < ReqStatus.FINISHED
    open_ &= result.req_p.status != ReqStatus.NOT_ARRIVED
    if not open_.any():
        return result
    result = _simulate_pd(
        pdspec, traffic_p, traffic_d, capture, plans, memos, capture_passes, no_stats=open_
    )
    reopen_unreported_rejections(result.req_p, max_time_ms)
    return result


def _simulate_pd(
    pdspec: PDSpec,
    traffic_p: Traffic,
    traffic_d: Traffic,
    capture: bool,
    plans,
    memos,
    capture_passes: bool,
    no_stats: np.ndarray | None = None,
) -> PDResult:
    roles = (pdspec.prefill, pdspec.decode)
    n = len(traffic_d.prompt_len)
    log_capacity = 4 * n + 16 if capture else 1
    pass_rows = 0
    if capture_passes:
        pass_rows = aggregated.pass_rows_estimate(
            pdspec.prefill, traffic_p
        ) + aggregated.pass_rows_estimate(pdspec.decode, traffic_d)
    t0 = time.perf_counter()
    while True:
        timing = [
            _timing_arrays(s, plan, memo) for s, plan, memo in zip(roles, plans, memos, strict=True)
        ]
        code, where, req_p, req_d, pd, stats, log, ranks_p, ranks_d, plog = _run(
            pdspec, traffic_p, traffic_d, capture, timing, log_capacity, no_stats, pass_rows
        )
        rerun, log_capacity, pass_rows = rerun_with_room(
            code, log_capacity, capture_passes, plog, pass_rows
        )
        if not rerun:
            break
    sim_ms = (time.perf_counter() - t0) * 1000.0
    if code != RunResult.OK:
        raise RuntimeError(
            f"internal error: P/D event loop returned {RunResult(code).name} at worker {where}"
        )
    spawned = np.count_nonzero(req_p.status != ReqStatus.NOT_ARRIVED)
    done = np.count_nonzero(
        (req_d.status == ReqStatus.FINISHED) | (req_p.status >= ReqStatus.REJECTED)
    )
    if pdspec.workload.max_time_ms == float("inf") and (spawned < n or done < spawned):
        stuck = (
            "prefill"
            if np.any(
                np.isnan(pd.held_ms)
                & (req_p.status < ReqStatus.REJECTED)
                & (req_p.status != ReqStatus.NOT_ARRIVED)
            )
            else "decode"
        )
        s = pdspec.prefill if stuck == "prefill" else pdspec.decode
        raise CapacityError(
            f"the {stuck} workers can make no progress: requests never fit their KV pool "
            f"({s.num_blocks} blocks of {s.block_size} tokens per rank) or token budget "
            f"({s.max_tokens}); raise engine.workers.{stuck}.kv_cache.capacity"
        )
    return PDResult(
        pdspec,
        traffic_d,
        req_p,
        req_d,
        pd,
        stats,
        log if capture else None,
        sim_ms,
        timing[0][1] if pdspec.prefill.timing == "op_level" else None,
        timing[1][1] if pdspec.decode.timing == "op_level" else None,
        ranks_p,
        ranks_d,
        plog if capture_passes else None,
    )


def merged_requests(result: PDResult) -> st.RequestState:
    """One request view for the summary: decode-side tokens, prefill-side admission facts.

    Status: completed when the decode side finished it; rejected (or failed: its handoff could
    never fit the decode pool) when the prefill side says so; in flight otherwise.
    """
    rp, rd = result.req_p, result.req_d
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
