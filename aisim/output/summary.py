"""summary.parquet: the deterministic prediction.json fields as one row, with a declared schema.

Numbers keep their JSON type (int64 counts, float64 figures, bit for bit); nested fields
(provenance, power diagnostics) are JSON text with sorted keys; host wall-clock fields
(wall_time_ms and the rates derived from it) are left out, so one run gives one file.
The same column rules serve the sweep table (aisim.sweeps.table), one row per point.
"""

from __future__ import annotations

import json

import pyarrow as pa

from aisim.output.schema import _f, table_metadata
from aisim.output.write import HOST_FIELDS

# integer-valued prediction fields (counts); everything else numeric is float64
INT_FIELDS = frozenset({
    "committed_prefill_tokens", "completed_requests", "decode_gpus_per_worker",
    "goodput_completed_requests",
    "num_e2e_latency_samples", "num_requests", "num_tpot_samples", "num_ttft_samples",
    "prefill_gpus_per_worker", "processed_tokens", "total_input_tokens", "total_output_tokens",
})
JSON_FIELDS = frozenset({"prediction_provenance", "power_diagnostics"})
STRING_FIELDS = frozenset({"kv_eviction_policy"})
_SUFFIX_UNITS = (
    ("_per_user", "tokens/s/user"), ("_tok_s", "tokens/s"), ("_rps", "requests/s"),
    ("_ms", "ms"), ("_seconds", "s"), ("_tokens", "tokens"), ("_ratio", "fraction"),
    ("_samples", "count"), ("_requests", "requests"), ("_per_worker", "GPUs"),
)
# fields AISimulate writes as null in some runs (no energy evidence, no prefix data)
NULLABLE_FIELDS = frozenset({"power_w", "power_coverage", "prefix_cache_reused_ratio",
                             "first_admission_prefix_cache_reused_ratio"})
_UNITS = {"gpu_hours": "GPU-hours", "power_w": "W", "power_coverage": "fraction"}


def field_unit(name: str) -> str:
    if name in _UNITS:
        return _UNITS[name]
    if name in JSON_FIELDS:
        return "json"
    for suffix, unit in _SUFFIX_UNITS:
        if name.endswith(suffix):
            return unit
    return "code" if name in STRING_FIELDS else "value"


def summary_field(name: str, value, always_nullable: bool = False) -> pa.Field:
    """Column of one prediction field; `always_nullable` for tables with failed rows."""
    doc = f"prediction.json field {name}"
    known = name in INT_FIELDS or name in JSON_FIELDS or name in STRING_FIELDS
    nullable = always_nullable or name in NULLABLE_FIELDS or (not known and value is None)
    nullable = nullable or not (known or name.split("_")[0] in _STAT_PREFIXES or
                                name.endswith(("_tok_s", "_rps", "_seconds", "gpu_hours")))
    if name in JSON_FIELDS or isinstance(value, dict | list):
        return _f(name, pa.string(), "json", doc + " (JSON text, sorted keys)", nullable)
    if name in STRING_FIELDS or isinstance(value, str):
        return _f(name, pa.string(), field_unit(name), doc, nullable)
    if name in INT_FIELDS or (isinstance(value, int) and not isinstance(value, bool)):
        return _f(name, pa.int64(), field_unit(name), doc, nullable)
    return _f(name, pa.float64(), field_unit(name), doc, nullable)


_STAT_PREFIXES = frozenset({"mean", "min", "max", "std", "median", "p75", "p90", "p95", "p99"})


def summary_values(prediction: dict) -> dict:
    """Deterministic prediction fields as column values (nested ones as JSON text)."""
    out = {}
    for name in sorted(prediction):
        if name in HOST_FIELDS or name == "per_request":
            continue
        v = prediction[name]
        if name in JSON_FIELDS or isinstance(v, dict | list):
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
