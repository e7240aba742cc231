#!/usr/bin/env python3
"""Regenerate the AISimulate golden figures under tests/golden/.

Each golden is a folder tests/golden/<name>/ holding the ``config.yaml`` that was run. This
script runs the reference simulator on that config and rewrites, in the same folder:

* ``prediction.json`` - AISimulate's prediction.json without the host-time fields
  (``wall_time_ms``, ``processed_tokens_per_s``, ``processed_output_tokens_per_s``) and without
  ``per_request`` (the records are in requests.jsonl);
* ``requests.jsonl`` - the per-request records in the order AISimulate wrote them, each without
  its random ``uuid``;
* ``meta.json`` - ``exit_code``, ``aisimulate_version`` and the hand-written ``note`` (kept from
  the previous meta.json); for a failed run also ``error`` (its first error line), and when no
  prediction was written ``stderr_head`` (first stderr lines) instead of the output files.

AISimulate is a reference oracle only: it is never imported, only executed. This script is a
maintenance tool and must not be imported by the test-suite.

Usage:
    python bench/pin_goldens.py                  # every folder under tests/golden/
    python bench/pin_goldens.py preempt-recompute hol-admission
    python bench/pin_goldens.py --aisimulate /path/to/aisimulate --check   # compare, write nothing
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

STRIP_PREDICTION_KEYS = (
    "wall_time_ms",
    "processed_tokens_per_s",
    "processed_output_tokens_per_s",
    "per_request",
)
STRIP_RECORD_KEYS = ("uuid",)
OUTPUT_FILES = ("prediction.json", "requests.jsonl")
DEFAULT_AISIMULATE = "~/aisimulate-venv/bin/aisimulate"
GOLDEN_DIR = Path(__file__).resolve().parent.parent / "tests" / "golden"


def aisimulate_version(exe: Path) -> str:
    """Version of the aisimulate distribution installed beside the executable."""
    python = exe.parent / "python"
    if python.exists():
        proc = subprocess.run(
            [str(python), "-c", "import importlib.metadata as m; print(m.version('aisimulate'))"],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode == 0 and proc.stdout.strip():
            return proc.stdout.strip()
    return "unknown"


def run_one(exe: Path, folder: Path) -> dict:
    """Run AISimulate on folder/config.yaml; return the stripped outputs and the exit status."""
    with tempfile.TemporaryDirectory(prefix="pin-golden-") as tmp:
        out = Path(tmp) / "out"
        proc = subprocess.run(
            [
                str(exe),
                "predict",
                "-c",
                str(folder / "config.yaml"),
                "--output-dir",
                str(out),
                "--overwrite",
                "--format",
                "json",
                "--capture-per-request",
            ],
            capture_output=True,
            text=True,
            check=False,
            # relative trace paths: AISimulate reads them from its working directory
            cwd=folder,
        )
        result: dict = {"exit_code": proc.returncode, "prediction": None, "records": None}
        pred_path = out / "prediction.json"
        if pred_path.exists():
            pred = json.loads(pred_path.read_text())
            for key in STRIP_PREDICTION_KEYS:
                pred.pop(key, None)
            result["prediction"] = pred
        req_path = out / "requests.jsonl"
        if req_path.exists():
            records = []
            for line in req_path.read_text().splitlines():
                if not line.strip():
                    continue
                rec = json.loads(line)
                for key in STRIP_RECORD_KEYS:
                    rec.pop(key, None)
                records.append(rec)
            result["records"] = records
        # The config path appears in AISimulate's messages; keep the goldens location-independent.
        stderr = proc.stderr.replace(str(folder / "config.yaml"), "config.yaml")
        stderr = stderr.replace(str(out), "OUTPUT_DIR")
        stderr_lines = [ln.rstrip() for ln in stderr.splitlines() if ln.strip()]
        result["stderr_head"] = stderr_lines[:6]
        return result


def first_error_line(lines: list[str]) -> str:
    """The first stderr line that reports an error (skipping argparse's usage banner)."""
    for line in lines:
        if "error" in line.lower():
            return line
    return lines[0] if lines else ""


def render(result: dict) -> dict[str, str]:
    """File name -> text, for the output files of one golden."""
    files: dict[str, str] = {}
    if result["prediction"] is not None:
        files["prediction.json"] = json.dumps(result["prediction"], indent=2, sort_keys=True) + "\n"
    if result["records"] is not None:
        files["requests.jsonl"] = "".join(
            json.dumps(rec, separators=(",", ":")) + "\n" for rec in result["records"]
        )
    return files


def canonical_records(text: str) -> list[str]:
    """Records as a sorted list of strings: AISimulate orders ties by the random uuid."""
    return sorted(line for line in text.splitlines() if line.strip())


def close(a: object, b: object, rel: float = 1e-12) -> bool:
    """Equality, except floats within a relative tolerance.

    AISimulate's mean_* / std_* statistics of per-request samples vary in the last bits between
    identical runs (their accumulation order is not fixed), so --check cannot demand bit equality.
    """
    if isinstance(a, float) and isinstance(b, float):
        return a == b or abs(a - b) <= rel * max(abs(a), abs(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k], rel) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y, rel) for x, y in zip(a, b, strict=True))
    return a == b


def pin(exe: Path, folder: Path, version: str, check: bool) -> bool:
    """Regenerate (or, with check, compare) one golden. Returns True if it matched / was written."""
    result = run_one(exe, folder)
    files = render(result)
    meta_path = folder / "meta.json"
    old_meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    meta = {
        "exit_code": result["exit_code"],
        "aisimulate_version": version,
        "note": old_meta.get("note", ""),
    }
    if result["exit_code"] != 0:
        meta["error"] = first_error_line(result["stderr_head"])
    if result["prediction"] is None:
        meta["stderr_head"] = result["stderr_head"]

    if check:
        ok = old_meta.get("exit_code") == meta["exit_code"]
        for name in OUTPUT_FILES:
            path = folder / name
            new = files.get(name)
            old = path.read_text() if path.exists() else None
            if name == "requests.jsonl" and new is not None and old is not None:
                same = canonical_records(new) == canonical_records(old)
            elif name == "prediction.json" and new is not None and old is not None:
                same = close(json.loads(new), json.loads(old))
            else:
                same = new == old
            if not same:
                print(f"  {folder.name}: {name} differs", file=sys.stderr)
                ok = False
        return ok

    for name in OUTPUT_FILES:
        path = folder / name
        if name in files:
            path.write_text(files[name])
        elif path.exists():
            path.unlink()
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="golden folder names (default: all)")
    parser.add_argument("--aisimulate", default=DEFAULT_AISIMULATE, help="AISimulate executable")
    parser.add_argument("--golden-dir", default=str(GOLDEN_DIR), help="folder of the goldens")
    parser.add_argument(
        "--check", action="store_true", help="compare with the pinned files; write nothing"
    )
    args = parser.parse_args(argv)

    exe = Path(args.aisimulate).expanduser()
    if not exe.exists():
        parser.error(f"AISimulate executable not found: {exe}")
    root = Path(args.golden_dir)
    if args.names:
        folders = [root / name for name in args.names]
    else:
        folders = sorted(p for p in root.iterdir() if (p / "config.yaml").exists())
    missing = [f.name for f in folders if not (f / "config.yaml").exists()]
    if missing:
        parser.error(f"no config.yaml in: {', '.join(missing)}")

    version = aisimulate_version(exe)
    failures = 0
    for folder in folders:
        ok = pin(exe, folder, version, args.check)
        meta = json.loads((folder / "meta.json").read_text()) if not args.check else None
        status = "ok" if ok else "DIFFERS"
        if meta is not None:
            status = f"exit {meta['exit_code']}"
        print(f"{folder.name}: {status}")
        failures += not ok
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
