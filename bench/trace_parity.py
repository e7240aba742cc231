#!/usr/bin/env python3
"""Run aisim and AISimulate on the trace deployments (bench/traces/*.yaml), compare, time.

The configs read the Mooncake traces from ../shared (never committed). AISimulate resolves
relative trace paths against its working directory, so it runs from the config's folder; aisim
resolves them against the config file's folder. Prints one markdown row per config: the parity
verdict of ../shared/tools/parity.py, key figures of both outputs and both tools' times
(process wall time and the run's own wall_time_ms).

Usage: python bench/trace_parity.py [CONFIG ...] [--aisimulate PATH] [--aisim PATH]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PARITY = HERE.parent.parent / "shared" / "tools" / "parity.py"
KEYS = (
    "num_requests",
    "completed_requests",
    "prefix_cache_reused_ratio",
    "duration_ms",
    "mean_ttft_ms",
    "p99_itl_ms",
)


def run(cmd: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=False, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("configs", nargs="*", type=Path)
    ap.add_argument("--aisimulate", default="~/aisimulate-venv/bin/aisimulate")
    ap.add_argument("--aisim", default="aisim")
    args = ap.parse_args()
    configs = args.configs or sorted((HERE / "traces").glob("*.yaml"))
    ref_exe = str(Path(args.aisimulate).expanduser())
    with tempfile.TemporaryDirectory(prefix="trace-parity-") as tmp:
        for cfg in configs:
            cfg = cfg.resolve()
            out_a, out_r = Path(tmp) / f"a-{cfg.stem}", Path(tmp) / f"r-{cfg.stem}"
            common = ["predict", "-c", str(cfg), "--overwrite", "--format", "json"]
            t_a = run([args.aisim, *common, "--output-dir", str(out_a)], cfg.parent)
            t_r = run([ref_exe, *common, "--output-dir", str(out_r)], cfg.parent)
            verdict = subprocess.run(
                [
                    "python3",
                    str(PARITY),
                    str(out_a / "prediction.json"),
                    str(out_r / "prediction.json"),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            a = json.loads((out_a / "prediction.json").read_text())
            r = json.loads((out_r / "prediction.json").read_text())
            figures = " / ".join(
                f"{a[k]:.6g}" if isinstance(a[k], float) else str(a[k]) for k in KEYS
            )
            line = verdict.stdout.strip().splitlines()[-1] if verdict.stdout.strip() else "?"
            print(
                f"| {cfg.stem} | {line} | {figures} | {t_a:.2f} s, {a['wall_time_ms']:.0f} ms "
                f"| {t_r:.2f} s, {r['wall_time_ms']:.0f} ms |",
                flush=True,
            )


if __name__ == "__main__":
    main()
