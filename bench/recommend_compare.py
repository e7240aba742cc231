"""aisim recommend vs AISimulate's recommend on the same YAMLs (bench/recommend/*.yaml).

usage: python bench/recommend_compare.py --aisimulate PATH/TO/aisimulate [--out-md F]
       [--only NAME ...] [--aisim-only NAME ...]

For each YAML: both tools' whole-process wall time and candidates evaluated, then the best
candidate of each scored the same way: `aisimulate predict` on its recommended YAML
(recommendations/0001.yaml), the target computed from that prediction.json. A pareto YAML
compares the best per-GPU throughput on each tool's front. `--aisim-only` runs aisim alone
(a space too large for AISimulate to search in full) and records its time and counts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from aisim.recommend import score as sc  # noqa: E402
from aisim.recommend.spec import load_recommend  # noqa: E402


def _run(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    return time.perf_counter() - t0, r


def _evaluated(out: Path) -> int:
    doc = json.loads((out / "recommendation.json").read_text())
    return int(doc["counts"]["evaluated"])


def _score_with_aisimulate(aisimulate: str, yaml_path: Path, target: str, work: Path) -> float:
    out = work / ("pred-" + yaml_path.parent.parent.name)
    _, r = _run(
        [
            aisimulate,
            "predict",
            "-c",
            str(yaml_path),
            "--output-dir",
            str(out),
            "--overwrite",
            "--format",
            "json",
        ]
    )
    if r.returncode != 0:
        raise RuntimeError(f"aisimulate predict {yaml_path}: {r.stderr.strip()[-300:]}")
    pred = json.loads((out / "prediction.json").read_text())
    cfg = __import__("yaml").safe_load(yaml_path.read_text())
    used = sum(
        w["parallelism"]["tensor"]
        * w["parallelism"]["pipeline"]
        * w["parallelism"]["attention_data"]
        * w["parallelism"]["replicas"]
        for w in cfg["engine"]["workers"].values()
    )
    return sc.score(target, pred, used)


def _best_front_score(aisimulate: str, out: Path, target: str, work: Path) -> float:
    """pareto: the best per-GPU throughput on the front, each front YAML scored by AISimulate."""
    files = sorted((out / "recommendations").glob("*.yaml"))
    return max(_score_with_aisimulate(aisimulate, f, "throughput_per_gpu", work) for f in files)


def compare(name: str, path: Path, aisimulate: str, work: Path, aisim_only: bool) -> dict:
    spec = load_recommend(path)
    row = {"name": name, "target": spec.target}
    a_out = work / f"{name}-aisim"
    t, r = _run(
        [
            sys.executable,
            "-m",
            "aisim",
            "recommend",
            "-c",
            str(path),
            "-o",
            str(a_out),
            "--overwrite",
        ]
    )
    if r.returncode not in (0, 1):
        raise RuntimeError(f"aisim recommend {name}: {r.stderr.strip()[-300:]}")
    row.update(aisim_s=t, aisim_evaluated=_evaluated(a_out))
    if aisim_only:
        doc = json.loads((a_out / "recommendation.json").read_text())
        row["aisim_in_space"] = doc["provenance"]["candidates_in_space"]
        best = doc["views"]["top_n"][:1]
        by_id = {c["candidate_id"]: c for c in doc["candidates"]}
        row["aisim_best"] = by_id[best[0]]["score"] if best else None
        return row
    s_out = work / f"{name}-aisimulate"
    t, r = _run(
        [aisimulate, "recommend", "-c", str(path), "--output-dir", str(s_out), "--overwrite"]
    )
    if r.returncode not in (0, 1):
        raise RuntimeError(f"aisimulate recommend {name}: {r.stderr.strip()[-300:]}")
    row.update(aisimulate_s=t, aisimulate_evaluated=_evaluated(s_out))
    for tool, out in (("aisim", a_out), ("aisimulate", s_out)):
        first = out / "recommendations" / "0001.yaml"
        if not first.exists():
            row[f"{tool}_best"] = None
        elif spec.target == "pareto":
            row[f"{tool}_best"] = _best_front_score(aisimulate, out, spec.target, work)
        else:
            row[f"{tool}_best"] = _score_with_aisimulate(aisimulate, first, spec.target, work)
    return row


def _fmt(v, f=",.1f") -> str:
    return "-" if v is None else format(v, f)


def report(rows: list[dict], cmd: str) -> str:
    lines = [
        "# aisim recommend vs AISimulate recommend",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {platform.node()}: "
        f"nproc {os.cpu_count()}, Python {platform.python_version()}.",
        "aisim searches every candidate (its default); AISimulate runs the YAML's optimizer "
        "block (random, max_trials). Each tool's best candidate is scored by `aisimulate predict` "
        "on its recommendations/0001.yaml (pareto: the best per-GPU throughput on its front).",
        "",
        "Command:",
        "",
        f"    {cmd}",
        "",
        "| YAML | target | aisim s | AISimulate s | time ratio | aisim evaluated | "
        "AISimulate evaluated | aisim best | AISimulate best |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "aisimulate_s" not in r:
            continue
        lines.append(
            f"| {r['name']} | {r['target']} | {r['aisim_s']:.1f} | {r['aisimulate_s']:.1f} | "
            f"{r['aisimulate_s'] / r['aisim_s']:.1f}x | {r['aisim_evaluated']} | "
            f"{r['aisimulate_evaluated']} | {_fmt(r['aisim_best'])} | "
            f"{_fmt(r['aisimulate_best'])} |"
        )
    large = [r for r in rows if "aisimulate_s" not in r]
    if large:
        lines += [
            "",
            "Large spaces (aisim alone):",
            "",
            "| YAML | target | candidates in space | simulated | wall s | best |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for r in large:
            lines.append(
                f"| {r['name']} | {r['target']} | {r['aisim_in_space']} | "
                f"{r['aisim_evaluated']} | {r['aisim_s']:.1f} | {_fmt(r['aisim_best'])} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--aisimulate", required=True)
    ap.add_argument("--out-md", default=None)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--aisim-only", nargs="*", default=["large-agg"])
    args = ap.parse_args()
    folder = REPO / "bench" / "recommend"
    work = Path(tempfile.mkdtemp(prefix="aisim-recommend-bench-"))
    rows = []
    for path in sorted(folder.glob("*.yaml")):
        name = path.stem
        if args.only is not None and name not in args.only:
            continue
        rows.append(compare(name, path, args.aisimulate, work, name in args.aisim_only))
        print(json.dumps(rows[-1]), flush=True)
    text = report(rows, "python " + " ".join(sys.argv))
    if args.out_md:
        Path(args.out_md).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
