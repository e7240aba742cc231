"""Run one sweep point: the same code path as `aisim predict`, plus a per-process memo cache.

Runs inside whichever process executes the point (the sweep's own process, a local worker
process or a Ray worker); the module-level memo dict lives as long as that process, so points
that share an op plan share their pass prices (aisim.prediction.predict_config).
"""

from __future__ import annotations

import json
from pathlib import Path

_MEMOS: dict = {}


def point_file(out_dir: Path, point_id: str) -> Path:
    return out_dir / "points" / f"{point_id}.json"


def run_point(task: dict) -> tuple[dict, bytes | None]:
    """task: base, base_overrides, overrides, point_id, index, capture_requests; optionally
    config (the base file's content, already parsed) and config_sha256 (its digest), which
    spare the worker reading and parsing the YAML again (aisim recommend).

    Returns (record, requests.parquet bytes or None); never raises for a bad point. Files are
    written by the sweep's own process (`save_point`), so remote workers need no shared disk.
    """
    from aisim.config import load_config
    from aisim.output.write import prediction_sha256
    from aisim.prediction import config_sha256, predict_config, provenance

    overrides = tuple(task["base_overrides"]) + tuple(task["overrides"])
    requests = None
    record = {
        "point_id": task["point_id"],
        "index": task["index"],
        "overrides": list(task["overrides"]),
        "status": "ok",
        "error": None,
        "prediction": None,
        "prediction_sha256": None,
        "provenance": None,
    }
    try:
        if "config" in task and not overrides:
            from aisim.config.load import parse_config

            cfg = parse_config(task["config"], task["base"])
            digest = task["config_sha256"]
        else:
            cfg = load_config(task["base"], overrides)
            digest = config_sha256(task["base"], overrides)
        pred = predict_config(cfg, digest, capture=task["capture_requests"], memos=_MEMOS)
        prediction = {k: v for k, v in pred.prediction.items() if k != "per_request"}
        if prediction.get("completed_requests", 0) == 0:
            raise RuntimeError(prediction.get("diagnostic") or "no request completed")
        record["prediction"] = prediction
        record["prediction_sha256"] = prediction_sha256(prediction)
        record["provenance"] = provenance(pred)
        if pred.records is not None:
            from aisim.output.write import requests_parquet_bytes

            requests = requests_parquet_bytes(pred.records, record["provenance"])
    except Exception as exc:  # a failing point is recorded; the sweep goes on
        from aisim.errors import AisimError

        record["status"] = "error"
        kind = "" if isinstance(exc, AisimError) else f"{type(exc).__name__}: "
        record["error"] = kind + " ".join(str(exc).split())
        record["prediction"] = None
        requests = None
    return record, requests


def save_point(out_dir: Path, record: dict, requests: bytes | None) -> None:
    """points/<id>.json (the resume marker, written last) and, when captured,
    requests/point_id=<id>/part-0.parquet (a hive-partitioned dataset over the points)."""
    from aisim.errors import AisimError
    from aisim.output.write import os_error_text, write_file_atomically

    path = point_file(out_dir, record["point_id"])
    try:
        if requests is not None:
            folder = out_dir / "requests" / f"point_id={record['point_id']}"
            folder.mkdir(parents=True, exist_ok=True)
            write_file_atomically(folder / "part-0.parquet", requests, "--output-dir")
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AisimError(
            f"--output-dir: cannot write into {out_dir}: {os_error_text(exc)}"
        ) from None
    text = json.dumps(record, sort_keys=True, allow_nan=False) + "\n"
    write_file_atomically(path, text.encode(), "--output-dir")
