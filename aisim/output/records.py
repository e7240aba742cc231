"""Per-request records (behaviour.md 12.3) as JSON objects and as an Arrow table."""

from __future__ import annotations

import hashlib
import uuid as uuidlib

import numpy as np

from aisim.kernels.codes import CNT_LOG, ReqStatus

_STATUS_NAMES = {int(ReqStatus.FINISHED): "completed", int(ReqStatus.REJECTED): "rejected"}


def _opt(x: float) -> float | None:
    return None if np.isnan(x) else float(x)


def terminal_order(result) -> np.ndarray:
    """Terminal requests sorted by arrival time, then creation index (AISimulate: then uuid)."""
    req = result.req
    idx = np.nonzero(req.status >= ReqStatus.FINISHED)[0]
    return idx[np.lexsort((idx, req.arrival_ms[idx]))]


def _admissions(result) -> list[list[tuple[float, int, bool]]]:
    n = len(result.req.prompt_len)
    hist: list[list[tuple[float, int, bool]]] = [[] for _ in range(n)]
    log = result.log
    if log is None:
        return hist
    count = int(result.stats.counters[CNT_LOG])
    for q, at, reused, readmit in zip(log.req[:count].tolist(), log.at_ms[:count].tolist(),
                                      log.reused[:count].tolist(), log.readmit[:count].tolist(),
                                      strict=True):
        hist[q].append((at, reused, readmit))
    return hist


def request_uuid(seed: str, i: int) -> str:
    """A version-4-shaped uuid derived from the run identity: identical runs, identical files."""
    raw = bytearray(hashlib.sha256(f"{seed}:{i}".encode()).digest()[:16])
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    return str(uuidlib.UUID(bytes=bytes(raw)))


def session_id(traffic, i: int) -> str:
    """AISimulate's names: `session_<index>` (synthetic), `request_<file row, 1-based>` (trace)."""
    if traffic.row is None:
        return f"session_{i}"
    return f"request_{int(traffic.row[i]) + 1}"


def build_records(result, run_id: str) -> list[dict]:
    req = result.req
    spec = result.spec
    hist = _admissions(result)
    records = []
    for i in terminal_order(result).tolist():
        r = int(req.rank[i])
        n_out = int(req.num_generated[i])
        arrival = float(req.arrival_ms[i])
        first = _opt(req.first_token_ms[i])
        last = _opt(req.last_token_ms[i])
        second = _opt(req.second_token_ms[i])
        admissions = [
            {"admission_ordinal": k, "at_ms": at, "is_readmission": readmit, "pool": "agg",
             "pool_admission_ordinal": k, "reused_input_tokens": reused}
            for k, (at, reused, readmit) in enumerate(hist[i])
        ]
        n_adm = int(req.num_admissions[i])
        records.append({
            "admission_count": n_adm,
            "admission_history": admissions,
            "arrival_time_ms": arrival,
            "decode_admit_ms": None,
            "decode_reused_input_tokens": None,
            "decode_route_overlap_tokens": None,
            "decode_worker_idx": r,
            "destination_activated_ms": None,
            "destination_reserved_ms": None,
            "dispatched_at_ms": None,
            "e2e_latency_ms": None if last is None else last - arrival,
            "first_admission_reused_input_tokens": int(req.reused_first[i]),
            "first_admit_ms": _opt(req.first_admit_ms[i]),
            "first_token_ms": first,
            "input_length": int(req.prompt_len[i]),
            "itl_ms": (last - first) / (n_out - 1) if n_out >= 2 else None,
            "last_token_ms": last,
            "output_length": n_out,
            "prefill_admit_ms": None,
            "prefill_route_overlap_tokens": None,
            "prefill_worker_idx": None,
            "pressure_record_ordinals": [],
            "readmission_count": max(0, n_adm - 1),
            "requested_output_length": int(result.traffic.requested_output_len[i]),
            "reused_input_tokens": int(req.reused_max[i]),
            "routing_history": [{
                "best_available_overlap_blocks": None,
                "dp_rank": r % spec.dp_size,
                "logical_worker_id": r // spec.dp_size,
                "outcome": "immediate",
                "overlap_regret_blocks": None,
                "placement_replica_id": None,
                "pool": "agg",
                "queue_entered_at_ms": None,
                "queue_wait_ms": 0.0,
                "released_at_ms": None,
                "reported_overlap_tokens": 0,
                "scheduler_id": r,
                "selected_overlap_blocks": None,
            }],
            "session_id": session_id(result.traffic, i),
            "source_held_ms": None,
            "source_released_ms": None,
            "terminal_status": _STATUS_NAMES.get(int(req.status[i]), "failed"),
            "terminal_time_ms": float(req.terminal_ms[i]),
            "ttft_ms": None if first is None else first - arrival,
            "ttst_ms": None if second is None else second - first,
            "turn_index": 0,
            "uuid": request_uuid(run_id, i),
        })
    return records


_POOL_NAMES = {0: "agg", 1: "prefill", 2: "decode"}


def _pd_admissions(result) -> list[list[tuple[float, int, bool, int]]]:
    n = len(result.req_d.prompt_len)
    hist: list[list[tuple[float, int, bool, int]]] = [[] for _ in range(n)]
    log = result.log
    if log is None:
        return hist
    count = int(result.stats.counters[CNT_LOG])
    for q, at, reused, readmit, pool in zip(
            log.req[:count].tolist(), log.at_ms[:count].tolist(), log.reused[:count].tolist(),
            log.readmit[:count].tolist(), log.pool[:count].tolist(), strict=True):
        hist[q].append((at, reused, readmit, pool))
    return hist


def _route(pool: str, r: int, dp_size: int) -> dict:
    return {
        "best_available_overlap_blocks": None,
        "dp_rank": r % dp_size,
        "logical_worker_id": r // dp_size,
        "outcome": "immediate",
        "overlap_regret_blocks": None,
        "placement_replica_id": None,
        "pool": pool,
        "queue_entered_at_ms": None,
        "queue_wait_ms": 0.0,
        "released_at_ms": None,
        "reported_overlap_tokens": 0,
        "scheduler_id": r,
        "selected_overlap_blocks": None,
    }


def build_pd_records(result, run_id: str) -> list[dict]:
    """Per-request records of a disaggregated run, with the P/D timestamps of behaviour.md 10.2."""
    from types import SimpleNamespace

    from aisim.engine.pd import merged_requests

    req = merged_requests(result)
    rp, rd, pd = result.req_p, result.req_d, result.pd
    spec = result.spec
    hist = _pd_admissions(result)
    records = []
    for i in terminal_order(SimpleNamespace(req=req)).tolist():
        n_out = int(req.num_generated[i])
        arrival = float(req.arrival_ms[i])
        first = _opt(req.first_token_ms[i])
        last = _opt(req.last_token_ms[i])
        second = _opt(req.second_token_ms[i])
        per_pool = {1: 0, 2: 0}
        admissions = []
        for k, (at, reused, readmit, pool) in enumerate(hist[i]):
            admissions.append({"admission_ordinal": k, "at_ms": at, "is_readmission": readmit,
                               "pool": _POOL_NAMES[pool],
                               "pool_admission_ordinal": per_pool.get(pool, 0),
                               "reused_input_tokens": reused})
            per_pool[pool] = per_pool.get(pool, 0) + 1
        n_adm = int(req.num_admissions[i])
        r_p = int(rp.rank[i])
        r_d = int(rd.rank[i])
        routes = []
        if r_p >= 0:
            routes.append(_route("prefill", r_p, spec.prefill.dp_size))
        if r_d >= 0:
            routes.append(_route("decode", r_d, spec.decode.dp_size))
        decoded = r_d >= 0
        records.append({
            "admission_count": n_adm,
            "admission_history": admissions,
            "arrival_time_ms": arrival,
            "decode_admit_ms": _opt(rd.first_admit_ms[i]),
            # the hit of decode-side readmissions (activation itself reports none)
            "decode_reused_input_tokens": int(rd.reused_max[i]) if decoded else None,
            "decode_route_overlap_tokens": 0 if decoded else None,
            "decode_worker_idx": r_d if decoded else None,
            "destination_activated_ms": _opt(pd.activated_ms[i]),
            "destination_reserved_ms": _opt(pd.reserved_ms[i]),
            "dispatched_at_ms": None,
            "e2e_latency_ms": None if last is None else last - arrival,
            "first_admission_reused_input_tokens": int(req.reused_first[i]),
            "first_admit_ms": _opt(rp.first_admit_ms[i]),
            "first_token_ms": first,
            "input_length": int(req.prompt_len[i]),
            "itl_ms": (last - first) / (n_out - 1) if n_out >= 2 else None,
            "last_token_ms": last,
            "output_length": n_out,
            "prefill_admit_ms": _opt(rp.first_admit_ms[i]),
            "prefill_route_overlap_tokens": 0 if r_p >= 0 else None,
            "prefill_worker_idx": r_p if r_p >= 0 else None,
            "pressure_record_ordinals": [],
            "readmission_count": max(0, n_adm - (2 if decoded else 1)),
            "requested_output_length": int(result.traffic.requested_output_len[i]),
            # per request the prefill side's reuse; the summary ratio also counts the decode side
            "reused_input_tokens": int(rp.reused_max[i]),
            "routing_history": routes,
            "session_id": session_id(result.traffic, i),
            "source_held_ms": _opt(pd.held_ms[i]),
            "source_released_ms": _opt(pd.released_ms[i]),
            "terminal_status": _STATUS_NAMES.get(int(req.status[i]), "failed"),
            "terminal_time_ms": float(req.terminal_ms[i]),
            "ttft_ms": None if first is None else first - arrival,
            "ttst_ms": None if second is None else second - first,
            "turn_index": 0,
            "uuid": request_uuid(run_id, i),
        })
    return records
