"""Multi-turn sessions in Mooncake traces (docs/rules.md 10.6): rows that carry `session_id`,
`delay` or `delay_ms`.

A session's rows are its turns, in file order; sessions are ordered by their first row. Turn 0
arrives at its timestamp (re-based to the earliest first turn, divided by the speedup), or when
a concurrency slot frees; turn k + 1 at turn k's terminal time plus its delay: the row's
`delay`, else its timestamp minus the session's previous timestamp, else 0. With `mooncake` a
row's hash ids are its whole prompt; with `mooncake-delta` they are the tokens it adds to the
conversation, which also holds every earlier turn's output (then a turn reuses its
predecessor's blocks as a synthetic session's turn does, docs/rules.md 10.5).
"""

from __future__ import annotations

import math

import numpy as np

from aisim.errors import ConfigError, NotAvailableError
from aisim.traffic import Traffic


def session_trace_traffic(spec, workload, rows) -> Traffic:
    """The request arrays of a session trace as pool `spec` receives them, session by session
    (the kernel releases later turns, kernels/sessions.py)."""
    from aisim.engine.spec import output_for
    from aisim.traffic import truncated_outputs
    from aisim.traffic_session import rejected
    from aisim.traffic_trace import prefix_keys

    w = workload
    if spec.role != "aggregated":
        raise NotAvailableError(
            f"{w.trace_path}: session_id / delay: multi-turn trace sessions in P/D are not "
            "available yet in aisim; run them on an aggregated deployment"
        )
    names, first_ts, session_of, turn, delay = _sessions(w.trace_path, rows)
    n = len(turn)
    order = np.argsort(session_of, kind="stable")  # session by session, turns in file order
    turn, delay, session_of = turn[order], delay[order], session_of[order]
    first = np.flatnonzero(turn == 0)  # each session's first request (sessions in order)
    arrival = np.zeros(n, dtype=np.float64)
    if w.load == "trace_timestamps":
        stamped = ~np.isnan(first_ts)
        base = first_ts[stamped].min() if stamped.any() else 0.0
        arrival[first] = np.where(stamped, (first_ts - base) / w.trace_speedup, 0.0)
        delay = delay / w.trace_speedup
    pfx_start, pfx_len, pfx_hash = prefix_keys(rows, spec.block_size, w.trace_block_size)
    pfx_start, pfx_len = pfx_start[order], pfx_len[order]
    requested = rows.output_len[order]
    new = rows.input_len[order]
    conv = np.arange(n, dtype=np.int32)
    prompt = new.copy()
    out = truncated_outputs(spec, prompt, requested)
    if w.trace_format == "mooncake-delta":
        # a turn holds the conversation so far: it extends its first turn's prefix
        head = first[session_of]
        conv = head.astype(np.int32)
        pfx_start, pfx_len = pfx_start[head], pfx_len[head]
        for i in range(n):
            if turn[i] > 0:
                q = i - 1
                emitted = 0 if rejected(spec, int(prompt[q]), int(out[q])) else int(out[q])
                prompt[i] = prompt[q] + emitted + new[i]
                out[i] = output_for(spec, int(prompt[i]), int(requested[i]))
    return Traffic(
        prompt_len=prompt.astype(np.int64),
        requested_output_len=requested.astype(np.int64),
        output_len=out.astype(np.int64),
        arrival_ms=arrival,
        pfx_start=pfx_start,
        pfx_len=pfx_len,
        pfx_hash=pfx_hash,
        workload=w,
        row=order.astype(np.int64),
        pfx_src_tokens=w.trace_block_size,
        turn=turn.astype(np.int32),
        turn_delay_ms=delay,
        conv=conv,
        session_names=[names[s] for s in session_of.tolist()],
    )


def _sessions(path: str, rows):
    """(session names, first-turn timestamps (NaN: none), session of each row, turn of each
    row, delay of each row) in file order; ConfigError names a row whose delay is invalid."""
    index: dict[str, int] = {}
    names: list[str] = []
    first_ts: list[float] = []
    last_ts: list[float] = []
    turns_seen: list[int] = []
    n = len(rows.output_len)
    session_of = np.empty(n, dtype=np.int64)
    turn = np.empty(n, dtype=np.int64)
    delay = np.zeros(n, dtype=np.float64)
    for r in range(n):
        line = int(rows.line[r])
        name = rows.session[r] if rows.session[r] is not None else f"request_{line}"
        ts = float(rows.timestamp_ms[r]) if rows.stamped[r] else math.nan
        given = float(rows.delay_ms[r])
        s = index.get(name)
        if s is None:
            s = index[name] = len(names)
            names.append(name)
            first_ts.append(ts)
            last_ts.append(ts)
            turns_seen.append(0)
        k = turns_seen[s]
        turns_seen[s] = k + 1
        if k == 0:
            if not math.isnan(given) and given != 0.0:
                raise ConfigError(
                    f"{path}:{line}: delay {given:g} on the first turn of session {name!r}; a "
                    "session starts at its timestamp (remove the delay)"
                )
        elif not math.isnan(given):
            delay[r] = given
        elif not math.isnan(ts):
            if math.isnan(last_ts[s]):
                raise ConfigError(
                    f"{path}:{line}: session {name!r} has no earlier timestamp to take this "
                    "row's delay from; give it a delay"
                )
            delay[r] = ts - last_ts[s]
            if delay[r] < 0:
                raise ConfigError(
                    f"{path}:{line}: timestamp {ts:g} is earlier than session {name!r}'s "
                    f"previous one ({last_ts[s]:g}); give the turn a delay instead"
                )
        if not math.isnan(ts):
            last_ts[s] = ts
        session_of[r], turn[r] = s, k
    return names, np.array(first_ts, dtype=np.float64), session_of, turn, delay
