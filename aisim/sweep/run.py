"""Run a sweep: points -> executor (in-process, local processes or Ray) -> sweep.parquet.

Output folder:
    sweep.parquet                       one row per point (aisim.sweep.table)
    points/<point_id>.json              each finished point (status, prediction); the resume
                                        marker: a rerun into the folder skips these points
    requests/point_id=<id>/part-0.parquet   --capture-per-request: hive-partitioned dataset
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from aisim.errors import AisimError
from aisim.sweep.grid import Point
from aisim.sweep.point import point_file, run_point, save_point


def _cost_hints(base: str, tasks: list[dict]) -> list[float]:
    """Rough relative run times, to start the long points first (results do not depend on
    it): passes grow with requests / the concurrency. Read from the raw YAML with the overrides
    applied (no validation: a bad point reports itself when it runs)."""
    from aisim.config import apply_overrides
    from aisim.config.load import parse_yaml

    try:
        raw = parse_yaml(Path(base).read_text(encoding="utf-8"), base)
    except Exception:
        return [0.0] * len(tasks)
    hints = []
    for t in tasks:
        try:
            cfg = apply_overrides(raw, tuple(t["base_overrides"]) + tuple(t["overrides"]))
            traffic = cfg.get("traffic", {})
            n = float((traffic.get("stop") or {}).get("requests") or 1)
            conc = (traffic.get("load") or {}).get("concurrency")
            hints.append(n / max(1.0, float(conc)) if conc else n / 64.0)
        except Exception:
            hints.append(0.0)
    return hints


def run_sweep(base: str, points: list[Point], out_dir: Path | None = None, *,
              base_overrides: tuple[str, ...] = (), jobs: int = 1, executor: str = "local",
              ray_address: str | None = None, capture_requests: bool = False,
              progress=None):
    """Run every point not already finished in out_dir; returns the sweep table (pyarrow)."""
    from aisim.predict import config_sha256
    from aisim.sweep.table import sweep_table

    if not Path(base).is_file():
        raise AisimError(f"{base}: config file not found")
    base_sha = config_sha256(base, base_overrides)
    records: dict[str, dict] = {}
    tasks = []
    for p in points:
        pid = p.point_id(base_sha)
        done = _finished(out_dir, pid) if out_dir is not None else None
        if done is not None:
            records[pid] = done
            continue
        tasks.append({"base": str(base), "base_overrides": list(base_overrides),
                      "overrides": list(p.overrides), "point_id": pid, "index": p.index,
                      "capture_requests": capture_requests})
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    if progress is not None:
        progress.total = len(tasks)
    hints = _cost_hints(str(base), tasks)
    tasks = [t for _, t in sorted(zip(hints, tasks, strict=True), key=lambda ht: -ht[0])]

    def collect(record: dict, requests: bytes | None) -> None:
        records[record["point_id"]] = record
        if out_dir is not None:
            save_point(out_dir, record, requests)
        if progress is not None:
            progress.advance(record["status"] == "ok")

    if executor == "ray":
        from aisim.sweep.ray_exec import run_on_ray

        run_on_ray(tasks, ray_address, collect)
    elif executor == "local":
        _run_local(tasks, jobs, collect)
    else:
        raise AisimError(f"--executor {executor!r}: expected local or ray")
    if progress is not None:
        progress.close()
    ordered = [records[p.point_id(base_sha)] for p in points]
    meta = {"base_config": str(base), "base_overrides": list(base_overrides),
            "optable_sha256": next((r["provenance"]["optable_sha256"] for r in ordered
                                    if r["provenance"]), ""),
            "aisim_version": _version()}
    table = sweep_table(points, ordered, base_sha, meta)
    if out_dir is not None:
        from aisim.output.write import _atomic_write, table_bytes

        _atomic_write(out_dir / "sweep.parquet", table_bytes(table))
    return table


def _version() -> str:
    from aisim import __version__

    return __version__


def _finished(out_dir: Path, pid: str) -> dict | None:
    path = point_file(out_dir, pid)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _run_local(tasks: list[dict], jobs: int, collect: Callable) -> None:
    """In this process (jobs 1) or in `jobs` forked worker processes; each process keeps its
    own pass-time memos, shared by the points it runs."""
    if not tasks:
        return
    jobs = max(1, min(jobs, len(tasks)))
    if jobs == 1:
        for t in tasks:
            collect(*run_point(t))
        return
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    _warm_engine(tasks[0])  # load the compiled kernels once; forked workers inherit them
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        futures = [pool.submit(run_point, t) for t in tasks]
        # this process only waits now: load pyarrow (sweep.parquet) meanwhile, not after
        import threading

        threading.Thread(target=_import_parquet, daemon=True).start()
        for fut in as_completed(futures):
            collect(*fut.result())


def _import_parquet() -> None:
    import pyarrow.parquet  # noqa: F401


def _warm_engine(task: dict) -> None:
    try:
        from aisim.config import load_config
        from aisim.engine.run import load_engine
        from aisim.engine.spec import resolve

        load_engine(resolve(load_config(task["base"], tuple(task["base_overrides"]) +
                                        tuple(task["overrides"]))))
    except Exception:
        return  # the point itself will report what is wrong


def default_jobs() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
               else (os.cpu_count() or 1))

