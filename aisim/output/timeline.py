"""`aisim trace`: a run folder as a Perfetto (or Chrome JSON) timeline (docs/timeline.md).

Tracks: per pool worker, one track per scheduler rank with a slice per pass (what it scheduled
as arguments) and counters of KV blocks used / cached and running / waiting requests; per
request, one track with its phases (queued, prefill, decode; in P/D also the wait for a decode
slot, the KV transfer and the decode-side queue) and an instant at each readmission after a
preemption. Read from passes.parquet (--capture-passes) and requests.jsonl
(--capture-per-request).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from aisim.errors import AisimError


@dataclass(frozen=True)
class Cut:
    """What to keep: requests by index range and a simulated-time window (ms)."""

    first_request: int = 0
    last_request: int | None = None  # inclusive; None: to the end
    start_ms: float = float("-inf")
    end_ms: float = float("inf")

    def keeps_request(self, index: int) -> bool:
        return index >= self.first_request and (
            self.last_request is None or index <= self.last_request
        )

    def overlaps(self, start: float, end: float) -> bool:
        return end >= self.start_ms and start <= self.end_ms


def _ns(ms: float) -> int:
    return round(ms * 1_000_000)


class _Uuids:
    def __init__(self) -> None:
        self.next = 1

    def __call__(self) -> int:
        self.next += 1
        return self.next - 1


def build(run_dir: Path, writer, cut: Cut = Cut()) -> dict:
    """Fill `writer` (aisim.output.perfetto.PerfettoTrace or ChromeTrace) from the run folder;
    returns counts of what was written."""
    passes_path = run_dir / "passes.parquet"
    if not run_dir.is_dir():
        raise AisimError(f"{run_dir}: not a folder (aisim predict -o RUN_DIR writes one)")
    if not passes_path.is_file():
        raise AisimError(
            f"{run_dir}: no passes.parquet; run aisim predict -o {run_dir} --capture-passes "
            "(and --capture-per-request for the request tracks)"
        )
    uuid = _Uuids()
    n_passes = _passes(passes_path, writer, uuid, cut)
    records_path = run_dir / "requests.jsonl"
    n_requests = _requests(records_path, writer, uuid, cut) if records_path.is_file() else 0
    return {"passes": n_passes, "requests": n_requests, "request_tracks": records_path.is_file()}


_COUNTERS = ("kv_blocks_used", "kv_blocks_cached", "running", "waiting")


def _pass_name(num_prefill: int, num_decode: int) -> str:
    if num_prefill and num_decode:
        return "prefill + decode"
    return "prefill" if num_prefill else "decode" if num_decode else "idle"


def _passes(path: Path, writer, uuid, cut: Cut) -> int:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # a truncated or foreign file
        raise AisimError(f"{path}: not a readable passes table ({exc})") from None
    cols = {name: table.column(name).to_pylist() for name in table.column_names}
    tracks: dict[tuple, tuple[int, ...]] = {}
    roots: dict[tuple, int] = {}
    written = 0
    for i in range(table.num_rows):
        start, end = cols["start_ms"][i], cols["end_ms"][i]
        if not cut.overlaps(start, end):
            continue
        role, worker, rank = cols["role"][i], cols["worker"][i], cols["rank"][i]
        if (role, worker) not in roots:
            roots[role, worker] = uuid()
            writer.track(roots[role, worker], f"{role} worker {worker}")
        if (role, rank) not in tracks:
            parent = roots[role, worker]
            ids = tuple(uuid() for _ in range(5))
            writer.track(ids[0], f"rank {rank} passes", parent)
            for tid, what in zip(
                ids[1:], ("KV blocks used", "KV blocks cached", "running", "waiting"), strict=True
            ):
                writer.track(tid, f"rank {rank} {what}", parent, counter=True)
            tracks[role, rank] = ids
        ids = tracks[role, rank]
        n_pre, n_dec = cols["num_prefill"][i], cols["num_decode"][i]
        args = {
            "prefill_requests": n_pre,
            "decode_requests": n_dec,
            "tokens_scheduled": cols["tokens_scheduled"][i],
            "prefill_tokens": cols["prefill_tokens"][i],
            "mean_decode_context": cols["mean_decode_context"][i],
            "preemptions": cols["preemptions"][i],
        }
        counters = zip(ids[1:], (cols[c][i] for c in _COUNTERS), strict=True)
        writer.slice(ids[0], _pass_name(n_pre, n_dec), _ns(start), _ns(end), args, counters)
        written += 1
    return written


def _phases(rec: dict) -> list[tuple[str, float, float]]:
    """(name, start ms, end ms) of a request's phases, in order, each starting where the one
    before ended at the earliest."""
    arrival = rec["arrival_time_ms"]
    terminal = rec["terminal_time_ms"]
    if rec["terminal_status"] != "completed":
        return [(rec["terminal_status"], arrival, terminal)]
    if rec.get("prefill_admit_ms") is None:  # one pool
        points = [
            ("queued", rec["first_admit_ms"]),
            ("prefill", rec["first_token_ms"]),
            ("decode", rec["last_token_ms"]),
        ]
    else:
        points = [
            ("queued", rec["prefill_admit_ms"]),
            ("prefill", rec["source_held_ms"]),
            ("waiting for a decode slot", rec["destination_reserved_ms"]),
            ("KV transfer", rec["destination_activated_ms"]),
            ("decode queued", rec["decode_admit_ms"]),
            ("decode", rec["last_token_ms"]),
        ]
    if rec.get("tokenized_ms") is not None:  # engine.tokenization: tokenized before queueing
        points.insert(0, ("tokenizing", rec["tokenized_ms"]))
    out, at = [], arrival
    for name, end in points:
        if end is None:
            continue
        end = max(end, at)
        out.append((name, at, end))
        at = end
    return out


def _request_label(session_id: str, line_no: int) -> tuple[int, str]:
    """(index --requests selects by, track name) of a record: `session_<i>` / `request_<i>`
    give i; a trace's own session ids keep their name and are counted by record."""
    head, _, tail = session_id.rpartition("_")
    if head in ("session", "request") and tail.isdigit():
        return int(tail), f"request {int(tail)}"
    return line_no - 1, session_id


def _requests(path: Path, writer, uuid, cut: Cut) -> int:
    root = None
    written = 0
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            try:
                rec = json.loads(line)
                index, label = _request_label(rec["session_id"], line_no)
            except (ValueError, KeyError, AttributeError) as exc:
                raise AisimError(f"{path}:{line_no}: not a request record ({exc})") from None
            if not cut.keeps_request(index):
                continue
            phases = _phases(rec)
            if not phases or not cut.overlaps(phases[0][1], phases[-1][2]):
                continue
            if root is None:
                root = uuid()
                writer.track(root, "requests")
            track = uuid()
            turn = int(rec.get("turn_index") or 0)  # a session's later turns share its index
            writer.track(track, label + (f" turn {turn}" if turn else ""), root)
            args = {"input_tokens": rec["input_length"], "output_tokens": rec["output_length"]}
            for name, start, end in phases:
                writer.slice(track, name, _ns(start), _ns(end), args)
            for adm in rec.get("admission_history") or ():
                if adm["is_readmission"]:
                    writer.instant(track, "readmitted after preemption", _ns(adm["at_ms"]))
            written += 1
    return written
