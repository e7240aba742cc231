"""sweep.parquet: one row per point: swept values, status, error and every summary field."""

from __future__ import annotations

import pyarrow as pa

from aisim.output.schema import column, table_metadata
from aisim.output.summary import summary_field, summary_values


def swept_column(path: str) -> str:
    """The column of a swept config path: its dots as double underscores
    (traffic__load__concurrency), a name pandas, polars and DuckDB read without quoting."""
    return path.replace(".", "__")


def _swept_type(values: list) -> pa.DataType:
    if all(isinstance(v, bool) for v in values):
        return pa.bool_()
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return pa.int64()
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return pa.float64()
    return pa.string()


def _swept_value(v, typ: pa.DataType):
    if typ == pa.string() and not isinstance(v, str):
        from aisim.sweeps.grid import yaml_text

        return yaml_text(v)
    if typ == pa.float64():
        return float(v)
    return v


def summary_columns(records: list[dict]) -> dict[str, pa.Field]:
    """The summary fields any successful record has, by name (sorted), each nullable: one
    table holds failed points too."""
    cols: dict[str, pa.Field] = {}
    for rec in records:
        if rec["prediction"] is not None:
            for name, value in summary_values(rec["prediction"]).items():
                if name not in cols:
                    cols[name] = summary_field(name, value, always_nullable=True)
    return {n: cols[n] for n in sorted(cols)}


def sweep_table(points, records: list[dict], base_sha256: str, meta: dict) -> pa.Table:
    """Points (aisim.sweeps.grid.Point) and their records, in point order -> the sweep table."""
    keys = [k for k, _ in points[0].values] if points else []
    fields = [
        column("point_index", pa.int64(), "index", "position in the sweep's point order", False),
        column(
            "point_id",
            pa.string(),
            "id",
            "hash of the base config and the point's overrides (requests/point_id=...)",
            False,
        ),
    ]
    swept_types = {}
    for k in keys:
        swept_types[k] = _swept_type([dict(p.values)[k] for p in points])
        fields.append(
            column(swept_column(k), swept_types[k], "value", f"swept config value {k}", False)
        )
    fields += [
        column("status", pa.string(), "code", "ok | error", False),
        column("error", pa.string(), "text", "why the point failed (null when ok)"),
        column(
            "prediction_sha256",
            pa.string(),
            "sha256",
            "hash of the point's deterministic prediction fields (as aisim predict prints)",
        ),
    ]
    summary_cols = summary_columns(records)
    fields += list(summary_cols.values())
    schema = pa.schema(fields)
    cols: dict[str, list] = {f.name: [] for f in fields}
    for p, rec in zip(points, records, strict=True):
        values = dict(p.values)
        cols["point_index"].append(p.index)
        cols["point_id"].append(rec["point_id"])
        for k in keys:
            cols[swept_column(k)].append(_swept_value(values[k], swept_types[k]))
        cols["status"].append(rec["status"])
        cols["error"].append(rec["error"])
        cols["prediction_sha256"].append(rec["prediction_sha256"])
        summary = summary_values(rec["prediction"]) if rec["prediction"] is not None else {}
        for name in summary_cols:
            cols[name].append(summary.get(name))
    table = pa.Table.from_pydict(cols, schema=schema)
    prov = {"config_sha256": base_sha256, **meta}
    return table.replace_schema_metadata(table_metadata("sweep", prov))
