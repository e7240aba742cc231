"""Sweep benchmark: a 32-point concurrency sweep (1..1024) of a config with `aisim sweep`
against ONE AISimulate run of the same config, measured side by side (alternating, repeated).

usage: python bench/bench_sweep.py CONFIG.yaml [--jobs 2] [--repeat 3] [--aisimulate PATH]
Appends one JSON line to bench/sweep_results.jsonl: both whole-process wall times per repeat,
the per-point simulated wall_time_ms (where the time goes) and the machine load.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).parent
# 32 concurrencies from 1 to 1024, about 4 per octave at the top, every integer at the bottom
CONCURRENCY = (
    1,
    2,
    3,
    4,
    5,
    6,
    7,
    8,
    10,
    12,
    14,
    16,
    20,
    24,
    28,
    32,
    40,
    48,
    56,
    64,
    80,
    96,
    128,
    160,
    192,
    256,
    320,
    384,
    512,
    640,
    768,
    1024,
)


def _wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--aisimulate", default=os.path.expanduser("~/aisimulate-venv/bin/aisimulate"))
    ap.add_argument("--aisim", default=shutil.which("aisim") or "aisim")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    assert len(CONCURRENCY) == 32
    grid = "traffic.load.concurrency=" + ",".join(map(str, CONCURRENCY))
    row: dict = {
        "config": args.config,
        "date": datetime.date.today().isoformat(),
        "points": len(CONCURRENCY),
        "jobs": args.jobs,
        "sweep_s": [],
        "aisimulate_s": [],
        "load_avg_before": [],
    }
    keep = None
    for _ in range(args.repeat):
        row["load_avg_before"].append(os.getloadavg()[0])
        sim_out = tempfile.mkdtemp()
        row["aisimulate_s"].append(
            _wall(
                [
                    args.aisimulate,
                    "predict",
                    "-c",
                    args.config,
                    "--output-dir",
                    sim_out,
                    "--overwrite",
                    "--format",
                    "json",
                ]
            )
        )
        shutil.rmtree(sim_out)
        sweep_out = tempfile.mkdtemp()
        row["sweep_s"].append(
            _wall(
                [
                    args.aisim,
                    "sweep",
                    "-c",
                    args.config,
                    "--grid",
                    grid,
                    "-o",
                    sweep_out,
                    "--jobs",
                    str(args.jobs),
                ]
            )
        )
        if keep is not None:
            shutil.rmtree(keep)
        keep = sweep_out
    import pyarrow.parquet as pq

    table = pq.read_table(Path(keep) / "sweep.parquet").to_pydict()
    row["statuses"] = sorted(set(table["status"]))
    # each point's wall_time_ms (config -> metrics, as aisim predict reports it), last sweep;
    # the points/<id>.json resume records keep the host fields the sweep table leaves out
    by_id = {}
    for f in (Path(keep) / "points").glob("*.json"):
        rec = json.loads(f.read_text())
        by_id[rec["point_id"]] = round(rec["prediction"]["wall_time_ms"], 1)
    row["point_wall_ms"] = {
        str(c): by_id[pid]
        for c, pid in zip(table["traffic.load.concurrency"], table["point_id"], strict=True)
    }
    row["points_wall_ms_total"] = round(sum(by_id.values()), 1)
    shutil.rmtree(keep)
    row["completed_requests"] = sum(table["completed_requests"])
    row["sweep_best_s"] = min(row["sweep_s"])
    row["aisimulate_best_s"] = min(row["aisimulate_s"])
    row["ratio_best"] = row["aisimulate_best_s"] / row["sweep_best_s"]
    with (HERE / "sweep_results.jsonl").open("a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
