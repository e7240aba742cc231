"""Reports of the differential test (bench/difftest.py): per-request diffs and the summary.

``records_diff`` compares the two simulators' requests.jsonl by session id (AISimulate orders
records with equal arrival times by a random uuid) and names the requests whose records differ,
in the order of the earliest simulated time at which they differ, so the first diverging event
of a run can be read off directly. ``write_summary`` counts the finished cases of an output
folder per class and per feature tag, and lists the tag pairs where mismatches cluster.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter, defaultdict
from pathlib import Path

CLASSES = (
    "OK",
    "OK-BOTH-REFUSE",
    "REFUSED-BY-AISIM",
    "MISMATCH-REFUSAL",
    "MISMATCH",
    "INVALID-CONFIG",
    "ERROR",
)
MISMATCHES = ("MISMATCH", "MISMATCH-REFUSAL")

TIME_FIELDS = (
    "arrival_time_ms",
    "first_admit_ms",
    "prefill_admit_ms",
    "source_held_ms",
    "destination_reserved_ms",
    "destination_activated_ms",
    "decode_admit_ms",
    "first_token_ms",
    "last_token_ms",
    "source_released_ms",
    "terminal_time_ms",
)
"""Absolute simulated times of a record, in the order a request passes them."""
DERIVED = ("e2e_latency_ms", "ttft_ms", "ttst_ms", "itl_ms")
"""Differences of the times above: reported, but they do not date a divergence."""


def _close(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(_close, a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return all(_close(a.get(k), b.get(k)) for k in set(a) | set(b) if k != "uuid")
    return a == b


def _read(path: Path) -> dict[str, dict]:
    if not path.exists():
        return {}
    rows = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return {r["session_id"]: r for r in rows}


def _differences(got: dict, ref: dict) -> list[tuple[str, object, object, float | None]]:
    """(field, aisim value, AISimulate value, simulated time it dates) per differing field."""
    out = []
    for key in sorted(set(got) | set(ref)):
        if key == "uuid" or _close(got.get(key), ref.get(key)):
            continue
        g, r = got.get(key), ref.get(key)
        when = None
        if key in TIME_FIELDS:
            when = (
                min(v for v in (g, r) if isinstance(v, (int, float)))
                if any(isinstance(v, (int, float)) for v in (g, r))
                else None
            )
        elif key == "admission_history":
            when = _first_history_difference(g or [], r or [])
        out.append((key, g, r, when))
    return out


def _first_history_difference(g: list, r: list) -> float | None:
    for eg, er in itertools.zip_longest(g, r):
        if not _close(eg, er):
            times = [e["at_ms"] for e in (eg, er) if e and e.get("at_ms") is not None]
            return min(times) if times else None
    return None


def _last_bit_differences(got: dict, ref: dict) -> list[tuple]:
    """(time, session, field, aisim, AISimulate) of timestamps equal within tolerance only."""
    out = []
    for sid in set(got) & set(ref):
        for key in TIME_FIELDS:
            g, r = got[sid].get(key), ref[sid].get(key)
            if isinstance(g, float) and isinstance(r, float) and g != r and _close(g, r):
                out.append((min(g, r), sid, key, g, r))
    return sorted(out)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.6f}".rstrip("0").rstrip(".")
    if isinstance(v, list) and v and isinstance(v[0], dict):
        return json.dumps(
            [
                {k: e[k] for k in ("at_ms", "is_readmission", "reused_input_tokens") if k in e}
                for e in v
            ]
        )
    return json.dumps(v)


def records_diff(got_path: Path, ref_path: Path, limit: int = 8) -> dict:
    """Requests whose records differ, earliest simulated difference first."""
    got, ref = _read(got_path), _read(ref_path)
    lines = [f"aisim records: {len(got)}, AISimulate records: {len(ref)}"]
    only_a = sorted(set(got) - set(ref))
    only_b = sorted(set(ref) - set(got))
    if only_a:
        lines.append(f"only in aisim: {', '.join(only_a[:10])}")
    if only_b:
        lines.append(f"only in AISimulate: {', '.join(only_b[:10])}")
    rows = []
    for sid in set(got) & set(ref):
        diffs = _differences(got[sid], ref[sid])
        if not diffs:
            continue
        times = [w for _, _, _, w in diffs if w is not None]
        rows.append((min(times) if times else math.inf, sid, diffs))
    rows.sort(key=lambda r: (r[0], r[1]))
    lines.append(f"{len(rows)} of {len(set(got) & set(ref))} common requests differ")
    noise = _last_bit_differences(got, ref)
    if noise:
        # equal within the tolerance but not bit-equal: harmless alone, yet it decides the order
        # of events that should happen at one instant
        first = "; ".join(
            f"{sid}.{key} aisim {g!r} AISimulate {r!r}" for _, sid, key, g, r in noise[:3]
        )
        lines.append(f"{len(noise)} timestamps differ only in the last bits, earliest: {first}")
    for when, sid, diffs in rows[:limit]:
        rec = ref[sid]
        head = (
            f"{sid} (arrival {_fmt(rec.get('arrival_time_ms'))}, prompt "
            f"{rec.get('input_length')}, output {rec.get('requested_output_length')}, "
            f"status {rec.get('terminal_status')}; first difference at "
            f"{_fmt(when) if when != math.inf else '?'} ms)"
        )
        lines.append(head)
        for key, g, r, _ in sorted(diffs, key=lambda d: (d[3] is None, d[3] or 0, d[0]))[:8]:
            delta = ""
            if isinstance(g, (int, float)) and isinstance(r, (int, float)):
                delta = f" ({g - r:+.6g})"
            lines.append(f"    {key}: aisim {_fmt(g)}  AISimulate {_fmt(r)}{delta}")
    first = rows[0] if rows else None
    return {
        "text": "\n".join(lines) + "\n",
        "differing": len(rows),
        "only_aisim": len(only_a),
        "only_aisimulate": len(only_b),
        "first_session": first[1] if first else None,
        "first_time_ms": first[0] if first and first[0] != math.inf else None,
        "first_fields": [d[0] for d in first[2]] if first else [],
    }


# --------------------------------------------------------------------------- summary


def load_results(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "cases").glob("*/result.json"))]


def write_summary(out: Path) -> str:
    """The summary table of every finished case under out; also written to out/summary.md."""
    results = load_results(out)
    counts = Counter(r["class"] for r in results)
    lines = [
        f"# difftest summary: {len(results)} cases in {out}",
        "",
        "| class | cases |",
        "|---|---|",
    ]
    lines += [f"| {c} | {counts[c]} |" for c in CLASSES if counts[c]]
    by_tag: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        for tag in r["tags"]:
            by_tag[tag][r["class"]] += 1
    shown = [c for c in CLASSES if counts[c]]
    lines += [
        "",
        "## per feature bucket",
        "",
        "| bucket | cases | " + " | ".join(shown) + " |",
        "|---|---|" + "---|" * len(shown),
    ]
    for tag in sorted(by_tag):
        c = by_tag[tag]
        lines.append(
            f"| {tag} | {sum(c.values())} | " + " | ".join(str(c[k]) for k in shown) + " |"
        )
    lines += ["", "## where mismatches cluster (tag pairs with >= 2 mismatches)", ""]
    pairs: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for r in results:
        bad = r["class"] in MISMATCHES
        for pair in itertools.combinations(sorted(r["tags"]), 2):
            pairs[pair][0] += 1
            pairs[pair][1] += bad
    ranked = sorted(
        ((m / n, m, n, p) for p, (n, m) in pairs.items() if m >= 2),
        key=lambda x: (-x[0], -x[1], x[3]),
    )
    lines += [f"* {a}+{b}: {m}/{n} mismatch" for _, m, n, (a, b) in ranked[:30]] or ["(none)"]
    lines += ["", "## cases not OK", ""]
    for r in results:
        if r["class"] in ("OK", "OK-BOTH-REFUSE"):
            continue
        req = r.get("requests") or {}
        first = (
            f"; first differing request {req['first_session']} at "
            f"{req['first_time_ms']} ms ({', '.join(req['first_fields'][:4])})"
            if req.get("first_session")
            else ""
        )
        lines.append(
            f"* {r['class']} cases/{r['id']} [{','.join(r['tags'])}]: {r.get('worst') or ''}{first}"
        )
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    return text
