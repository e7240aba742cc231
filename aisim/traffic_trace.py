"""Trace replay (docs/rules.md 10.1, 10.2): Mooncake JSONL rows -> the request arrays of
aisim.traffic.

A row names its prompt by ``hash_ids``, one id per ``block_size``-token *source* block. AISimulate
gives every token of a source block that block's id (renumbered, which changes nothing but the
names), so two prompts hold identical tokens exactly as far as their leading hash ids agree. An
engine block j (``engine_bs`` tokens) therefore has the content of source blocks 0..s_j with
s_j = ((j + 1) x engine_bs - 1) // block_size, whatever the two block sizes are, and its content
key is (chain hash of those source ids, j).

Loading is columnar: pyarrow's JSON reader fills the columns, numpy checks them and hashes the
prefixes; no Python object is made per row. Only when a check fails is the file re-read line by
line, to name the first bad line (see :func:`_scan_rows`).
"""

from __future__ import annotations

import io
import json
import math
import os
from typing import NamedTuple

import numpy as np

from aisim.config.checks import show
from aisim.engine.bounds import (
    CLOCK_MS_MAX,
    TOKENS_MAX,
    check_state_fits,
    never_finishing,
    never_finishing_message,
)
from aisim.errors import CapacityError, ConfigError, note
from aisim.traffic import Traffic, truncated_outputs

_U64_MAX = (1 << 64) - 1
_SESSION_KEYS = ("session_id", "delay", "delay_ms")
_MIX_A = np.uint64(0x9E3779B97F4A7C15)
_MIX_B = np.uint64(0xBF58476D1CE4E5B9)
_MIX_C = np.uint64(0x94D049BB133111EB)
_SEED = np.uint64(0x243F6A8885A308D3)


class TraceRows(NamedTuple):
    """The rows of one trace file, in file order."""

    timestamp_ms: np.ndarray  # float64[N], 0 where the row has none
    input_len: np.ndarray  # int64[N] prompt tokens (defaulted, checked against the hash ids)
    output_len: np.ndarray  # int64[N] requested output tokens
    hash_off: np.ndarray  # int64[N + 1] CSR offsets into hash_ids
    hash_ids: np.ndarray  # uint64[H] source block ids
    line: np.ndarray | None = None  # int64[N] the file line (1-based) of each row
    # multi-turn session fields (None when no row has one; aisim.trace_sessions)
    session: list | None = None  # per row its `session_id`, or None
    delay_ms: np.ndarray | None = None  # float64[N] `delay` / `delay_ms`, NaN where absent
    stamped: np.ndarray | None = None  # bool[N] the row carries a timestamp


def _open_regular(path: str):
    """The trace file opened for reading; a directory, FIFO or device is refused by name (a
    FIFO would block for ever, a device never end)."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise ConfigError(f"{path}: trace file not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the trace: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        raise ConfigError(f"{path}: not a regular file; give a JSONL trace file")
    try:
        return open(path, "rb")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the trace: {exc.strerror}") from None


def _row_lines(path: str) -> np.ndarray:
    """int64[rows]: the 1-based line number of every line holding more than whitespace."""
    with _open_regular(path) as f:
        data = np.frombuffer(f.read(), dtype=np.uint8)
    if len(data) == 0:
        return np.zeros(0, dtype=np.int64)
    blank = (data == 0x20) | (data == 0x09) | (data == 0x0D) | (data == 0x0A)
    ends = np.flatnonzero(data == 0x0A)
    if len(ends) == 0 or ends[-1] != len(data) - 1:
        ends = np.append(ends, len(data) - 1)
    content = np.concatenate(([0], np.cumsum(~blank, dtype=np.int64)))
    starts = np.concatenate(([0], ends[:-1] + 1))
    filled = content[ends + 1] - content[starts] > 0
    return np.flatnonzero(filled).astype(np.int64) + 1


# --------------------------------------------------------------------------- reading


def read_trace(path: str, block_size: int) -> TraceRows:
    """Read and check a Mooncake JSONL trace; ConfigError names the file and first bad line."""
    lines = _row_lines(path)
    try:
        rows = _read_columnar(path, block_size)
        if len(rows.output_len) != len(lines):
            raise _NeedsScan  # e.g. two objects on one line: the scan names it
    except _NeedsScan:
        rows = _scan_rows(path, block_size)  # raises at the first bad line
    if len(rows.output_len) == 0:
        raise ConfigError(f"{path}: the trace holds no request; give a file with rows")
    return rows._replace(line=lines)


class _NeedsScan(Exception):
    """The columnar reader met something it cannot explain by line; scan the file instead."""


def _read_columnar(path: str, block_size: int) -> TraceRows:
    import pyarrow as pa
    import pyarrow.json as pj

    schema = pa.schema(
        [
            ("timestamp", pa.float64()),
            ("created_time", pa.float64()),
            ("input_length", pa.int64()),
            ("input_tokens", pa.int64()),
            ("output_length", pa.int64()),
            ("output_tokens", pa.int64()),
            ("hash_ids", pa.list_(pa.uint64())),
        ]
    )
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="infer")
    try:
        table = pj.read_json(
            path, parse_options=options, read_options=pj.ReadOptions(block_size=1 << 24)
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise _NeedsScan from exc
    if any(k in table.column_names for k in _SESSION_KEYS):
        raise _NeedsScan
    n = table.num_rows

    def column(*names: str, fill: float) -> np.ndarray:
        """The first non-null of several alias columns, `fill` where every one is null."""
        out, missing = None, None
        for name in names:
            col = table.column(name).combine_chunks()
            vals = col.fill_null(fill).to_numpy(zero_copy_only=False)
            null = col.is_null().to_numpy(zero_copy_only=False)
            if out is None:
                out, missing = vals, null
            else:
                out = np.where(missing, vals, out)
                missing = missing & null
        return out, missing

    out_len, _ = column("output_length", "output_tokens", fill=-1)
    in_len, in_missing = column("input_length", "input_tokens", fill=-1)
    stamp, stamp_missing = column("timestamp", "created_time", fill=0.0)
    hashes = table.column("hash_ids").combine_chunks()
    if hashes.null_count:
        raise _NeedsScan
    hash_off = hashes.offsets.to_numpy().astype(np.int64) - int(hashes.offsets[0].as_py())
    hash_ids = hashes.flatten().to_numpy(zero_copy_only=False).astype(np.uint64, copy=False)
    counts = np.diff(hash_off)
    capacity = counts * block_size
    in_len = np.where(in_missing, capacity, in_len)  # a row without a length fills its ids
    bad = (
        (out_len < 1)
        | (out_len > TOKENS_MAX)
        | (counts == 0)
        | (in_len < 1)
        | (in_len > capacity)
        | ~np.isfinite(stamp)  # NaN / Infinity literals: the scan refuses them by line
    )
    if n == 0 or bad.any():
        raise _NeedsScan
    stamp = np.where(stamp_missing, 0.0, stamp)
    return TraceRows(
        stamp.astype(np.float64),
        in_len.astype(np.int64),
        out_len.astype(np.int64),
        hash_off,
        hash_ids,
    )


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _field(row: dict, names: tuple[str, str]):
    for name in names:
        if name in row and row[name] is not None:
            return name, row[name]
    return names[0], None


def _scan_rows(path: str, block_size: int) -> TraceRows:
    """Slow line-by-line reading: the reference for what a valid row is, and the error path."""
    stamps: list[float] = []
    ins: list[int] = []
    outs: list[int] = []
    offs = [0]
    ids: list[int] = []
    sessions: list = []
    delays: list[float] = []
    stamped: list[bool] = []
    with _open_regular(path) as raw, io.TextIOWrapper(raw, encoding="utf-8", errors="replace") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{line_no}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(
                    f"{where}: not a JSON object ({exc.msg}); write one JSON object per line"
                ) from None
            except RecursionError:
                raise ConfigError(
                    f"{where}: nested too deeply to be a trace row; write one "
                    "flat JSON object per line"
                ) from None
            if not isinstance(row, dict):
                raise ConfigError(f"{where}: each row must be a JSON object")
            session, delay = _session_fields(row, where)
            h = row.get("hash_ids")
            if (
                not isinstance(h, list)
                or not h
                or not all(_is_int(x) and 0 <= x <= _U64_MAX for x in h)
            ):
                raise ConfigError(
                    f"{where}: hash_ids must be a non-empty list of unsigned 64-bit integers"
                )
            name, out = _field(row, ("output_length", "output_tokens"))
            if not _is_int(out) or not 1 <= out <= TOKENS_MAX:
                raise ConfigError(
                    f"{where}: {name} must be a positive integer up to "
                    f"{TOKENS_MAX} (got {show(out)})"
                )
            capacity = len(h) * block_size
            name, inp = _field(row, ("input_length", "input_tokens"))
            if inp is None:
                inp = capacity
            if not _is_int(inp) or inp < 1:
                raise ConfigError(f"{where}: {name} must be a positive integer (got {show(inp)})")
            if inp > capacity:
                raise ConfigError(
                    f"{where}: {name} {inp} exceeds the {len(h)} hash ids x block_size "
                    f"{block_size} = {capacity} tokens; shorten it or raise "
                    "traffic.source.block_size"
                )
            name, ts = _field(row, ("timestamp", "created_time"))
            stamped.append(ts is not None)
            if ts is None:
                ts = 0.0
            if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
                raise ConfigError(
                    f"{where}: {name} must be a number of milliseconds, finite (got {show(ts)})"
                )
            stamps.append(float(ts))
            ins.append(inp)
            outs.append(out)
            ids.extend(h)
            offs.append(len(ids))
            sessions.append(session)
            delays.append(delay)
    with_sessions = any(s is not None for s in sessions) or not all(map(math.isnan, delays))
    return TraceRows(
        np.array(stamps, dtype=np.float64),
        np.array(ins, dtype=np.int64),
        np.array(outs, dtype=np.int64),
        np.array(offs, dtype=np.int64),
        np.array(ids, dtype=np.uint64),
        session=sessions if with_sessions else None,
        delay_ms=np.array(delays, dtype=np.float64) if with_sessions else None,
        stamped=np.array(stamped, dtype=bool) if with_sessions else None,
    )


def _session_fields(row: dict, where: str) -> tuple[str | None, float]:
    """(session_id or None, delay ms or NaN) of a row, checked."""
    session = row.get("session_id")
    if session is not None and not isinstance(session, str):
        raise ConfigError(f"{where}: session_id must be a string (got {show(session)})")
    given = [k for k in ("delay", "delay_ms") if row.get(k) is not None]
    if len(given) > 1:
        raise ConfigError(f"{where}: delay and delay_ms both set; keep one")
    if not given:
        return session, math.nan
    delay = row[given[0]]
    if isinstance(delay, bool) or not isinstance(delay, int | float) or not 0 <= delay < math.inf:
        raise ConfigError(
            f"{where}: {given[0]} must be a finite number of milliseconds >= 0 (got {show(delay)})"
        )
    return session, float(delay)


# --------------------------------------------------------------------------- prefix keys


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on arrays (uint64 arithmetic wraps)."""
    z = x + _MIX_A
    z = (z ^ (z >> np.uint64(30))) * _MIX_B
    z = (z ^ (z >> np.uint64(27))) * _MIX_C
    return z ^ (z >> np.uint64(31))


def _source_chain(rows: TraceRows) -> np.ndarray:
    """uint64[H]: hash of each row's source ids up to and including that position."""
    off, ids = rows.hash_off, rows.hash_ids
    counts = np.diff(off)
    chain = np.empty(len(ids), dtype=np.uint64)
    mixed = _mix(ids)
    with np.errstate(over="ignore"):
        live = np.arange(len(counts))
        prev = np.full(len(counts), _SEED, dtype=np.uint64)
        k = 0
        while len(live):
            pos = off[live] + k
            h = _mix(prev ^ mixed[pos])
            chain[pos] = h
            keep = counts[live] > k + 1
            live, prev = live[keep], h[keep]
            k += 1
    return chain


def prefix_keys(rows: TraceRows, engine_bs: int, block_size: int):
    """(pfx_start int64[N], pfx_len int32[N], pfx_hash uint64[H]) per file row.

    pfx_hash holds one prefix hash per source block (the rows' hash ids, chained), so memory
    follows the trace, not its tokens; the kernels find engine block j's entry through
    aisim.state.prefix_keys. pfx_len counts the leading engine blocks whose source prefix
    another row also has: later blocks hold content no other request has (keyed per request).
    """
    off = rows.hash_off
    n = len(rows.output_len)
    chain = _source_chain(rows)
    _, inverse, occurrences = np.unique(chain, return_inverse=True, return_counts=True)
    shared_pos = occurrences[inverse] >= 2
    del inverse, occurrences
    # the chain makes shared positions a prefix of each row: count them per row
    shared_src = np.add.reduceat(shared_pos.astype(np.int64), off[:-1]) if n else np.zeros(0)
    full_blocks = rows.input_len // engine_bs
    pfx_len = np.minimum(full_blocks, shared_src * block_size // engine_bs)
    return off[:-1].copy(), pfx_len.astype(np.int32), chain


# --------------------------------------------------------------------------- traffic


def trace_traffic(spec, workload) -> Traffic:
    """The request arrays of a trace run as the pool `spec` receives them: arrival order,
    lengths and prefix keys."""
    w = workload
    rows = read_trace(w.trace_path, w.trace_block_size)
    n = len(rows.output_len)
    if rows.session is not None:
        from aisim.trace_sessions import session_trace_traffic

        traffic = session_trace_traffic(spec, w, rows)
        _check_can_finish(spec, traffic)
        longest = int((traffic.prompt_len + traffic.output_len).max())
        check_state_fits(
            spec, n, longest, w.trace_path, f"traffic.source.paths ({n:,} rows)", sessions=True
        )
        return traffic
    if w.load == "trace_timestamps":
        # requests arrive at their own timestamps, re-based to the earliest, in a stable order
        # (AISimulate replays out-of-order rows in timestamp order too: said, not refused)
        order = np.argsort(rows.timestamp_ms, kind="stable")
        stamps = rows.timestamp_ms[order]
        arrival = (stamps - stamps[0]) / w.trace_speedup
        _check_clock(w, rows, order, arrival)
        early = int(
            np.count_nonzero(rows.timestamp_ms[1:] < np.maximum.accumulate(rows.timestamp_ms)[:-1])
        )
        if early:
            note(
                f"{w.trace_path}: {early} of {n} rows carry a timestamp earlier than a row "
                "above them; requests are replayed in timestamp order"
            )
    else:  # closed loop: file order, arrivals set by the kernel
        order = np.arange(n, dtype=np.int64)
        arrival = np.zeros(n, dtype=np.float64)
    pfx_start, pfx_len, pfx_hash = prefix_keys(rows, spec.block_size, w.trace_block_size)
    prompt = rows.input_len[order]
    requested = rows.output_len[order]
    out = truncated_outputs(spec, prompt, requested)
    traffic = Traffic(
        prompt_len=prompt,
        requested_output_len=requested,
        output_len=out,
        arrival_ms=np.ascontiguousarray(arrival, dtype=np.float64),
        pfx_start=pfx_start[order],
        pfx_len=pfx_len[order],
        pfx_hash=pfx_hash,
        workload=w,
        row=order.astype(np.int64),
        pfx_src_tokens=w.trace_block_size,
    )
    _check_can_finish(spec, traffic)
    check_state_fits(
        spec, n, int((prompt + out).max()), w.trace_path, f"traffic.source.paths ({n:,} rows)"
    )
    return traffic


def check_trace(spec, workload) -> None:
    """What `aisim validate` checks of a trace: every row readable and valid, every request
    able to finish on the deployment, timestamps the clock resolves (as a run reads them)."""
    trace_traffic(spec, workload)


def _check_clock(workload, rows: TraceRows, order: np.ndarray, arrival: np.ndarray) -> None:
    """Arrivals beyond CLOCK_MS_MAX would leave the float ms clock coarser than a
    nanosecond: pass times would silently shrink or vanish (a 1e300 ms row gets TTFT 0)."""
    last = len(arrival) - 1
    if arrival[last] <= CLOCK_MS_MAX:
        return
    i = int(order[last])
    raise ConfigError(
        f"{workload.trace_path}:{int(rows.line[i])}: timestamp {rows.timestamp_ms[i]:g} ms lies "
        f"{arrival[last]:g} ms after the earliest row (after the speedup), beyond the "
        f"{CLOCK_MS_MAX:g} ms (~50 days) the simulated clock resolves to the nanosecond; "
        "re-base or trim the trace"
    )


def _check_can_finish(spec, traffic: Traffic) -> None:
    """Reject a trace holding a request that could never finish (AISimulate loops or aborts).
    Under a cut-off the run ends at the cut-off whatever such a request does, and one that
    arrives after it never runs, so nothing is rejected up front (AISimulate runs it)."""
    if traffic.workload.max_time_ms != float("inf"):
        return
    p, o = traffic.prompt_len, traffic.output_len
    stuck, need, out = never_finishing(spec, p, o)
    hit = np.nonzero(stuck)[0]
    if len(hit):
        i = int(hit[0])
        where = f"{traffic.workload.trace_path}:{_line(traffic, i)}: engine.workers.{spec.role}"
        raise CapacityError(
            never_finishing_message(where, int(p[i]), int(out[i]), int(need[i]), spec)
        )


def _line(traffic: Traffic, i: int) -> str:
    """File line of request i (counting blank lines)."""
    return str(int(_row_lines(traffic.workload.trace_path)[int(traffic.row[i])]))
