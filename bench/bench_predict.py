"""Whole-process benchmark: aisim vs AISimulate on the same config, side by side.

usage: python bench/bench_predict.py CONFIG.yaml [--aisimulate PATH] [--repeat N]
Records wall time and peak RSS of each whole process (compare.timed_run), aisim's cold run
(empty numba cache), and both tools' reported wall_time_ms, as one JSON line appended to
bench/results.jsonl.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from compare import BenchError, timed_run  # bench/ is on sys.path when run as a script

HERE = Path(__file__).parent


def _timed(cmd: list[str], env: dict | None = None) -> tuple[float, float, dict]:
    """One whole process, measured by compare.py's timed_run (the harness for every workload)."""
    exe, _, _, config = cmd
    with tempfile.TemporaryDirectory() as out:
        try:
            run = timed_run(exe, Path(config).resolve(), Path(out, "pred"), env or dict(os.environ))
        except BenchError as err:
            sys.exit(f"failed: {err}")
        pred = json.loads(run["prediction"].read_text())
    return run["wall_s"], run["peak_mb"], pred


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--aisimulate", default=os.path.expanduser("~/aisimulate-venv/bin/aisimulate"))
    ap.add_argument("--aisim", default=shutil.which("aisim") or "aisim")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-cold", action="store_true")
    args = ap.parse_args()
    row: dict = {"config": args.config, "date": datetime.date.today().isoformat()}
    if not args.no_cold:
        env = dict(os.environ, AISIM_CACHE_DIR=tempfile.mkdtemp())
        row["aisim_cold_s"] = round(_timed([args.aisim, "predict", "-c", args.config], env)[0], 3)
    runs = [_timed([args.aisim, "predict", "-c", args.config]) for _ in range(args.repeat)]
    row["aisim_warm_s"] = round(statistics.median(r[0] for r in runs), 3)
    row["aisim_peak_mb"] = round(max(r[1] for r in runs), 1)
    row["aisim_wall_time_ms"] = round(statistics.median(r[2]["wall_time_ms"] for r in runs), 1)
    if Path(args.aisimulate).exists():
        ref = [_timed([args.aisimulate, "predict", "-c", args.config]) for _ in range(args.repeat)]
        row["aisimulate_s"] = round(statistics.median(r[0] for r in ref), 3)
        row["aisimulate_peak_mb"] = round(max(r[1] for r in ref), 1)
        row["aisimulate_wall_time_ms"] = round(
            statistics.median(r[2]["wall_time_ms"] for r in ref), 1
        )
        row["speedup_process"] = round(row["aisimulate_s"] / row["aisim_warm_s"], 2)
        row["speedup_wall_time_ms"] = round(
            row["aisimulate_wall_time_ms"] / row["aisim_wall_time_ms"], 2
        )
    print(json.dumps(row))
    with (HERE / "results.jsonl").open("a") as fh:
        fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
