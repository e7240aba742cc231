"""candidates.parquet: one row per candidate, its searched values, verdict, score and every
summary field of its prediction (the output contract's columns)."""

from __future__ import annotations

import json

import pyarrow as pa

from aisim.output.schema import column, table_metadata
from aisim.output.summary import summary_field, summary_values

FIXED = (
    ("candidate_id", pa.string(), "id", "candidate-NNNNNN, in the space's order"),
    ("status", pa.string(), "code", "feasible | infeasible | unsupported | timed_out | failed"),
    ("reason_category", pa.string(), "code", "why it is not feasible (null when feasible)"),
    ("reason", pa.string(), "text", "the reason in words"),
    ("score", pa.float64(), "target", "the target's score, higher is better (feasible only)"),
    ("is_top_n", pa.bool_(), "flag", "ranked among the recommendations"),
    ("is_pareto", pa.bool_(), "flag", "on the Pareto front (pareto target)"),
    ("rank", pa.int64(), "rank", "1 = best; null when not recommended"),
)


def _type(values: list) -> pa.DataType:
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return pa.bool_()
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return pa.int64()
    if present and all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        return pa.float64()
    return pa.string()


def _value(v, typ):
    if v is None:
        return None
    if typ == pa.string() and not isinstance(v, str):
        return str(v)
    if typ == pa.float64():
        return float(v)
    return v


def candidates_table(
    entries: list[dict], ranked_ids: list[str], front: set, provenance: dict
) -> pa.Table:
    """`ranked_ids`: the recommended candidates, best first."""
    ranks = {cid: k for k, cid in enumerate(ranked_ids, start=1)}
    top = set(ranked_ids)
    knob_keys: list[str] = []
    for e in entries:
        for k in e["config"]:
            if k not in knob_keys:
                knob_keys.append(k)
    fields = [column(n, t, u, d, n not in ("candidate_id", "status")) for n, t, u, d in FIXED]
    knob_types = {k: _type([e["config"].get(k) for e in entries]) for k in knob_keys}
    fields += [column(k, knob_types[k], "value", f"searched value {k}", True) for k in knob_keys]
    fields.append(column("objectives", pa.string(), "json", "pareto objectives (JSON text)", True))
    summary_cols: dict[str, pa.Field] = {}
    for e in entries:
        if e["metrics"] is not None:
            for name, value in summary_values(e["metrics"]).items():
                if name not in summary_cols:
                    summary_cols[name] = summary_field(name, value, always_nullable=True)
    fields += [summary_cols[n] for n in sorted(summary_cols)]
    cols: dict[str, list] = {f.name: [] for f in fields}
    for e in entries:
        cid = e["candidate_id"]
        cols["candidate_id"].append(cid)
        cols["status"].append(e["status"])
        cols["reason_category"].append(e["reason_category"])
        cols["reason"].append(e["reason"])
        cols["score"].append(e["score"])
        cols["is_top_n"].append(cid in top)
        cols["is_pareto"].append(cid in front)
        cols["rank"].append(ranks.get(cid))
        for k in knob_keys:
            cols[k].append(_value(e["config"].get(k), knob_types[k]))
        objs = e["objectives"]
        cols["objectives"].append(None if objs is None else json.dumps(objs, sort_keys=True))
        summary = summary_values(e["metrics"]) if e["metrics"] is not None else {}
        for name in summary_cols:
            cols[name].append(summary.get(name))
    table = pa.Table.from_pydict(cols, schema=pa.schema(fields))
    return table.replace_schema_metadata(table_metadata("candidates", provenance))
