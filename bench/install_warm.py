"""A second install on a machine starts warm: time it as a new user meets it.

usage: python bench/install_warm.py [--ci] [--keep]

Clones this checkout into a fresh folder (a new install location), runs the README's install
command there, and times the first `aisim predict -c examples/quickstart.yaml` while the kernel
cache root already holds another install's kernels (this checkout's: run any prediction here
first). With --ci it also times `.ci/run` in a second fresh clone, install included. Prints one
JSON line per figure; bench/INSTALL.md records the results.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _clone(where: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(REPO), str(where)], check=True)
    return where


def _timed(cmd: list[str], cwd: Path, env: dict) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    return time.perf_counter() - start, proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ci", action="store_true", help="also time .ci/run in a fresh clone")
    parser.add_argument("--keep", action="store_true", help="keep the clones")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "VIRTUAL_ENV")}
    scratch = Path(tempfile.mkdtemp(prefix="aisim-install-"))
    try:
        clone = _clone(scratch / "clone")
        install_s, proc = _timed(
            ["sh", "-c", "python3 -m venv .venv && .venv/bin/pip install -q -e ."], clone, env
        )
        if proc.returncode:
            sys.exit(proc.stderr[-2000:])
        first_s, proc = _timed(
            [".venv/bin/aisim", "predict", "-c", "examples/quickstart.yaml"], clone, env
        )
        print(
            json.dumps(
                {
                    "figure": "first predict in a fresh clone",
                    "install_s": round(install_s, 1),
                    "first_predict_s": round(first_s, 2),
                    "exit": proc.returncode,
                    "compiled": "compiling" in proc.stderr,
                }
            )
        )
        if args.ci:
            ci_clone = _clone(scratch / "ci")
            ci_s, proc = _timed([".ci/run"], ci_clone, env)
            tail = (proc.stdout.strip().splitlines() or [""])[-1]
            print(
                json.dumps(
                    {
                        "figure": ".ci/run in a fresh clone",
                        "seconds": round(ci_s, 1),
                        "exit": proc.returncode,
                        "pytest": tail,
                    }
                )
            )
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
