"""The difftest sampler's traffic: synthetic requests, multi-turn sessions and small Mooncake
traces, each with the rough shape (`Workload`) the deployment sampler sizes pools around."""

from __future__ import annotations

from dataclasses import dataclass

PROMPTS = [4, 16, 60, 64, 100, 128, 200, 256, 300, 500, 512, 777, 1000, 1024, 1500, 2048, 3000]
OUTPUTS = [1, 2, 3, 8, 16, 20, 32, 50, 64, 100, 128, 200]


@dataclass
class Workload:
    """What the requests look like, enough to size KV pools and budgets around them."""

    prompts: list[int]
    outputs: list[int]
    in_flight: int  # rough number of requests that can be in flight at once
    trace: bool


def sample_traffic(d, tags: list[str], mode: str, sessions: bool = False) -> tuple[dict, Workload]:
    """The traffic of one case (`sessions`: always multi-turn sessions)."""
    if sessions:
        if d.chance(0.6):
            return _session_traffic(d, tags)
        return _trace_traffic(d, tags, mode, sessions=True)
    if mode == "aggregated" and d.chance(0.25):  # sessions in P/D: a documented refusal
        return _session_traffic(d, tags)
    if d.chance(0.28):
        return _trace_traffic(d, tags, mode, sessions=mode == "aggregated" and d.chance(0.25))
    prompt = d.one(PROMPTS)
    output = d.one(OUTPUTS)
    source: dict = {"type": "synthetic", "input_tokens": prompt, "output_tokens": output}
    if d.chance(0.3):
        source["cached_prefix_tokens"] = d.one(
            [prompt, prompt // 2, min(prompt, 64), max(1, prompt - 1), min(prompt, 100)]
        )
        tags.append("cached-prefix")
    kind = d.pick({"concurrency": 0.5, "poisson": 0.3, "constant_rate": 0.2})
    tags.append("load:" + kind)
    if kind == "concurrency":
        conc = d.one([1, 2, 3, 4, 5, 8, 12, 16, 24, 32, 64])
        load: dict = {"type": "concurrency", "concurrency": conc}
        in_flight = conc
        unit = conc
    else:
        rps = d.one([5, 10, 20, 50, 100, 200, 400, 1000])
        load = {"type": kind, "requests_per_second": rps}
        if kind == "poisson" and d.chance(0.7):
            load["seed"] = d.between(0, 1000)
        in_flight = max(1, min(64, int(rps * 0.05)))
        unit = rps
    cap = 150 if prompt * output < 50_000 else 60
    n = max(1, min(cap, int(in_flight * d.rng.uniform(1.0, 4.0)) + d.between(0, 8)))
    if d.chance(0.15):
        stop: dict = {"requests_per_load_unit": round(n / unit, 3) or 0.01}
        n = max(1, round(stop["requests_per_load_unit"] * unit))
        if n > cap:
            stop = {"requests": cap}
            n = cap
    else:
        stop = {"requests": n}
    traffic = {"source": source, "load": load, "stop": stop}
    return {"traffic": traffic, "files": {}}, Workload(
        [prompt], [output], min(in_flight, n), trace=False
    )


def _session_traffic(d, tags: list[str]) -> tuple[dict, Workload]:
    """Multi-turn synthetic sessions (docs/rules.md 10.5), some with prefix groups."""
    tags.append("sessions")
    new = d.one(PROMPTS[:-2])
    output = d.one(OUTPUTS)
    turns = d.pick({2: 0.35, 3: 0.3, 4: 0.2, 6: 0.15})
    session: dict = {"turns": turns}
    if d.chance(0.8):
        session["inter_turn_delay_ms"] = d.one([0.0, 1.0, 7.5, 50.0, 500.0, 2000.0])
    if d.chance(0.35):
        session["shared_prefix_ratio"] = d.one([0.1, 0.25, 0.5, 0.8, 1.0])
        session["prefix_groups"] = d.one([1, 2, 3, 5])
        tags.append("prefix-groups")
    source = {
        "type": "synthetic-session",
        "new_input_tokens_per_turn": new,
        "output_tokens_per_turn": output,
        "session": session,
    }
    kind = d.pick({"concurrency": 0.55, "poisson": 0.3, "constant_rate": 0.15})
    tags.append("load:" + kind)
    if kind == "concurrency":
        conc = d.one([1, 2, 3, 4, 6, 8, 16, 32])
        load: dict = {"type": "concurrency", "concurrency": conc}
        in_flight = unit = conc
    else:
        rate = d.one([1, 2, 5, 10, 20, 50, 200])
        load = {"type": kind, "sessions_per_second": rate}
        if kind == "poisson" and d.chance(0.7):
            load["seed"] = d.between(0, 1000)
        in_flight = max(1, min(32, int(rate * 0.2)))
        unit = rate
    cap = max(2, 300 // turns) if new * output < 50_000 else max(2, 100 // turns)
    n = max(1, min(cap, int(in_flight * d.rng.uniform(1.0, 3.0)) + d.between(0, 4)))
    if d.chance(0.15):
        stop: dict = {"sessions_per_load_unit": round(n / unit, 3) or 0.01}
        n = max(1, round(stop["sessions_per_load_unit"] * unit))
        if n > cap:
            stop = {"sessions": cap}
    else:
        stop = {"sessions": n}
    prompts = [new * (k + 1) + output * k for k in range(turns)]
    traffic = {"source": source, "load": load, "stop": stop}
    return {"traffic": traffic, "files": {}}, Workload(
        prompts, [output] * turns, min(in_flight, n), trace=False
    )


def _trace_traffic(d, tags: list[str], mode: str, sessions: bool = False) -> tuple[dict, Workload]:
    """A small Mooncake trace with shared prefixes (groups of leading hash ids); `sessions`:
    its rows are the turns of interleaved multi-turn sessions (docs/rules.md 10.6)."""
    tags.append("trace")
    tbs = d.pick({16: 0.15, 32: 0.3, 64: 0.3, 128: 0.15, 512: 0.1})
    rows_n = d.between(6, 80)
    groups = [
        list(range(1000 * (g + 1), 1000 * (g + 1) + d.between(1, max(1, 1536 // tbs))))
        for g in range(d.between(1, 4))
    ]
    next_id = 100_000
    t = 0.0
    rows = []
    mean_gap = d.one([0.0, 1.0, 5.0, 20.0, 60.0])
    for _ in range(rows_n):
        ids: list[int] = []
        if d.chance(0.75):
            group = d.one(groups)
            ids = group[: d.between(1, len(group))] if d.chance(0.4) else list(group)
        extra = d.between(0 if ids else 1, max(1, 1024 // tbs))
        ids += list(range(next_id, next_id + extra))
        next_id += extra
        full = len(ids) * tbs
        row: dict = {"timestamp": round(t, 3)}
        if d.chance(0.85):
            row["input_length"] = d.between(max(1, full - tbs + 1), full)
        row["output_length"] = d.one(OUTPUTS[:-1])
        row["hash_ids"] = ids
        rows.append(row)
        if mean_gap and not d.chance(0.15):  # some equal timestamps too
            t += d.rng.expovariate(1.0 / mean_gap)
    # AISimulate takes mooncake-delta in aggregated mode only (both refuse it in P/D, pinned by
    # tests/test_config_bad.py), so P/D never draws it
    fmt = "mooncake-delta" if mode == "aggregated" and d.chance(0.15) else "mooncake"
    if sessions:
        fmt = "mooncake-delta" if d.chance(0.4) else "mooncake"
        rows = _as_sessions(d, rows, fmt, tbs)
        tags.append("trace-sessions")
    if fmt != "mooncake":
        tags.append("trace-delta")
    source = {"type": "trace", "paths": ["trace.jsonl"], "format": fmt, "block_size": tbs}
    if d.chance(0.5):
        conc = d.one([1, 2, 4, 8, 16, 32])
        load: dict = {"type": "concurrency", "concurrency": conc}
        tags.append("load:concurrency")
        in_flight = conc
    else:
        load = {"type": "trace_timestamps"}
        if d.chance(0.3):
            load["speedup"] = d.one([0.5, 2.0, 10.0])
        tags.append("load:trace_timestamps")
        in_flight = min(rows_n, 32)
    traffic: dict = {"source": source, "load": load}
    if d.chance(0.15):
        span = max(t, 50.0) / 1000.0
        traffic["stop"] = {"max_virtual_time_seconds": round(span * d.rng.uniform(0.3, 1.5), 3)}
        tags.append("cutoff")
    text = "".join(_json_row(r) + "\n" for r in rows)
    prompts = [r.get("input_length", len(r["hash_ids"]) * tbs) for r in rows]
    outputs = [r["output_length"] for r in rows]
    if sessions and fmt == "mooncake-delta":  # a turn holds the conversation so far
        prompts = _conversation_lengths(rows, prompts, outputs)
    return (
        {"traffic": traffic, "files": {"trace.jsonl": text}},
        Workload(prompts, outputs, in_flight, trace=True),
    )


def _as_sessions(d, rows: list[dict], fmt: str, tbs: int) -> list[dict]:
    """The rows cut into sessions of 1-5 turns, interleaved in the file. A later turn drops its
    timestamp for a delay, a delay_ms, a later timestamp or nothing; with `mooncake` its hash
    ids extend its predecessor's (the whole conversation), with `mooncake-delta` they are
    what it adds."""
    sessions, i = [], 0
    while i < len(rows):
        k = d.between(1, 5)
        sessions.append(rows[i : i + k])
        i += k
    for s, turns in enumerate(sessions):
        last_ts = turns[0]["timestamp"]
        for k, row in enumerate(turns):
            if len(turns) > 1 or d.chance(0.8):
                row["session_id"] = f"conv-{s}"
            if k == 0:
                continue
            del row["timestamp"]
            how = d.pick({"delay": 0.45, "delay_ms": 0.15, "timestamp": 0.2, "none": 0.2})
            if how == "timestamp":
                last_ts = round(last_ts + d.one([0.0, 3.0, 25.0, 400.0]), 3)
                row["timestamp"] = last_ts
            elif how != "none":
                row[how] = d.one([0, 1, 5.5, 30, 200])
            if fmt == "mooncake":
                prev = turns[k - 1]["hash_ids"]
                if "input_length" in row:
                    row["input_length"] += len(prev) * tbs
                row["hash_ids"] = prev + row["hash_ids"]
    out, left = [], [list(t) for t in sessions]
    while any(left):
        turns = d.one([t for t in left if t])
        out.append(turns.pop(0))
    return out


def _conversation_lengths(rows: list[dict], prompts: list[int], outputs: list[int]) -> list[int]:
    """Prompt lengths of mooncake-delta session turns: each holds its session's earlier
    prompts and outputs."""
    held: dict = {}
    out = []
    for row, p, o in zip(rows, prompts, outputs, strict=True):
        s = row.get("session_id")
        total = held.get(s, 0) + p if s is not None else p
        out.append(total)
        if s is not None:
            held[s] = total + o
    return out


def _json_row(row: dict) -> str:
    import json

    return json.dumps(row, separators=(", ", ": "))
