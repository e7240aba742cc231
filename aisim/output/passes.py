"""passes.parquet (--capture-passes): one row per scheduler pass per rank.

The kernel fills fixed-size rows (aisim.state.PASS_FIELDS); this module declares the published
schema (units and meaning in field metadata) and turns the captured arrays into a table.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from aisim.output.schema import column, table_metadata

ROLE_NAMES = ("aggregated", "prefill", "decode")  # by kernels.codes.Role

PASS_COLUMNS = [
    column("pass_index", pa.int64(), "index", "row order: rank-passes by start time", False),
    column("start_ms", pa.float64(), "ms", "pass start (simulated time)", False),
    column("end_ms", pa.float64(), "ms", "pass end: the worker's slowest rank", False),
    column(
        "rank", pa.int32(), "index", "scheduler rank = worker x attention_data + dp_rank", False
    ),
    column("worker", pa.int32(), "index", "worker (replica) within its role", False),
    column("role", pa.string(), "code", "worker role: aggregated, prefill or decode", False),
    column("num_prefill", pa.int32(), "requests", "requests computing prompt tokens", False),
    column("num_decode", pa.int32(), "requests", "requests decoding one token", False),
    column("tokens_scheduled", pa.int64(), "tokens", "tokens scheduled in the pass", False),
    column(
        "prefill_tokens",
        pa.int64(),
        "tokens",
        "tokens computed for prefill-set requests (prompt chunks not served from the prefix "
        "cache, recomputation after a preemption included); sums to committed_prefill_tokens",
        False,
    ),
    column(
        "mean_decode_context",
        pa.float64(),
        "tokens",
        "mean context length L of the decode set (null without decoders)",
    ),
    column("kv_blocks_used", pa.int64(), "blocks", "KV blocks referenced by live requests", False),
    column(
        "kv_blocks_cached",
        pa.int64(),
        "blocks",
        "free KV blocks still holding cached prefix content (evictable)",
        False,
    ),
    column("waiting", pa.int32(), "requests", "waiting requests after scheduling", False),
    column("running", pa.int32(), "requests", "running requests after scheduling", False),
    column("preemptions", pa.int32(), "requests", "requests preempted in the pass", False),
]

PASSES_SCHEMA = pa.schema(PASS_COLUMNS)


def passes_table(plog, provenance: dict) -> pa.Table:
    """Captured PassLog (trimmed to its rows) -> the passes table with schema metadata."""
    n = len(plog.start_ms)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_ctx = plog.sum_decode_context / plog.num_decode
    cols = {
        "pass_index": np.arange(n, dtype=np.int64),
        "start_ms": plog.start_ms,
        "end_ms": plog.end_ms,
        "rank": plog.rank,
        "worker": plog.worker,
        "role": pa.array(np.array(ROLE_NAMES, dtype=object)[plog.role.astype(np.int64)]),
        "num_prefill": plog.num_prefill,
        "num_decode": plog.num_decode,
        "tokens_scheduled": plog.tokens_scheduled,
        "prefill_tokens": plog.prefill_tokens,
        "mean_decode_context": pa.array(mean_ctx, mask=plog.num_decode == 0),
        "kv_blocks_used": plog.kv_blocks_used,
        "kv_blocks_cached": plog.kv_blocks_cached,
        "waiting": plog.waiting,
        "running": plog.running,
        "preemptions": plog.preemptions,
    }
    table = pa.Table.from_pydict(cols, schema=PASSES_SCHEMA)
    return table.replace_schema_metadata(table_metadata("passes", provenance))
