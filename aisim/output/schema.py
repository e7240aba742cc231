"""Arrow schema of requests.parquet: one row per terminal request, units in field metadata."""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = "1"


def _f(name: str, typ: pa.DataType, unit: str, doc: str, nullable: bool = True) -> pa.Field:
    return pa.field(name, typ, nullable=nullable, metadata={"unit": unit, "doc": doc})


REQUEST_COLUMNS = [
    _f("request_index", pa.int64(), "index", "creation order (session_<index>)", False),
    _f("session_id", pa.string(), "id", "AISimulate session id", False),
    _f(
        "terminal_status",
        pa.string(),
        "code",
        "completed | rejected | failed (P/D: the decode pool could never hold the handoff)",
        False,
    ),
    _f("scheduler_id", pa.int32(), "index", "worker x attention_data + dp_rank", False),
    _f("worker_idx", pa.int32(), "index", "worker (replica) index", False),
    _f("dp_rank", pa.int32(), "index", "attention-DP rank within the worker", False),
    _f("arrival_time_ms", pa.float64(), "ms", "arrival time", False),
    _f("first_admit_ms", pa.float64(), "ms", "start of the first pass that scheduled it"),
    _f("first_token_ms", pa.float64(), "ms", "first output token time"),
    _f("last_token_ms", pa.float64(), "ms", "last output token time"),
    _f("terminal_time_ms", pa.float64(), "ms", "completion or rejection time", False),
    _f("ttft_ms", pa.float64(), "ms", "first token - arrival"),
    _f("ttst_ms", pa.float64(), "ms", "second token - first token"),
    _f("e2e_latency_ms", pa.float64(), "ms", "last token - arrival"),
    _f("itl_ms", pa.float64(), "ms", "(last - first) / (output_length - 1)"),
    _f("input_length", pa.int64(), "tokens", "prompt length", False),
    _f("requested_output_length", pa.int64(), "tokens", "configured output length", False),
    _f("output_length", pa.int64(), "tokens", "tokens emitted", False),
    _f("reused_input_tokens", pa.int64(), "tokens", "largest prefix-cache hit", False),
    _f(
        "first_admission_reused_input_tokens",
        pa.int64(),
        "tokens",
        "prefix-cache hit at the first admission",
        False,
    ),
    _f("admission_count", pa.int32(), "count", "admissions including readmissions", False),
    _f("readmission_count", pa.int32(), "count", "admissions after a preemption", False),
]

REQUESTS_SCHEMA = pa.schema(REQUEST_COLUMNS)


def table_metadata(table: str, provenance: dict) -> dict[bytes, bytes]:
    """Schema-level metadata of every aisim parquet table: which table, schema version, aisim
    version, config hash and op-table hash; never a host clock (same run, same bytes)."""
    import json

    info = {"table": table, "schema_version": SCHEMA_VERSION, **provenance}
    return {b"aisim": json.dumps(info, sort_keys=True).encode()}
