"""Performance harness: every seed workload through aisim and AISimulate, side by side.

usage: python bench/compare.py [--workloads DIR] [--aisimulate EXE_OR_VENV] [--rounds 5]
                               [--only NAME ...] [--cold/--no-cold] [--warmup 1]
                               [--out-md bench/RESULTS.md] [--out-csv bench/results.csv]

Per workload: optionally one aisim cold run (fresh empty numba and plan caches, as right after a
fresh install: the kernels come from the package's kernels/prebuilt.tar.gz when it matches the
kernel sources, and are compiled otherwise; aisim's later runs of that workload reuse the
caches) and the warm run right after it; one untimed warm-up of each tool;
then N rounds of whole-process runs,
alternating which tool goes first so that drift in machine load hits both alike. Records median
wall time, the per-round ratio's min-max, peak RSS and core time (GNU time), each tool's own
`wall_time_ms`, and whether the last round's two prediction.json files agree (shared parity.py).
Writes a CSV and a Markdown report that states the speed targets as met / not met.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

# One CSV row per workload, in this column order (the file's contract with whoever reads it)
COLUMNS = [
    "workload",
    "rounds",
    "aisim_s",  # median warm whole-process wall time
    "aisimulate_s",
    "speedup",  # aisimulate_s / aisim_s: how many times lower aisim's time is
    "speedup_min",  # min / max of the same ratio taken round by round
    "speedup_max",
    "aisim_peak_mb",  # max RSS over the warm rounds
    "aisimulate_peak_mb",
    "aisim_cold_s",  # first run with empty numba + plan caches (a fresh install's first run)
    "aisim_cold_peak_mb",
    "aisim_warm_s",  # the run right after the cold one, in the caches it just wrote
    "aisim_wall_time_ms",  # median of the simulation span each tool reports in prediction.json
    "aisimulate_wall_time_ms",
    "wall_time_ms_speedup",
    "output_tokens",  # total_output_tokens simulated per run
    "aisim_core_s",  # median user+sys CPU seconds of one warm aisim run
    "aisim_tokens_per_core_s",
    "parity",  # OK / MISMATCH / ERROR from parity.py on the last round's outputs
    "parity_summary",
]

# Speed targets: the bars every workload must clear
PROCESS_X = 5.0
PROCESS_X_BY_WORKLOAD = {"vllm-c256-fixed": 10.0}
WALL_TIME_MS_X = 20.0
COLD_LIMIT_S = 15.0


class BenchError(Exception):
    """A failure the user must fix (tool failed, missing file): reported as one line, exit 2."""


def timed_run(exe: str, config: Path, out_dir: Path, env: dict[str, str]) -> dict:
    """One whole `predict` process under GNU time, from the config's folder (AISimulate resolves
    relative trace paths against cwd). Returns wall/core seconds, peak RSS and the prediction."""
    time_file = out_dir.parent / f"{out_dir.name}.time"
    cmd = [
        "/usr/bin/time",
        "-v",
        "-o",
        str(time_file),
        exe,
        "predict",
        "-c",
        str(config),
        "--output-dir",
        str(out_dir),
        "--overwrite",
        "--format",
        "json",
    ]
    start = time.perf_counter()
    # stdout is the tools' human table: not needed, and a pipe left unread could block them
    proc = subprocess.run(
        cmd,
        cwd=config.parent,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    wall_s = time.perf_counter() - start  # perf_counter, since GNU time rounds to 10 ms
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        last = lines[-1] if lines else "(no stderr)"
        raise BenchError(f"{config.stem}: {Path(exe).name} exited {proc.returncode}: {last}")
    stats = {}
    for line in time_file.read_text().splitlines():
        key, _, value = line.strip().rpartition(": ")
        stats[key] = value
    pred_path = out_dir / "prediction.json"
    if not pred_path.is_file():
        raise BenchError(f"{config.stem}: {Path(exe).name} wrote no {pred_path}")
    pred = json.loads(pred_path.read_text())
    return {
        "wall_s": wall_s,
        "core_s": float(stats["User time (seconds)"]) + float(stats["System time (seconds)"]),
        "peak_mb": int(stats["Maximum resident set size (kbytes)"]) / 1024,
        "wall_time_ms": float(pred["wall_time_ms"]),
        "output_tokens": int(pred["total_output_tokens"]),
        "prediction": pred_path,
    }


def parity(parity_py: Path, got: Path, ref: Path) -> tuple[str, str]:
    """Run the shared parity checker; its one-line verdict starts with OK or MISMATCH."""
    if not parity_py.is_file():
        return "ERROR", f"no parity checker at {parity_py}"
    proc = subprocess.run(
        [sys.executable, str(parity_py), str(got), str(ref)], capture_output=True, text=True
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if not lines:  # the checker itself crashed: show its last stderr line instead
        lines = (proc.stderr.strip().splitlines() or ["no output"])[-1:]
    status = {0: "OK", 1: "MISMATCH"}.get(proc.returncode, "ERROR")
    return status, " / ".join(ln.strip() for ln in lines)


def cold_env(folder: str) -> dict[str, str]:
    """Environment whose aisim caches are empty folders, as right after a fresh install."""
    env = dict(os.environ)
    env.pop("NUMBA_CACHE_DIR", None)  # would override AISIM_CACHE_DIR in kernels/_jit.py
    env["AISIM_CACHE_DIR"] = folder  # kernels and op plans both live under it
    return env


def measure(config: Path, aisim: str, ref: str | None, args: argparse.Namespace) -> dict:
    row: dict = {"workload": config.stem, "rounds": args.rounds}
    env = {"aisim": dict(os.environ), "ref": dict(os.environ)}
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"compare-{config.stem}-"))
        out = {"aisim": Path(tmp, "aisim"), "ref": Path(tmp, "ref")}
        if args.cold:
            # The warm rounds then reuse the caches this cold run fills: they measure a fresh
            # install's warm runs, and the benchmark pays one compile per workload, not two
            env["aisim"] = cold_env(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="aisim-cold-"))
            )
            log(f"{config.stem}: aisim cold run (empty caches)")
            cold = timed_run(aisim, config, out["aisim"], env["aisim"])
            warm = timed_run(aisim, config, out["aisim"], env["aisim"])
            row["aisim_cold_s"] = cold["wall_s"]
            row["aisim_cold_peak_mb"] = cold["peak_mb"]
            row["aisim_warm_s"] = warm["wall_s"]
        tools = {"aisim": aisim} if ref is None else {"aisim": aisim, "ref": ref}
        # Untimed: a first run may still compile (aisim's cache) or page in libraries
        for _ in range(args.warmup):
            for name, exe in tools.items():
                log(f"{config.stem}: warm-up {name}")
                timed_run(exe, config, out[name], env[name])
        runs: dict[str, list[dict]] = {name: [] for name in tools}
        for r in range(args.rounds):
            order = list(tools) if r % 2 == 0 else list(reversed(tools))
            for name in order:
                log(f"{config.stem}: round {r + 1}/{args.rounds} {name}")
                runs[name].append(timed_run(tools[name], config, out[name], env[name]))
        summarize(row, "aisim", runs["aisim"])
        row["output_tokens"] = runs["aisim"][-1]["output_tokens"]
        row["aisim_core_s"] = statistics.median(x["core_s"] for x in runs["aisim"])
        row["aisim_tokens_per_core_s"] = row["output_tokens"] / max(row["aisim_core_s"], 1e-3)
        if ref is not None:
            summarize(row, "aisimulate", runs["ref"])
            row["speedup"] = row["aisimulate_s"] / row["aisim_s"]
            pairs = zip(runs["aisim"], runs["ref"], strict=True)
            per_round = [b["wall_s"] / a["wall_s"] for a, b in pairs]
            row["speedup_min"], row["speedup_max"] = min(per_round), max(per_round)
            row["wall_time_ms_speedup"] = row["aisimulate_wall_time_ms"] / max(
                row["aisim_wall_time_ms"], 1e-9
            )
            row["parity"], row["parity_summary"] = parity(
                args.parity, runs["aisim"][-1]["prediction"], runs["ref"][-1]["prediction"]
            )
    return row


def summarize(row: dict, tool: str, runs: list[dict]) -> None:
    row[f"{tool}_s"] = statistics.median(x["wall_s"] for x in runs)
    row[f"{tool}_peak_mb"] = max(x["peak_mb"] for x in runs)
    row[f"{tool}_wall_time_ms"] = statistics.median(x["wall_time_ms"] for x in runs)


def targets(row: dict) -> dict[str, str]:
    """Each speed-target bar for one workload: 'met (figure)', 'not met (figure)' or 'n/a'."""

    def verdict(ok: bool, figure: str) -> str:
        return f"{'met' if ok else 'NOT MET'} ({figure})"

    out = {}
    need = PROCESS_X_BY_WORKLOAD.get(row["workload"], PROCESS_X)
    if "speedup" in row:
        out[f"warm whole process >= {PROCESS_X:g}x lower (10x on vllm-c256-fixed)"] = verdict(
            row["speedup"] >= need, f"{row['speedup']:.1f}x, need {need:g}x"
        )
        out[f"wall_time_ms >= {WALL_TIME_MS_X:g}x lower"] = verdict(
            row["wall_time_ms_speedup"] >= WALL_TIME_MS_X, f"{row['wall_time_ms_speedup']:.1f}x"
        )
        out["peak RSS below AISimulate's"] = verdict(
            row["aisim_peak_mb"] < row["aisimulate_peak_mb"],
            f"{row['aisim_peak_mb']:.0f} vs {row['aisimulate_peak_mb']:.0f} MB",
        )
        out["outputs equal"] = verdict(row["parity"] == "OK", row["parity"])
    if "aisim_cold_s" in row:
        out[f"cold first run <= {COLD_LIMIT_S:g} s"] = verdict(
            row["aisim_cold_s"] <= COLD_LIMIT_S, f"{row['aisim_cold_s']:.1f} s"
        )
    return out


def fmt(value, digits: int = 2) -> str:
    if value is None or value == "":
        return "–"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def markdown(rows: list[dict], header: list[str]) -> str:
    table = [
        "| workload | aisim s | AISimulate s | x lower (min–max) | aisim RSS MB | AISimulate RSS MB"
        " | aisim cold s | aisim warm s | aisim wall_time_ms | AISimulate wall_time_ms"
        " | wall_time_ms x lower | aisim out tok / core s | outputs |",
        "|---" + "|---:" * 11 + "|---|",
    ]
    for r in rows:
        spread = (
            f"{fmt(r.get('speedup'), 1)} ({fmt(r['speedup_min'], 1)}–{fmt(r['speedup_max'], 1)})"
            if "speedup" in r
            else "–"
        )
        cells = [
            r["workload"],
            fmt(r["aisim_s"]),
            fmt(r.get("aisimulate_s")),
            spread,
            fmt(r["aisim_peak_mb"], 0),
            fmt(r.get("aisimulate_peak_mb"), 0),
            fmt(r.get("aisim_cold_s"), 1),
            fmt(r.get("aisim_warm_s")),
            fmt(r["aisim_wall_time_ms"], 1),
            fmt(r.get("aisimulate_wall_time_ms"), 1),
            fmt(r.get("wall_time_ms_speedup"), 1),
            fmt(r["aisim_tokens_per_core_s"], 0),
            fmt(r.get("parity")),
        ]
        table.append("| " + " | ".join(cells) + " |")
    lines = [*header, "", *table, ""]
    parity_lines = [f"- {r['workload']}: {r['parity_summary']}" for r in rows if "parity" in r]
    if parity_lines:
        lines += [
            "Output equality (`parity.py` on the last round's prediction.json files):",
            "",
            *parity_lines,
            "",
        ]
    lines += ["## Speed targets", ""]
    verdicts = {r["workload"]: targets(r) for r in rows}
    names = list(dict.fromkeys(k for v in verdicts.values() for k in v))
    if names:
        lines += ["| workload | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
        for w, v in verdicts.items():
            lines.append(f"| {w} | " + " | ".join(v.get(n, "n/a") for n in names) + " |")
    else:
        lines.append("Nothing to judge: run with --aisimulate (and --cold) to check the targets.")
    lines += ["", "Scale runs (10 M and 1 M requests): bench/SCALE.md (bench/scale.py).", ""]
    return "\n".join(lines)


def machine_header(args: argparse.Namespace, load_start: tuple, ref: str | None) -> list[str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    git = (
        subprocess.run(
            ["git", "-C", str(REPO), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        or "unknown"
    )
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return [
        "# aisim vs AISimulate: whole-process benchmark",
        "",
        f"Measured {now} on {platform.node()}: nproc {len(os.sched_getaffinity(0))}, CPU {cpu}, "
        f"load average at start {' '.join(f'{x:.2f}' for x in load_start)}, at end "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}.",
        f"aisim {git} (Python {platform.python_version()}); "
        f"AISimulate {ref_version(ref) if ref else 'not run'}.",
        f"{args.rounds} alternating rounds per workload after {args.warmup} untimed warm-up run(s);"
        " times are medians, peak RSS the max over rounds, 'x lower' = AISimulate / aisim.",
        "",
        "Command:",
        "",
        "    " + shlex.join(["python", *sys.argv]),
    ]


def ref_version(exe: str) -> str:
    """AISimulate's version from its venv's dist-info folder (never by importing it)."""
    venv = Path(exe).parent.parent
    found = sorted(venv.glob("lib/python*/site-packages/aisimulate-*.dist-info"))
    return found[-1].name.removesuffix(".dist-info").split("-", 1)[1] if found else exe


def resolve_tools(args: argparse.Namespace) -> tuple[str, str | None]:
    # The aisim of the venv running this script, not whichever one PATH finds first
    aisim = Path(sys.executable).parent / "aisim"
    if not aisim.is_file():
        found = shutil.which("aisim")
        if found is None:
            raise BenchError(f"no aisim console script next to {sys.executable}: pip install -e .")
        aisim = Path(found)
    ref = None
    if args.aisimulate:
        ref = Path(args.aisimulate).expanduser()
        if ref.is_dir():  # a venv was given
            ref = ref / "bin" / "aisimulate"
        if not ref.is_file():
            raise BenchError(f"--aisimulate: no aisimulate executable at {ref}")
    if not Path("/usr/bin/time").is_file():
        raise BenchError("/usr/bin/time (GNU time) is needed for peak RSS: apt-get install time")
    return str(aisim), None if ref is None else str(ref)


def workloads(args: argparse.Namespace) -> list[Path]:
    folder = Path(args.workloads).expanduser().resolve()
    configs = sorted(folder.glob("*.yaml"))
    if not configs:
        raise BenchError(f"--workloads: no *.yaml in {folder}")
    if args.only:
        known = {c.stem for c in configs}
        unknown = [n for n in args.only if n not in known]
        if unknown:
            raise BenchError(
                f"--only: no workload {', '.join(unknown)} in {folder} "
                f"(have {', '.join(sorted(known))})"
            )
        configs = [c for c in configs if c.stem in args.only]
    return configs


def write_csv(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        for r in rows:
            writer.writerow({k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()})


def log(message: str) -> None:
    print(f"[{datetime.datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--workloads",
        default=str(REPO.parent / "shared" / "workloads"),
        help="folder of workload YAMLs (default: ../shared/workloads)",
    )
    ap.add_argument("--aisimulate", help="AISimulate executable or its venv; omit for aisim only")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs of each tool first")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="workload names (file stems)")
    ap.add_argument(
        "--cold",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time one aisim run with empty caches first (compiles every kernel)",
    )
    ap.add_argument("--parity", type=Path, default=REPO.parent / "shared/tools/parity.py")
    ap.add_argument("--out-md", type=Path, default=HERE / "RESULTS.md")
    ap.add_argument("--out-csv", type=Path, default=HERE / "results.csv")
    args = ap.parse_args()
    if args.rounds < 1 or args.warmup < 0:
        ap.error("--rounds must be >= 1 and --warmup >= 0")
    return args


def hand_written_sections(path: Path, report: str) -> str:
    """The `## ` sections of the previous report that the new one does not write itself (notes
    measured by hand), kept in their order."""
    if not path.exists():
        return ""
    sections = path.read_text().split("\n## ")[1:]
    kept = [sec for sec in sections if f"\n## {sec.splitlines()[0]}\n" not in report]
    return "".join("\n## " + sec for sec in kept)


def main() -> int:
    args = parse_args()
    load_start = os.getloadavg()
    try:
        aisim, ref = resolve_tools(args)
        rows = [measure(config, aisim, ref, args) for config in workloads(args)]
    except BenchError as err:
        print(f"compare: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("compare: interrupted, nothing written", file=sys.stderr)
        return 130
    # Written only once every workload ran: a failed benchmark leaves no partial report
    report = markdown(rows, machine_header(args, load_start, ref))
    args.out_md.parent.mkdir(parents=True, exist_ok=True)
    args.out_md.write_text(report + hand_written_sections(args.out_md, report))
    write_csv(args.out_csv, rows)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
