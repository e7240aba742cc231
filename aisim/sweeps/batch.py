"""Batch predictions: many deployment YAMLs (`aisim predict -c a.yaml -c b.yaml`, a folder or a
glob) run like a sweep's points, one `batch.parquet` row per config.

Output folder (with --output-dir):
    batch.parquet                        one row per config: path, status, error, summary
    points/<point_id>.json               each finished config (the resume marker)
    requests/point_id=<id>/part-0.parquet   --capture-per-request

A config that fails (bad YAML, a refused option, no completed request) is recorded with its
error and the others go on; each ok row equals `aisim predict -c PATH` run alone.
"""

from __future__ import annotations

import glob
import hashlib
import json
from pathlib import Path

from aisim.errors import AisimError

YAML_SUFFIXES = (".yaml", ".yml")


def is_batch(configs: tuple[str, ...]) -> bool:
    """More than one -c, a folder, or a glob pattern."""
    return len(configs) > 1 or any(Path(c).is_dir() or glob.has_magic(c) for c in configs)


def expand_configs(configs: tuple[str, ...]) -> list[Path]:
    """The config files named by -c values (files, folders: their *.yaml / *.yml, globs), in
    the order given, each once."""
    out: list[Path] = []
    for item in configs:
        path = Path(item)
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.suffix in YAML_SUFFIXES and p.is_file())
            if not found:
                raise AisimError(f"-c {item}: the folder holds no .yaml or .yml file")
        elif glob.has_magic(item):
            found = sorted(Path(p) for p in glob.glob(item, recursive=True) if Path(p).is_file())
            if not found:
                raise AisimError(f"-c {item}: the pattern matches no file")
        elif path.is_file():
            found = [path]
        else:
            raise AisimError(f"-c {item}: config file not found")
        for p in found:
            if p not in out:
                out.append(p)
    return out


def point_id(path: Path, config_sha256: str) -> str:
    blob = json.dumps([str(path), config_sha256]).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def run_batch(
    paths: list[Path],
    out_dir: Path | None,
    *,
    overrides: tuple[str, ...] = (),
    jobs: int = 1,
    executor: str = "local",
    ray_address: str | None = None,
    capture_requests: bool = False,
    progress=None,
):
    """Run every config not already finished in out_dir; returns the batch table (pyarrow)."""
    from aisim.prediction import config_sha256
    from aisim.sweeps.run import execute, split_finished

    pids = [point_id(path, config_sha256(str(path), overrides)) for path in paths]
    records, tasks = split_finished(
        out_dir,
        [
            {
                "base": str(path),
                "base_overrides": list(overrides),
                "overrides": [],
                "point_id": pid,
                "index": index,
                "capture_requests": capture_requests,
            }
            for index, (path, pid) in enumerate(zip(paths, pids, strict=True))
        ],
    )
    skipped = len(records)
    execute(tasks, out_dir, records, skipped, len(paths), jobs, executor, ray_address, progress)
    table = batch_table(paths, [records[p] for p in pids], overrides)
    if out_dir is not None:
        from aisim.output.write import table_bytes, write_file_atomically

        write_file_atomically(out_dir / "batch.parquet", table_bytes(table), "--output-dir")
    return table


def batch_table(paths: list[Path], records: list[dict], overrides: tuple[str, ...]):
    import pyarrow as pa

    from aisim.output.schema import column, table_metadata
    from aisim.output.summary import summary_values
    from aisim.sweeps.run import _version
    from aisim.sweeps.table import summary_columns

    fields = [
        column("config_index", pa.int64(), "index", "position in the -c order", False),
        column("config", pa.string(), "path", "the config file, as given", False),
        column("point_id", pa.string(), "id", "hash of the path and the config's content", False),
        column("status", pa.string(), "code", "ok | error", False),
        column("error", pa.string(), "text", "why the config failed (null when ok)"),
        column(
            "prediction_sha256",
            pa.string(),
            "sha256",
            "hash of the deterministic prediction fields (as aisim predict prints)",
        ),
    ]
    summary_cols = summary_columns(records)
    fields += list(summary_cols.values())
    cols: dict[str, list] = {f.name: [] for f in fields}
    for index, (path, rec) in enumerate(zip(paths, records, strict=True)):
        cols["config_index"].append(index)
        cols["config"].append(str(path))
        for name in ("point_id", "status", "error", "prediction_sha256"):
            cols[name].append(rec[name])
        summary = summary_values(rec["prediction"]) if rec["prediction"] is not None else {}
        for name in summary_cols:
            cols[name].append(summary.get(name))
    table = pa.Table.from_pydict(cols, schema=pa.schema(fields))
    meta = {"overrides": list(overrides), "aisim_version": _version()}
    return table.replace_schema_metadata(table_metadata("batch", meta))


BATCH_COLUMNS = (  # (header, summary field, format): what a planner compares first
    ("TTFT mean", "mean_ttft_ms", "{:,.1f}"),
    ("TTFT p99", "p99_ttft_ms", "{:,.1f}"),
    ("TPOT mean", "mean_tpot_ms", "{:,.2f}"),
    ("E2E p99", "p99_e2e_latency_ms", "{:,.0f}"),
    ("req/s", "request_throughput_rps", "{:,.2f}"),
    ("out tok/s", "output_throughput_tok_s", "{:,.0f}"),
    ("GPU h", "gpu_hours", "{:.4g}"),
)


def render_batch(table) -> str:
    """The configs side by side: a row each (latencies in ms), failures with their error."""
    rows = table.to_pylist()
    names = [Path(r["config"]).name for r in rows]
    head = ["config", *(h for h, _, _ in BATCH_COLUMNS)]
    body = []
    for name, r in zip(names, rows, strict=True):
        if r["status"] != "ok":
            body.append([name, f"error: {r['error']}"])
            continue
        body.append([name, *(_cell(r.get(key), form) for _, key, form in BATCH_COLUMNS)])
    ok_rows = [b for b in body if len(b) == len(head)]
    widths = [max(len(row[i]) for row in [head, *ok_rows]) for i in range(len(head))]
    widths[0] = max(widths[0], *(len(b[0]) for b in body))

    def line(cells: list[str]) -> str:
        if len(cells) != len(head):
            return f"{cells[0].ljust(widths[0])}  {cells[1]}"
        rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([cells[0].ljust(widths[0]), *rest])

    out = [line(head), "-" * len(line(head))]
    out += [line(b) for b in body]
    failed = sum(1 for r in rows if r["status"] != "ok")
    out.append(f"{len(rows)} configs, {failed} failed")
    return "\n".join(out)


def _cell(value, form: str) -> str:
    return "N/A" if value is None else form.format(value)
