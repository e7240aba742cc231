"""Run a sweep: points -> executor (in-process, local processes or Ray) -> sweep.parquet.

Output folder:
    sweep.parquet                       one row per point (aisim.sweeps.table)
    points/<point_id>.json              each finished point (status, prediction); the resume
                                        marker: a rerun into the folder skips these points
    requests/point_id=<id>/part-0.parquet   --capture-per-request: hive-partitioned dataset

Ctrl-C or SIGTERM stops a sweep at once: the worker processes are terminated and reaped, every
point finished so far stays in points/, the points that were running leave no record (they are
not failures), no sweep.parquet is written, and rerunning the same command resumes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aisim.errors import AisimError, Interrupted, RunFailed, interrupt_signal, note
from aisim.sweeps.grid import Point
from aisim.sweeps.point import point_file, run_point, save_point


def _cost_hints(tasks: list[dict]) -> list[float]:
    """Rough relative run times, to start the long points first (results do not depend on
    it): passes grow with requests / the concurrency. Read from the raw YAML with the overrides
    applied (no validation: a bad point reports itself when it runs)."""
    from aisim.config import apply_overrides
    from aisim.config.load import parse_yaml

    raws: dict[str, object] = {}
    hints = []
    for t in tasks:
        try:
            if t["base"] not in raws:
                raws[t["base"]] = parse_yaml(Path(t["base"]).read_text(encoding="utf-8"), t["base"])
            cfg = apply_overrides(
                raws[t["base"]], tuple(t["base_overrides"]) + tuple(t["overrides"])
            )
            hints.append(run_cost(cfg))
        except Exception:
            hints.append(0.0)
    return hints


def run_cost(raw: dict) -> float:
    """A raw config's rough relative run time: passes grow with requests / the concurrency."""
    traffic = raw.get("traffic") or {}
    n = float((traffic.get("stop") or {}).get("requests") or 1)
    conc = (traffic.get("load") or {}).get("concurrency")
    return n / max(1.0, float(conc)) if conc else n / 64.0


def split_finished(out_dir: Path | None, tasks: list[dict]) -> tuple[dict[str, dict], list[dict]]:
    """The records of the tasks an earlier run finished in out_dir (its points/ resume
    markers), and the tasks still to run."""
    records: dict[str, dict] = {}
    pending = []
    for task in tasks:
        done = _finished(out_dir, task["point_id"]) if out_dir is not None else None
        if done is not None:
            records[task["point_id"]] = done
        else:
            pending.append(task)
    return records, pending


def run_sweep(
    base: str,
    points: list[Point],
    out_dir: Path | None = None,
    *,
    base_overrides: tuple[str, ...] = (),
    jobs: int = 1,
    executor: str = "local",
    ray_address: str | None = None,
    capture_requests: bool = False,
    progress=None,
):
    """Run every point not already finished in out_dir; returns the sweep table (pyarrow)."""
    from aisim.prediction import config_sha256
    from aisim.sweeps.table import sweep_table

    if not Path(base).is_file():
        raise AisimError(f"{base}: config file not found")
    base_sha = config_sha256(base, base_overrides)
    records, tasks = split_finished(
        out_dir,
        [
            {
                "base": str(base),
                "base_overrides": list(base_overrides),
                "overrides": list(p.overrides),
                "point_id": p.point_id(base_sha),
                "index": p.index,
                "capture_requests": capture_requests,
            }
            for p in points
        ],
    )
    skipped = len(records)
    execute(tasks, out_dir, records, skipped, len(points), jobs, executor, ray_address, progress)
    ordered = [records[p.point_id(base_sha)] for p in points]
    meta = {
        "base_config": str(base),
        "base_overrides": list(base_overrides),
        "optable_sha256": next(
            (r["provenance"]["optable_sha256"] for r in ordered if r["provenance"]), ""
        ),
        "aisim_version": _version(),
        "deployment": _deployment(base, base_overrides),
    }
    table = sweep_table(points, ordered, base_sha, meta)
    if out_dir is not None:
        from aisim.output.write import table_bytes, write_file_atomically

        write_file_atomically(out_dir / "sweep.parquet", table_bytes(table), "--output-dir")
    return table


def execute(
    tasks: list[dict],
    out_dir: Path | None,
    records: dict[str, dict],
    skipped: int,
    total: int,
    jobs: int = 1,
    executor: str = "local",
    ray_address: str | None = None,
    progress=None,
    limits: RunLimits | None = None,
    longest_first: bool = True,
    on_record: Callable[[dict], None] | None = None,
) -> None:
    """Run the tasks (run_point's input) on the executor; each finished record lands in
    `records` and, with out_dir, in out_dir/points/ (the resume marker). `skipped` of `total`
    points had finished before."""
    if out_dir is not None:
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            from aisim.output.write import os_error_text

            raise AisimError(
                f"--output-dir: cannot create {out_dir}: {os_error_text(exc)}"
            ) from None
    if skipped:
        note(
            f"resuming the sweep in {out_dir}: {skipped} of {total} points finished "
            f"there before are skipped, {len(tasks)} to run"
        )
    if progress is not None:
        progress.total = len(tasks)
    if longest_first:
        hints = _cost_hints(tasks)
        tasks = [t for _, t in sorted(zip(hints, tasks, strict=True), key=lambda ht: -ht[0])]

    def collect(record: dict, requests: bytes | None) -> None:
        records[record["point_id"]] = record
        if out_dir is not None:
            save_point(out_dir, record, requests)
        if on_record is not None:
            on_record(record)
        if progress is not None:
            progress.advance(record["status"] == "ok")

    if executor not in ("local", "ray"):
        raise AisimError(f"--executor {executor!r}: expected local or ray")
    try:
        if executor == "ray":
            from aisim.sweeps.ray_exec import run_on_ray

            if limits is not None:
                raise AisimError(
                    "--executor ray: a time budget or candidate timeout needs --executor local"
                )
            run_on_ray(tasks, ray_address, collect)
        else:
            _run_local(tasks, jobs, collect, limits)
    except KeyboardInterrupt as exc:
        finished = len(records) - skipped
        kept = (
            (
                f"; finished points are kept in {out_dir / 'points'}, rerun the same command "
                "to resume"
            )
            if out_dir is not None
            else ""
        )
        raise Interrupted(
            interrupt_signal(exc), f"{finished} of {len(tasks)} points to run had finished{kept}"
        ) from None
    finally:
        if progress is not None:
            progress.close()


def _deployment(base: str, overrides: tuple[str, ...]) -> str:
    """The base config's model | GPU | backend | shape, for figure titles ("" when the base
    alone does not validate: its points' overrides may be what makes it valid)."""
    from aisim.config import load_config
    from aisim.output.table import deployment_title

    try:
        return deployment_title(load_config(base, overrides))
    except AisimError:
        return ""


def _version() -> str:
    from aisim import __version__

    return __version__


def _finished(out_dir: Path, pid: str) -> dict | None:
    path = point_file(out_dir, pid)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _run_local(
    tasks: list[dict], jobs: int, collect: Callable, limits: RunLimits | None = None
) -> None:
    """In this process (jobs 1) or in `jobs` forked worker processes; each process keeps its
    own pass-time memos, shared by the points it runs. With limits, points always run in
    worker processes: one over its timeout is stopped and recorded as timed out, and no point
    starts after the deadline."""
    if not tasks:
        return
    jobs = max(1, min(jobs, len(tasks)))
    if jobs == 1 and limits is None:
        for t in tasks:
            collect(*run_point(t))
        return
    import multiprocessing as mp
    import threading
    import time
    from multiprocessing.connection import wait

    _warm_engine(tasks[0])  # load the compiled kernels once; forked workers inherit them
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    workers = [_Worker(ctx) for _ in range(jobs)]
    try:
        # this process only waits now: load pyarrow (sweep.parquet) meanwhile, not after
        threading.Thread(target=_import_parquet, daemon=True).start()
        queue = list(tasks)
        idle = list(workers)
        busy: dict = {}  # connection or sentinel -> (worker, task, start time)
        while queue or busy:
            if limits is not None and limits.deadline is not None:
                if time.monotonic() >= limits.deadline:
                    queue.clear()  # the budget is spent: the points not started stay unrun
            while idle and queue:
                w, t = idle.pop(), queue.pop(0)
                w.conn.send(t)
                busy[w.conn] = busy[w.process.sentinel] = (w, t, time.monotonic())
            for ready in wait(list(busy), timeout=0.5):
                if ready not in busy:
                    continue  # its worker was handled through its other handle
                w, t, _ = busy[ready]
                if w.conn.poll():
                    try:
                        result = w.conn.recv()
                    except (EOFError, OSError):
                        result = None
                else:
                    result = None
                if result is None:
                    raise RunFailed(
                        f"a sweep worker process ended (exit code {w.process.exitcode}) while "
                        f"running point {t['point_id']}; finished points are kept, rerun the "
                        "same command to resume"
                    )
                del busy[w.conn], busy[w.process.sentinel]
                idle.append(w)
                collect(*result)
            if limits is not None and limits.timeout_s is not None:
                now = time.monotonic()
                for w, t, start in {id(v[0]): v for v in busy.values()}.values():
                    if now - start > limits.timeout_s:
                        del busy[w.conn], busy[w.process.sentinel]
                        w.stop()
                        workers.remove(w)
                        fresh = _Worker(ctx)
                        workers.append(fresh)
                        idle.append(fresh)
                        collect(timed_out_record(t, limits.timeout_s), None)
    finally:
        for w in workers:
            w.stop()


@dataclass(frozen=True)
class RunLimits:
    """Local executor limits: no point starts after `deadline` (time.monotonic()), and a
    point running longer than `timeout_s` is stopped."""

    deadline: float | None = None
    timeout_s: float | None = None


def timed_out_record(task: dict, timeout_s: float) -> dict:
    return {
        "point_id": task["point_id"],
        "index": task["index"],
        "overrides": list(task["overrides"]),
        "status": "timed_out",
        "error": f"exceeded the {timeout_s:g} s candidate timeout",
        "prediction": None,
        "prediction_sha256": None,
        "provenance": None,
    }


class _Worker:
    """One forked worker process: takes tasks over a pipe, sends back run_point's result.

    It ignores Ctrl-C (the leader decides what an interrupt stops), dies on SIGTERM, and dies
    with the leader (PR_SET_PDEATHSIG), so no worker outlives the sweep however it ends."""

    def __init__(self, ctx) -> None:
        self.conn, child = ctx.Pipe()
        self.leader = os.getpid()
        self.process = ctx.Process(target=self._main, args=(child,), daemon=True)
        self.process.start()
        child.close()

    def _main(self, conn) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _die_with_parent()
        if os.getppid() != self.leader:
            os._exit(0)  # the leader is gone already
        while True:
            try:
                task = conn.recv()
            except (EOFError, OSError):
                os._exit(0)
            conn.send(run_point(task))

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.close()
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(2.0)
        if self.process.is_alive():
            self.process.kill()
        self.process.join()


def _die_with_parent() -> None:
    """Linux: the kernel sends this process SIGKILL when its parent dies (even by SIGKILL)."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # elsewhere the leader's own stop() is the only guard


def _import_parquet() -> None:
    import pyarrow.parquet  # noqa: F401


def _warm_engine(task: dict) -> None:
    try:
        from aisim.config import load_config
        from aisim.engine.deployment import resolve_run
        from aisim.engine.driver import load_engine

        load_engine(
            resolve_run(
                load_config(task["base"], tuple(task["base_overrides"]) + tuple(task["overrides"]))
            )
        )
    except Exception:
        return  # the point itself will report what is wrong


def default_jobs() -> int:
    return max(
        1,
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1),
    )
