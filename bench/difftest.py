#!/usr/bin/env python3
"""Differential test of aisim against AISimulate on random valid configs.

For each sampled config (bench/difftest_space.py) both simulators run in the case's folder
(AISimulate reads relative trace paths from the working directory), and the case is classified:

* ``OK``                both run and shared/tools/parity.py passes;
* ``OK-BOTH-REFUSE``    both refuse (the two messages are recorded);
* ``REFUSED-BY-AISIM``  AISimulate runs it, aisim refuses with its documented "not available yet"
                        error (NotAvailableError): acceptable, counted so the space can be tuned;
* ``MISMATCH-REFUSAL``  one refuses and the other runs (any other refusal by aisim, or aisim
                        runs what AISimulate refuses);
* ``MISMATCH``          both run but parity fails (or the exit codes differ); the worst field
                        is named;
* ``INVALID-CONFIG``    AISimulate rejects the config as invalid input (exit 2) and aisim
                        refuses it too: a bug of the sampler, not a finding;
* ``ERROR``             a simulator crashed or timed out.

Every case keeps its folder under OUT/cases/<id>/ (config.yaml, the trace it needs,
result.json); a case that is not OK also keeps both outputs (aisim-out/, oracle-out/), both
stderr, parity.txt and, from a second run of both tools with --capture-per-request
(aisim-capture/, oracle-capture/), requests-diff.txt: which requests' records differ first in
simulated time, and how. A rerun with the same --seed and output folder skips the cases that
have a result.json, so a run can be resumed or extended with a larger --count.

    python bench/difftest.py --seed 1 --count 300 [--out DIR] [--jobs 1]
    python bench/difftest.py --replay CFG.yaml [CFG.yaml ...]   # classify given configs
    python bench/difftest.py --summary --out DIR                 # the table of a finished run

Run it with the Python of the venv aisim is installed in (or pass --aisim-python).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from difftest_report import records_diff, write_summary
from difftest_space import sample_case, space_version

DEFAULT_OUT = "/tmp/aisim-difftest"
DEFAULT_AISIMULATE = "/work/oracle/bin/aisimulate"
DEFAULT_PARITY = "/work/shared/tools/parity.py"
OK_CLASSES = ("OK", "OK-BOTH-REFUSE")
NO_TIMING_DATA = "no timing data for"  # AISimulate's refusal of a config its tables cannot price

# aisim runs through this wrapper so that the harness learns the class of its error
# (NotAvailableError = a documented "not available yet" refusal) without parsing messages
_AISIM_WRAPPER = """
import sys
import click
from aisim.cli import main
from aisim.errors import AisimError, NotAvailableError
try:
    main(sys.argv[1:], prog_name="aisim", standalone_mode=False)
except click.ClickException as exc:
    exc.show()
    kind = type(exc).__name__ if isinstance(exc, AisimError) else "ClickException"
    if isinstance(exc, NotAvailableError):  # its subclasses are documented refusals too
        kind = "NotAvailableError"
    print(f"difftest: aisim error class {kind}", file=sys.stderr)
    sys.exit(exc.exit_code)
"""


def main() -> int:
    args = _parse_args()
    out = Path(args.out)
    if args.summary:
        print(write_summary(out))
        return 0
    tools = Tools(args.aisim_python, args.aisimulate, args.parity, args.timeout)
    if args.replay:
        jobs = [(f"replay-{i:03d}-{_case_name(Path(p))}", p) for i, p in enumerate(args.replay)]
    else:
        jobs = [(f"s{args.seed}-{i:05d}", i) for i in range(args.count)]
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    done = 0

    def one(job):
        case_id, what = job
        folder = out / "cases" / case_id
        if (folder / "result.json").exists() and not args.replay:
            old = json.loads((folder / "result.json").read_text())
            if old.get("space_version") == space_version(args.space):
                return old, True
        if isinstance(what, int):
            case = sample_case(args.seed, what, args.space)
            result = run_case(
                folder, case.config, case.files, case.tags, tools, capture=not args.no_capture
            )
        else:
            result = replay_config(folder, Path(what), tools, capture=not args.no_capture)
        result.update(
            id=case_id,
            seed=args.seed if isinstance(what, int) else None,
            index=what if isinstance(what, int) else None,
            space_version=space_version(args.space),
        )
        (folder / "result.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
        return result, False

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for result, skipped in pool.map(one, jobs):
            done += 1
            if not skipped or args.verbose:
                worst = (
                    f"  {result.get('worst') or ''}" if result["class"] not in OK_CLASSES else ""
                )
                print(
                    f"[{done}/{len(jobs)} {time.monotonic() - started:6.0f}s] {result['id']}"
                    f" {result['class']:<17} {','.join(result['tags'])}{worst}",
                    flush=True,
                )
    print(write_summary(out))
    return 0


def _case_name(config: Path) -> str:
    """A replayed config's folder name: its file stem, or its folder's for a config.yaml."""
    return config.parent.name if config.stem == "config" else config.stem


def _parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=1, help="seed of the sampled space [1]")
    p.add_argument(
        "--space",
        choices=("default", "models", "sessions"),
        default="default",
        help="the model set: default, models (Mixtral, MiniMax-M2.5, Kimi-K2, GLM-5, ...) or "
        "sessions (the default set, every case an aggregated run of multi-turn sessions)",
    )
    p.add_argument("--count", type=int, default=300, help="cases to run (indices 0..N-1) [300]")
    p.add_argument("--out", default=DEFAULT_OUT, help=f"output folder [{DEFAULT_OUT}]")
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="cases run at once [1: the machine's 2 cores are shared]",
    )
    p.add_argument("--replay", nargs="+", metavar="CFG", help="classify these configs instead")
    p.add_argument("--summary", action="store_true", help="only print the table of --out")
    p.add_argument(
        "--no-capture",
        action="store_true",
        help="skip the --capture-per-request rerun of mismatching cases",
    )
    p.add_argument("--verbose", action="store_true", help="also list skipped (finished) cases")
    p.add_argument(
        "--aisim-python",
        default=sys.executable,
        help="Python of the venv aisim is installed in [this Python]",
    )
    p.add_argument(
        "--aisimulate",
        default=DEFAULT_AISIMULATE,
        help=f"the AISimulate executable [{DEFAULT_AISIMULATE}]",
    )
    p.add_argument("--parity", default=DEFAULT_PARITY, help=f"parity.py [{DEFAULT_PARITY}]")
    p.add_argument(
        "--timeout",
        type=float,
        default=900.0,
        help="seconds per simulator run [900: a first op-level run compiles]",
    )
    return p.parse_args()


class Tools:
    """How to run each simulator and the parity check."""

    def __init__(self, aisim_python: str, aisimulate: str, parity: str, timeout: float) -> None:
        self.aisim_python = aisim_python
        self.aisimulate = aisimulate
        self.parity = parity
        self.timeout = timeout

    def aisim(self, folder: Path, out: str, capture: bool) -> dict:
        cmd = [
            self.aisim_python,
            "-P",
            "-c",
            _AISIM_WRAPPER,
            "predict",
            "-c",
            "config.yaml",
            "--output-dir",
            out,
            "--overwrite",
            "--format",
            "json",
        ]
        return self._run(cmd + (["--capture-per-request"] if capture else []), folder, out)

    def oracle(self, folder: Path, out: str, capture: bool) -> dict:
        cmd = [
            self.aisimulate,
            "predict",
            "-c",
            "oracle.yaml" if (folder / "oracle.yaml").exists() else "config.yaml",
            "--output-dir",
            out,
            "--overwrite",
            "--format",
            "json",
        ]
        return self._run(cmd + (["--capture-per-request"] if capture else []), folder, out)

    def _run(self, cmd: list[str], folder: Path, out: str) -> dict:
        started = time.monotonic()
        # its own process group: a timeout ends the tool's worker processes too (AISimulate
        # simulates in a child that would otherwise keep a core busy for the rest of the run)
        proc = subprocess.Popen(
            cmd,
            cwd=folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            _, stderr = proc.communicate(timeout=self.timeout)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            _, stderr = proc.communicate()
            code, stderr = None, (stderr or "") + "\nTIMEOUT\n"
        return {
            "exit": code,
            "stderr": stderr,
            "seconds": round(time.monotonic() - started, 2),
            "ran": (folder / out / "prediction.json").exists(),
        }

    def compare(self, got: Path, ref: Path) -> tuple[bool, str]:
        proc = subprocess.run(
            [sys.executable, self.parity, str(got), str(ref)],
            capture_output=True,
            text=True,
            check=False,
        )
        return proc.returncode == 0, (proc.stdout + proc.stderr).strip()


def replay_config(folder: Path, config: Path, tools: Tools, capture: bool) -> dict:
    """Classify a config given by hand (its trace files are copied beside it)."""
    cfg = yaml.safe_load(config.read_text())
    files = {}
    src = cfg.get("traffic", {}).get("source", {})
    if src.get("type") == "trace":
        paths = []
        for i, p in enumerate(src.get("paths", [])):
            name = f"trace{i}.jsonl" if i else "trace.jsonl"
            files[name] = (config.parent / p).read_text()
            paths.append(name)
        src["paths"] = paths
    return run_case(folder, cfg, files, ["replay"], tools, capture=capture)


def run_case(
    folder: Path,
    config: dict,
    files: dict[str, str],
    tags: list[str],
    tools: Tools,
    capture: bool = True,
) -> dict:
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(
        yaml.safe_dump(config, sort_keys=False, default_flow_style=None, width=100)
    )
    for name, text in files.items():
        (folder / name).write_text(text)
    _oracle_model_folder(folder, config)
    a = tools.aisim(folder, "aisim-out", capture=False)
    b = tools.oracle(folder, "oracle-out", capture=False)
    result = {"tags": tags, "aisim": _status(a, aisim=True), "oracle": _status(b, aisim=False)}
    result["class"], result["worst"] = _classify(folder, a, b, result, tools)
    if result["class"] in OK_CLASSES:
        for name in ("aisim-out", "oracle-out"):
            shutil.rmtree(folder / name, ignore_errors=True)
        return result
    (folder / "aisim.stderr").write_text(a["stderr"])
    (folder / "oracle.stderr").write_text(b["stderr"])
    if result["class"] == "MISMATCH" and capture:
        ca = tools.aisim(folder, "aisim-capture", capture=True)
        cb = tools.oracle(folder, "oracle-capture", capture=True)
        (folder / "aisim-capture.stderr").write_text(ca["stderr"])
        diff = records_diff(
            folder / "aisim-capture" / "requests.jsonl",
            folder / "oracle-capture" / "requests.jsonl",
        )
        (folder / "requests-diff.txt").write_text(diff["text"])
        result["requests"] = {k: v for k, v in diff.items() if k != "text"}
        result["capture_seconds"] = [ca["seconds"], cb["seconds"]]
    return result


# models AISimulate resolves by id only online: it is given a folder holding the same
# config.json (and hf_quant_config.json) aisim ships
_DATA_MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
ORACLE_FOLDER_MODELS = (
    "mistralai/Mixtral-8x7B-v0.1",
    "mistralai/Mixtral-8x22B-v0.1",
    "MiniMaxAI/MiniMax-M2.5",
    "nvidia/MiniMax-M2.5-NVFP4",
    "moonshotai/Kimi-K2-Instruct",
    "zai-org/GLM-5-FP8",
    "zai-org/GLM-5.1-FP8",
    "moonshotai/Kimi-K2.5",
    "nvidia/Kimi-K2.5-NVFP4",
)


def _oracle_model_folder(folder: Path, config: dict) -> None:
    model = config.get("engine", {}).get("model")
    if model not in ORACLE_FOLDER_MODELS:
        return
    stem = model.replace("/", "--")
    local = folder / "oracle-model"
    local.mkdir()
    shutil.copy(_DATA_MODELS / f"{stem}_config.json", local / "config.json")
    quant = _DATA_MODELS / f"{stem}_hf_quant_config.json"
    if quant.exists():
        shutil.copy(quant, local / "hf_quant_config.json")
    oracle = json.loads(json.dumps(config))
    oracle["engine"]["model"] = str(local)
    (folder / "oracle.yaml").write_text(
        yaml.safe_dump(oracle, sort_keys=False, default_flow_style=None, width=100)
    )


def _status(run: dict, aisim: bool) -> dict:
    lines = [ln for ln in run["stderr"].splitlines() if ln.strip()]
    status = {"exit": run["exit"], "ran": run["ran"], "seconds": run["seconds"]}
    if aisim:
        kinds = [
            ln.rsplit(" ", 1)[1] for ln in lines if ln.startswith("difftest: aisim error class ")
        ]
        status["error_class"] = kinds[-1] if kinds else None
        errors = [ln for ln in lines if ln.startswith(("aisim: error:", "ERROR:", "Error:"))]
    else:  # a pydantic report names the problem on its "Value error, ..." line
        errors = [
            ln.strip()
            for ln in lines
            if ("error" in ln.lower() or "failed" in ln.lower())
            and not ln.lstrip().startswith("For further information")
        ]
        errors = [ln for ln in errors if ln.startswith("Value error")] or errors
    if not run["ran"] or run["exit"]:
        status["message"] = (errors[-1] if errors else lines[-1] if lines else "")[:400]
    return status


def _classify(folder: Path, a: dict, b: dict, result: dict, tools: Tools) -> tuple[str, str]:
    sa, sb = result["aisim"], result["oracle"]
    if a["exit"] is None or b["exit"] is None:
        return "ERROR", "timeout"
    if not a["ran"] and sa["error_class"] is None:  # a traceback, not one of aisim's errors
        return "ERROR", f"aisim crashed (exit {a['exit']}): {sa.get('message')}"
    if a["ran"] and b["ran"]:
        same, text = tools.compare(
            folder / "aisim-out" / "prediction.json", folder / "oracle-out" / "prediction.json"
        )
        (folder / "parity.txt").write_text(text + "\n")
        result["parity"] = text
        if not same:
            return "MISMATCH", _worst(text)
        if a["exit"] != b["exit"]:
            return "MISMATCH", f"exit code: aisim {a['exit']} AISimulate {b['exit']}"
        return "OK", ""
    if not a["ran"] and not b["ran"]:
        # AISimulate exits 2 for a table it lacks as for bad input; only the latter is the
        # sampler's fault
        if b["exit"] == 2 and NO_TIMING_DATA not in sb.get("message", ""):
            return "INVALID-CONFIG", sb.get("message", "")
        return "OK-BOTH-REFUSE", ""
    if b["ran"]:
        if sa["error_class"] == "NotAvailableError":
            return "REFUSED-BY-AISIM", sa.get("message", "")
        return "MISMATCH-REFUSAL", f"aisim refuses ({sa['error_class']}): {sa.get('message')}"
    return "MISMATCH-REFUSAL", f"AISimulate refuses (exit {b['exit']}): {sb.get('message')}"


def _worst(parity_text: str) -> str:
    line = parity_text.splitlines()[-1] if parity_text else ""
    return line.split("worst ", 1)[1] if "worst " in line else line


if __name__ == "__main__":
    sys.exit(main())
