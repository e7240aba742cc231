"""Result files: prediction.json, requests.jsonl / requests.parquet, prediction.sha256.

Nothing is written until every result is computed, and files are written to a temporary name
then renamed, so a failed run leaves no partial output.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

OUTPUT_NAMES = ("prediction.json", "requests.jsonl", "requests.parquet", "prediction.sha256",
                "summary.parquet", "passes.parquet")
HOST_FIELDS = ("wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s")


def prediction_sha256(prediction: dict) -> str:
    """Hash of every deterministic field: a change can prove its simulated outputs unchanged."""
    det = {k: v for k, v in prediction.items() if k not in HOST_FIELDS}
    blob = json.dumps(det, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def check_output_dir(out_dir: Path, overwrite: bool) -> None:
    from aisim.errors import AisimError

    if out_dir.exists() and not out_dir.is_dir():
        raise AisimError(f"--output-dir: {out_dir} exists and is not a directory")
    existing = [n for n in OUTPUT_NAMES if (out_dir / n).exists()]
    if existing and not overwrite:
        raise AisimError(
            f"--output-dir: {out_dir} already holds {', '.join(existing)}; "
            "pass --overwrite to replace them")


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_outputs(out_dir: Path, prediction: dict, records: list[dict] | None,
                  provenance: dict, passes=None, summary: bool = True) -> str:
    """Write the result files; `summary` adds summary.parquet (it costs a pyarrow import,
    ~0.15 s, so a plain CLI prediction only writes it when asked or when other parquet files
    are written anyway)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in OUTPUT_NAMES:  # --overwrite removes only the files aisim writes
        (out_dir / name).unlink(missing_ok=True)
    digest = prediction_sha256(prediction)
    payloads: list[tuple[str, bytes]] = [
        ("prediction.json", (json.dumps(prediction, indent=2, sort_keys=True) + "\n").encode()),
        ("prediction.sha256", (digest + "\n").encode()),
    ]
    if records is not None:
        lines = "".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n"
                        for r in records)
        payloads.append(("requests.jsonl", lines.encode()))
        payloads.append(("requests.parquet", _parquet_bytes(records, provenance)))
    if summary:
        from aisim.output.summary import summary_table

        payloads.append(("summary.parquet", table_bytes(summary_table(prediction, provenance))))
    if passes is not None:
        from aisim.output.passes import passes_table

        payloads.append(("passes.parquet", table_bytes(passes_table(passes, provenance))))
    for name, data in payloads:
        _atomic_write(out_dir / name, data)
    return digest


def table_bytes(table) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def requests_table(records: list[dict], provenance: dict):
    """Per-request records -> requests table (declared schema, units, run metadata)."""
    import pyarrow as pa

    from aisim.output.schema import REQUESTS_SCHEMA, table_metadata

    cols: dict[str, list] = {f.name: [] for f in REQUESTS_SCHEMA}
    for r in records:
        route = r["routing_history"][0]
        row = dict(r)
        row["request_index"] = int(r["session_id"].split("_")[-1])
        row["scheduler_id"] = route["scheduler_id"]
        row["worker_idx"] = route["logical_worker_id"]
        row["dp_rank"] = route["dp_rank"]
        for name in cols:
            cols[name].append(row[name])
    table = pa.Table.from_pydict(cols, schema=REQUESTS_SCHEMA)
    return table.replace_schema_metadata(table_metadata("requests", provenance))


def _parquet_bytes(records: list[dict], provenance: dict) -> bytes:
    return table_bytes(requests_table(records, provenance))
