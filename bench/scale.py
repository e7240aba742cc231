"""Scale runs: each config in bench/scale/ as one whole aisim process (warm caches).

usage: python bench/scale.py [CONFIG ...] [--out bench/SCALE.md]

Prints and writes one Markdown row per config: requests, simulated output tokens, whole-process
wall time, the run's wall_time_ms, peak RSS, core seconds and output tokens per core second.
The limits of the 10-million-request run (60 s, 2 GiB) are judged in the table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from compare import BenchError, timed_run  # noqa: E402

LIMIT_S = 60.0
LIMIT_MB = 2048.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("configs", nargs="*", type=Path)
    ap.add_argument("--out", type=Path, default=HERE / "SCALE.md")
    args = ap.parse_args()
    configs = args.configs or sorted((HERE / "scale").glob("*.yaml"))
    aisim = str(Path(sys.executable).parent / "aisim")
    rows = []
    work = Path(tempfile.mkdtemp(prefix="aisim-scale-"))
    try:
        timed_run(aisim, configs[0].resolve(), work / "warmup", dict(os.environ))  # load caches
        for config in configs:
            run = timed_run(aisim, config.resolve(), work / config.stem, dict(os.environ))
            pred = json.loads(run["prediction"].read_text())
            big = pred["num_requests"] >= 10_000_000
            verdict = ""
            if big:
                ok = run["wall_s"] <= LIMIT_S and run["peak_mb"] <= LIMIT_MB
                verdict = "met" if ok else "NOT met"
            rows.append(
                f"| {config.stem} | {pred['num_requests']:,} | {run['output_tokens']:,} | "
                f"{run['wall_s']:.2f} | {run['wall_time_ms']:.0f} | {run['peak_mb']:.0f} | "
                f"{run['core_s']:.2f} | {run['output_tokens'] / max(run['core_s'], 1e-9):,.0f} | "
                f"{verdict} |"
            )
            print(rows[-1], flush=True)
    except BenchError as err:
        print(f"scale: error: {err}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(work, ignore_errors=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = os.getloadavg()
    text = [
        "# Scale runs",
        "",
        f"Measured {stamp} on this machine ({os.cpu_count()} cores, load average at the end "
        f"{load[0]:.2f}) with `python bench/scale.py`; warm caches, one process per config.",
        f"The 10-million-request run must finish within {LIMIT_S:.0f} s and {LIMIT_MB:.0f} MB "
        "(2 GiB) peak RSS.",
        "",
        "| config | requests | output tokens | process s | wall_time_ms | peak RSS MB | core s "
        "| output tokens / core s | 10 M limits |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
        *rows,
        "",
    ]
    # the report's own table is rewritten; sections below it (measured by hand) are kept
    old = args.out.read_text() if args.out.exists() else ""
    kept = old[old.index("\n## ") :] if "\n## " in old else ""
    args.out.write_text("\n".join(text) + kept)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
