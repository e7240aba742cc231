"""Per-request records (docs/rules.md 11.8) as JSON objects and as an Arrow table.

The records are made from the result arrays a batch at a time (:class:`RequestRecords`): a
record as a dict costs ~14 KB, so a million of them at once would need ~14 GB; the writers
stream them to requests.jsonl, requests.parquet and prediction.json batch by batch.
"""

from __future__ import annotations

import hashlib
import uuid as uuidlib
from collections.abc import Iterator

import numpy as np

from aisim.kernels.codes import CNT_LOG, ReqStatus
from aisim.output.attribution import request_parts

_STATUS_NAMES = {
    int(ReqStatus.FINISHED): "completed",
    int(ReqStatus.REJECTED): "rejected",
    int(ReqStatus.FAILED): "failed",
}
BATCH = 4096  # records made at once: ~60 MB of dicts


def _opt(x: float) -> float | None:
    return None if x != x else x  # NaN: the event never happened


def terminal_order(req) -> np.ndarray:
    """Terminal requests sorted by arrival time, then creation index (AISimulate: then uuid)."""
    idx = np.nonzero(req.status >= ReqStatus.FINISHED)[0]
    return idx[np.lexsort((idx, req.arrival_ms[idx]))]


class _Admissions:
    """Each request's admission-log entries in log order, without a Python list per request."""

    def __init__(self, log, count: int, n: int) -> None:
        self.log = log
        if log is None:
            self.order = np.zeros(0, dtype=np.int64)
            self.offsets = np.zeros(n + 1, dtype=np.int64)
            return
        req = log.req[:count]
        self.order = np.argsort(req, kind="stable")
        self.offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(req, minlength=n), out=self.offsets[1:])

    def batch(self, idx: np.ndarray) -> list[list[tuple]]:
        """[(at_ms, reused, readmit, pool), ...] for each request of idx."""
        if self.log is None:
            return [[] for _ in range(len(idx))]
        lo, hi = self.offsets[idx], self.offsets[idx + 1]
        rows = self.order[
            np.concatenate([np.arange(a, b) for a, b in zip(lo, hi, strict=True)])
            if len(idx)
            else np.zeros(0, dtype=np.int64)
        ]
        entries = list(
            zip(
                self.log.at_ms[rows].tolist(),
                self.log.reused[rows].tolist(),
                self.log.readmit[rows].tolist(),
                self.log.pool[rows].tolist(),
                strict=True,
            )
        )
        out, k = [], 0
        for m in (hi - lo).tolist():
            out.append(entries[k : k + m])
            k += m
        return out


class RequestRecords:
    """The records of one run's terminal requests, in AISimulate's order; iterable (one dict
    at a time) and `batches()` (lists of at most BATCH dicts). Nothing is held but the arrays."""

    def __init__(self, result, run_id: str) -> None:
        self.result = result
        self.run_id = run_id
        # a run of two pools joined by the handoff adds the P/D fields of each record
        self.disaggregated = len(result.pools) > 1
        self.req = result.requests
        self.order = terminal_order(self.req)
        n = len(self.req.prompt_len)
        count = int(result.stats.counters[CNT_LOG]) if result.log is not None else 0
        self.admissions = _Admissions(result.log, count, n)
        # where each request's latency went (requests.parquet columns; None if not kept)
        self.parts = request_parts(result)

    def __len__(self) -> int:
        return len(self.order)

    def __iter__(self) -> Iterator[dict]:
        for batch in self.batches():
            yield from batch

    def batches(self, size: int = BATCH) -> Iterator[list[dict]]:
        for _, rows in self.indexed_batches(size):
            yield rows

    def indexed_batches(self, size: int = BATCH) -> Iterator[tuple[np.ndarray, list[dict]]]:
        """`batches` with each record's request index (creation order; a trace's
        `request_<row>` session id names its file row instead)."""
        make = self._pd_batch if self.disaggregated else self._batch
        for start in range(0, len(self.order), size):
            idx = self.order[start : start + size]
            yield idx, make(idx)

    def _common(self, idx: np.ndarray) -> list[dict]:
        """The fields both modes fill the same way, one dict per request of idx."""
        req = self.req
        traffic = self.result.traffic
        rows = []
        for (
            i,
            n_out,
            arrival,
            first,
            last,
            second,
            n_adm,
            status,
            terminal,
            prompt,
            requested,
            reused_first,
        ) in zip(
            idx.tolist(),
            req.num_generated[idx].tolist(),
            req.arrival_ms[idx].tolist(),
            req.first_token_ms[idx].tolist(),
            req.last_token_ms[idx].tolist(),
            req.second_token_ms[idx].tolist(),
            req.num_admissions[idx].tolist(),
            req.status[idx].tolist(),
            req.terminal_ms[idx].tolist(),
            req.prompt_len[idx].tolist(),
            traffic.requested_output_len[idx].tolist(),
            req.reused_first[idx].tolist(),
            strict=True,
        ):
            first, last, second = _opt(first), _opt(last), _opt(second)
            rows.append(
                {
                    "admission_count": n_adm,
                    "arrival_time_ms": arrival,
                    "dispatched_at_ms": None,
                    "e2e_latency_ms": None if last is None else last - arrival,
                    "first_admission_reused_input_tokens": reused_first,
                    "first_token_ms": first,
                    "input_length": prompt,
                    "itl_ms": (last - first) / (n_out - 1) if n_out >= 2 else None,
                    "last_token_ms": last,
                    "output_length": n_out,
                    "pressure_record_ordinals": [],
                    "requested_output_length": requested,
                    "session_id": session_id(traffic, i),
                    "terminal_status": _STATUS_NAMES.get(status, "failed"),
                    "terminal_time_ms": terminal,
                    "ttft_ms": None if first is None else first - arrival,
                    "ttst_ms": None if second is None else second - first,
                    "turn_index": turn_index(traffic, i),
                    "uuid": request_uuid(self.run_id, i),
                }
            )
        return rows

    def _batch(self, idx: np.ndarray) -> list[dict]:
        req = self.req
        dp = self.result.pools[0].spec.dp_size
        rows = self._common(idx)
        for row, hist, r, first_admit, reused_max in zip(
            rows,
            self.admissions.batch(idx),
            req.rank[idx].tolist(),
            req.first_admit_ms[idx].tolist(),
            req.reused_max[idx].tolist(),
            strict=True,
        ):
            n_adm = row["admission_count"]
            row.update(
                {
                    "admission_history": [
                        {
                            "admission_ordinal": k,
                            "at_ms": at,
                            "is_readmission": readmit,
                            "pool": "agg",
                            "pool_admission_ordinal": k,
                            "reused_input_tokens": reused,
                        }
                        for k, (at, reused, readmit, _pool) in enumerate(hist)
                    ],
                    "decode_admit_ms": None,
                    "decode_reused_input_tokens": None,
                    "decode_route_overlap_tokens": None,
                    "decode_worker_idx": r,
                    "destination_activated_ms": None,
                    "destination_reserved_ms": None,
                    "first_admit_ms": _opt(first_admit),
                    "prefill_admit_ms": None,
                    "prefill_route_overlap_tokens": None,
                    "prefill_worker_idx": None,
                    "readmission_count": max(0, n_adm - 1),
                    "reused_input_tokens": reused_max,
                    "routing_history": [_route("agg", r, dp)],
                    "source_held_ms": None,
                    "source_released_ms": None,
                }
            )
        return self._with_tokenized(rows, idx)

    def _with_tokenized(self, rows: list[dict], idx: np.ndarray) -> list[dict]:
        """Runs with a tokenizer add each record's `tokenized_ms` (as AISimulate does)."""
        first = self.result.pools[0]
        if first.spec.tokenization[0]:
            for row, done in zip(rows, first.req.tokenized_ms[idx].tolist(), strict=True):
                row["tokenized_ms"] = _opt(done)
        return rows

    def _pd_batch(self, idx: np.ndarray) -> list[dict]:
        """Records of a disaggregated run, with the P/D timestamps of docs/rules.md 9.8."""
        result = self.result
        prefill, decode = result.pools
        rp, rd, pd = prefill.req, decode.req, result.handoff
        rows = self._common(idx)
        for (
            row,
            hist,
            r_p,
            r_d,
            p_admit,
            d_admit,
            d_reused,
            p_reused,
            activated,
            reserved,
            held,
            released,
            status_p,
        ) in zip(
            rows,
            self.admissions.batch(idx),
            rp.rank[idx].tolist(),
            rd.rank[idx].tolist(),
            rp.first_admit_ms[idx].tolist(),
            rd.first_admit_ms[idx].tolist(),
            rd.reused_max[idx].tolist(),
            rp.reused_max[idx].tolist(),
            pd.activated_ms[idx].tolist(),
            pd.reserved_ms[idx].tolist(),
            pd.held_ms[idx].tolist(),
            pd.released_ms[idx].tolist(),
            rp.status[idx].tolist(),
            strict=True,
        ):
            per_pool = {1: 0, 2: 0}
            admissions = []
            for k, (at, reused, readmit, pool) in enumerate(hist):
                admissions.append(
                    {
                        "admission_ordinal": k,
                        "at_ms": at,
                        "is_readmission": readmit,
                        "pool": _POOL_NAMES[pool],
                        "pool_admission_ordinal": per_pool.get(pool, 0),
                        "reused_input_tokens": reused,
                    }
                )
                per_pool[pool] = per_pool.get(pool, 0) + 1
            routes = []
            if r_p >= 0:
                routes.append(_route("prefill", r_p, prefill.spec.dp_size))
            if r_d >= 0:
                routes.append(_route("decode", r_d, decode.spec.dp_size))
            # a failed handoff was routed to a decode rank that never took it
            routed = r_d >= 0
            decoded = routed and status_p != ReqStatus.FAILED
            row.update(
                {
                    "admission_history": admissions,
                    "decode_admit_ms": _opt(d_admit),
                    # the hit of decode-side readmissions (activation itself reports none)
                    "decode_reused_input_tokens": d_reused if decoded else None,
                    "decode_route_overlap_tokens": 0 if routed else None,
                    "decode_worker_idx": r_d if decoded else None,
                    "destination_activated_ms": _opt(activated),
                    "destination_reserved_ms": _opt(reserved),
                    "first_admit_ms": _opt(p_admit),
                    "prefill_admit_ms": _opt(p_admit),
                    "prefill_route_overlap_tokens": 0 if r_p >= 0 else None,
                    "prefill_worker_idx": r_p if r_p >= 0 else None,
                    "readmission_count": max(0, row["admission_count"] - (2 if decoded else 1)),
                    # per request the prefill side's reuse; the summary ratio also counts the decode
                    # side
                    "reused_input_tokens": p_reused,
                    "routing_history": routes,
                    "source_held_ms": _opt(held),
                    "source_released_ms": _opt(released),
                }
            )
        return self._with_tokenized(rows, idx)


def request_uuid(seed: str, i: int) -> str:
    """A version-4-shaped uuid derived from the run identity: identical runs, identical files."""
    raw = bytearray(hashlib.sha256(f"{seed}:{i}".encode()).digest()[:16])
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    return str(uuidlib.UUID(bytes=bytes(raw)))


def session_id(traffic, i: int) -> str:
    """AISimulate's names: `session_<index>` (synthetic; a multi-turn session's index),
    `request_<file row, 1-based>` (trace), a session trace's own ids."""
    if traffic.session_names is not None:
        return traffic.session_names[i]
    if traffic.row is None:
        return f"session_{i // traffic.workload.turns}"
    return f"request_{int(traffic.row[i]) + 1}"


def turn_index(traffic, i: int) -> int:
    """Turn of request i within its session (0 without sessions)."""
    return 0 if traffic.turn is None else int(traffic.turn[i])


_POOL_NAMES = {0: "agg", 1: "prefill", 2: "decode"}


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
