"""summary.parquet: the deterministic prediction.json fields as one row, with a declared schema.

Numbers keep their JSON type (int64 counts, float64 figures, bit for bit); nested fields
(provenance, power diagnostics) are JSON text with sorted keys; host wall-clock fields
(wall_time_ms and the rates derived from it) are left out, so one run gives one file.
The same column rules serve the sweep table (aisim.sweeps.table), one row per point.
"""

from __future__ import annotations

import json

import pyarrow as pa

from aisim.output.contract import ALWAYS, FIELDS, FLOAT, HOST_FIELDS, INT, JSON, STR
from aisim.output.schema import column, table_metadata

_ARROW_TYPES = {INT: pa.int64(), FLOAT: pa.float64(), STR: pa.string(), JSON: pa.string()}


def field_unit(name: str) -> str:
    return FIELDS[name].unit


def summary_field(name: str, value=None, always_nullable: bool = False) -> pa.Field:
    """Column of one prediction field, as the output contract declares it; `always_nullable`
    for tables with failed rows. JSON fields are JSON text with sorted keys."""
    fd = FIELDS[name]
    doc = fd.meaning + (" (JSON text, sorted keys)" if fd.kind == JSON else "")
    nullable = always_nullable or fd.nullable or fd.presence != ALWAYS
    return column(name, _ARROW_TYPES[fd.kind], fd.unit, doc, nullable)


def summary_values(prediction: dict) -> dict:
    """Deterministic prediction fields as column values (nested ones as JSON text)."""
    out = {}
    for name in sorted(prediction):
        if name in HOST_FIELDS or name == "per_request":
            continue
        v = prediction[name]
        if FIELDS[name].kind == JSON:
            v = json.dumps(v, sort_keys=True, separators=(",", ":"), allow_nan=False)
        out[name] = v
    return out


def summary_fields(prediction: dict) -> list[pa.Field]:
    return [summary_field(k, v) for k, v in summary_values(prediction).items()]


def summary_table(prediction: dict, provenance: dict) -> pa.Table:
    values = summary_values(prediction)
    schema = pa.schema(summary_fields(prediction))
    table = pa.Table.from_pydict({k: [v] for k, v in values.items()}, schema=schema)
    return table.replace_schema_metadata(table_metadata("summary", provenance))


def column_value(field: pa.Field, value):
    """A sweep-row value back in prediction.json form (nested fields parsed)."""
    if field.metadata and field.metadata.get(b"unit") == b"json" and value is not None:
        return json.loads(value)
    return value
