"""Arrow schema of requests.parquet: one row per terminal request, units in field metadata."""

from __future__ import annotations

import pyarrow as pa

from aisim.output import attribution

SCHEMA_VERSION = "3"  # 3: latency attribution columns; 2: per-request tpot_ms (was itl_ms)


def column(name: str, typ: pa.DataType, unit: str, doc: str, nullable: bool = True) -> pa.Field:
    """A parquet column with its unit and meaning in the field metadata."""
    return pa.field(name, typ, nullable=nullable, metadata={"unit": unit, "doc": doc})


REQUEST_COLUMNS = [
    column(
        "request_index",
        pa.int64(),
        "index",
        "creation order (synthetic: session_<index>, a session's turns in turn order; a trace "
        "names its file row instead)",
        False,
    ),
    column("session_id", pa.string(), "id", "AISimulate session id", False),
    column("turn_index", pa.int32(), "index", "turn within its session (0: no sessions)", False),
    column(
        "terminal_status",
        pa.string(),
        "code",
        "completed | rejected | failed (P/D: the decode pool could never hold the handoff)",
        False,
    ),
    column("scheduler_id", pa.int32(), "index", "worker x attention_data + dp_rank", False),
    column("worker_idx", pa.int32(), "index", "worker (replica) index", False),
    column("dp_rank", pa.int32(), "index", "attention-DP rank within the worker", False),
    column("arrival_time_ms", pa.float64(), "ms", "arrival time", False),
    column(
        "tokenized_ms",
        pa.float64(),
        "ms",
        "tokenization end, when it joined its rank's queue (null without engine.tokenization)",
    ),
    column("first_admit_ms", pa.float64(), "ms", "start of the first pass that scheduled it"),
    column("first_token_ms", pa.float64(), "ms", "first output token time"),
    column("last_token_ms", pa.float64(), "ms", "last output token time"),
    column("terminal_time_ms", pa.float64(), "ms", "completion or rejection time", False),
    column("ttft_ms", pa.float64(), "ms", "first token - arrival"),
    column("ttst_ms", pa.float64(), "ms", "second token - first token"),
    column("e2e_latency_ms", pa.float64(), "ms", "last token - arrival"),
    column(
        "tpot_ms",
        pa.float64(),
        "ms",
        "time per output token after the first: (last - first) / (output_length - 1), as vLLM's "
        "TPOT (requests.jsonl calls it itl_ms, AISimulate's name)",
    ),
    column("input_length", pa.int64(), "tokens", "prompt length", False),
    column("requested_output_length", pa.int64(), "tokens", "configured output length", False),
    column("output_length", pa.int64(), "tokens", "tokens emitted", False),
    column("reused_input_tokens", pa.int64(), "tokens", "largest prefix-cache hit", False),
    column(
        "first_admission_reused_input_tokens",
        pa.int64(),
        "tokens",
        "prefix-cache hit at the first admission",
        False,
    ),
    column("admission_count", pa.int32(), "count", "admissions including readmissions", False),
    column("readmission_count", pa.int32(), "count", "admissions after a preemption", False),
]
# where the latency went (docs/attribution.md): the ttft_* parts add up to ttft_ms, and with
# decode_ms and decode_preempted_ms to e2e_latency_ms
REQUEST_COLUMNS += [
    column(name, pa.float64(), "ms", meaning) for name, meaning in attribution.PARTS
]

REQUESTS_SCHEMA = pa.schema(REQUEST_COLUMNS)


def table_metadata(table: str, provenance: dict) -> dict[bytes, bytes]:
    """Schema-level metadata of every aisim parquet table: which table, schema version, aisim
    version, config hash and op-table hash; never a host clock (same run, same bytes)."""
    import json

    info = {"table": table, "schema_version": SCHEMA_VERSION, **provenance}
    return {b"aisim": json.dumps(info, sort_keys=True).encode()}
