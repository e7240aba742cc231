"""Ctrl-C and SIGTERM, delivered to real `aisim` processes: a prediction stops while its compiled
kernel runs, a sweep stops with its worker processes reaped and its finished points kept, and
a rerun resumes to the table an uninterrupted sweep gives."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from aisim.cli import main
from tests.test_reliability import _cfg, _child, _wait_for

W = "engine.workers.aggregated"
# Requests arriving faster than passes finish: every pass differs, so the kernel cannot leap,
# and 800,000 of them keep it busy ~5 s on this project's 2-core machines (~0.3 GB).
BUSY = [
    "--set",
    "traffic.stop.requests=800000",
    "--set",
    "traffic.load={type: poisson, requests_per_second: 2000, seed: 1}",
    "--set",
    "traffic.source.output_tokens=256",
    "--set",
    f"{W}.kv_cache.capacity.blocks=1000000",
    "--set",
    f"{W}.scheduler.max_sequences=1024",
    "--set",
    f"{W}.scheduler.max_batched_tokens=8192",
]

# the child's simulation kernel touches `marker` once it runs (the warm-up call has no requests)
MARK_KERNEL = """
    import sys
    import aisim.engine.one_pool as one_pool
    real = one_pool.run_kernel
    def marked(fn, *args):
        def kernel(*a):
            if len(a[1].prompt_len):
                open({marker!r}, "w").close()
            return fn(*a)
        return real(kernel, *args)
    one_pool.run_kernel = marked
    from aisim.cli import main
    main(sys.argv[1:])
    """


def _session_processes(sid: int) -> list[int]:
    """Live processes of session `sid` (each child starts its own session)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append(int(entry))
    return found


@pytest.fixture
def spawn():
    """_child, and whatever a failing test leaves of the child's session is killed after it
    (an orphaned worker holding the child's stdout would also hang communicate())."""
    started = []

    def start(code: str, *args: str):
        started.append(_child(code, *args))
        return started[-1]

    yield start
    for p in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=10)


def _stopped_at_once(p, sig: int, how=None) -> tuple[str, str, float]:
    t0 = time.monotonic()
    (how or p.send_signal)(sig)
    out, err = p.communicate(timeout=15)
    return out, err, time.monotonic() - t0


def test_interrupt_stops_the_running_kernel_at_once(tmp_path: Path, spawn) -> None:
    """SIGINT and SIGTERM a second into a ~5 s kernel: one line, 130 / 143, no result folder."""
    cfg = _cfg(tmp_path)
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        marker, out = tmp_path / f"kernel-{code}", tmp_path / f"out-{code}"
        p = spawn(
            MARK_KERNEL.format(marker=str(marker)), "predict", "-c", str(cfg), "-o", str(out), *BUSY
        )
        _wait_for(marker, p)
        time.sleep(1.0)
        assert p.poll() is None, "the kernel finished before the signal: make BUSY bigger"
        stdout, err, took = _stopped_at_once(p, sig)
        assert p.returncode == code, err
        name = signal.Signals(sig).name
        assert err.strip().splitlines() == [f"aisim: interrupted ({name}); nothing was written"]
        assert stdout == "" and not out.exists()
        assert took < 2.0, f"{took:.1f} s from {name} to exit"


SWEEP_POINTS = "traffic.load.seed=1,2,3,4"
# ~0.3 s of kernel a point: two rounds of two workers
SWEEP_WORK = [
    "--set",
    "traffic.stop.requests=50000",
    "--set",
    "traffic.load={type: poisson, requests_per_second: 2000, seed: 1}",
    "--set",
    "traffic.source.output_tokens=128",
    "--set",
    f"{W}.kv_cache.capacity.blocks=100000",
    "--set",
    f"{W}.scheduler.max_sequences=512",
    "--set",
    f"{W}.scheduler.max_batched_tokens=8192",
]


def _sweep_args(cfg: Path, out: Path) -> list[str]:
    return ["sweep", "-c", str(cfg), "--grid", SWEEP_POINTS, "-o", str(out), "-j", "2", *SWEEP_WORK]


def _point_statuses(out: Path) -> dict[str, str]:
    import json

    return {f.stem: json.loads(f.read_text())["status"] for f in (out / "points").glob("*.json")}


def test_interrupted_sweep_keeps_its_points_and_resumes_to_the_same_table(
    tmp_path: Path, spawn
) -> None:
    """Ctrl-C (to the whole process group, as a terminal sends it) once a point is done: the
    leader exits 130 at once, no worker is left, only finished points are recorded; the same
    command then runs the rest and writes the table an uninterrupted sweep writes."""
    cfg = _cfg(tmp_path)
    out = tmp_path / "sw"
    p = spawn("import sys; from aisim.cli import main; main(sys.argv[1:])", *_sweep_args(cfg, out))
    _wait_for(out / "points", p)
    while not _point_statuses(out):
        assert p.poll() is None, p.communicate()
        time.sleep(0.02)
    workers = [pid for pid in _session_processes(p.pid) if pid != p.pid]
    assert len(workers) == 2
    _, err, took = _stopped_at_once(p, signal.SIGINT, lambda s: os.killpg(p.pid, s))
    assert p.returncode == 130, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aisim: interrupted (SIGINT); "), err
    assert "finished points are kept" in lines[0]
    assert took < 2.0, f"{took:.1f} s from SIGINT to exit"
    assert _session_processes(p.pid) == [] and not any(Path(f"/proc/{w}").exists() for w in workers)
    kept = _point_statuses(out)
    assert 1 <= len(kept) < 4 and set(kept.values()) == {"ok"}
    assert not (out / "sweep.parquet").exists()

    resumed = CliRunner().invoke(main, _sweep_args(cfg, out))
    assert resumed.exit_code == 0, resumed.output
    assert (
        f"{len(kept)} of 4 points finished there before are skipped, {4 - len(kept)} to "
        "run" in resumed.stderr
    )
    whole = CliRunner().invoke(main, _sweep_args(cfg, tmp_path / "whole"))
    assert whole.exit_code == 0, whole.output
    table = (out / "sweep.parquet").read_bytes()
    assert table == (tmp_path / "whole" / "sweep.parquet").read_bytes()
    assert pq.read_table(out / "sweep.parquet").column("status").to_pylist() == ["ok"] * 4


def test_ctrl_c_in_a_one_job_sweep_records_no_point(tmp_path: Path, spawn) -> None:
    """-j 1 runs points in the leader: Ctrl-C inside a point's kernel is no failure of it."""
    cfg, marker, out = _cfg(tmp_path), tmp_path / "kernel", tmp_path / "sw"
    p = spawn(
        MARK_KERNEL.format(marker=str(marker)),
        "sweep",
        "-c",
        str(cfg),
        "--grid",
        "traffic.load.seed=1,2",
        "-o",
        str(out),
        "-j",
        "1",
        *BUSY,
    )
    _wait_for(marker, p)
    time.sleep(0.5)
    _, err, took = _stopped_at_once(p, signal.SIGINT)
    assert p.returncode == 130 and took < 2.0, err
    assert err.strip().splitlines()[0].startswith("aisim: interrupted (SIGINT); 0 of 2 points")
    assert not list((out / "points").glob("*.json"))


# the child's sweep workers touch <folder>/point-<pid> as each starts a point
MARK_POINTS = """
    import os, sys
    import aisim.sweeps.run as run
    real = run.run_point
    def marked(task):
        open(os.path.join({folder!r}, f"point-{{os.getpid()}}"), "w").close()
        return real(task)
    run.run_point = marked
    from aisim.cli import main
    main(sys.argv[1:])
    """


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_killed_sweep_leader_leaves_no_worker(tmp_path: Path, spawn, sig: int) -> None:
    """`kill PID` of the leader alone while both workers are in the middle of a point (they
    get no signal): SIGTERM exits 143 with both reaped; even after SIGKILL, which the leader
    cannot handle, the workers die with it."""
    cfg = _cfg(tmp_path)
    out = tmp_path / "sw"
    p = spawn(
        MARK_POINTS.format(folder=str(tmp_path)),
        "sweep",
        "-c",
        str(cfg),
        "--grid",
        "traffic.load.seed=1,2,3",
        "-o",
        str(out),
        "-j",
        "2",
        *BUSY,
    )
    t0 = time.monotonic()
    while len(list(tmp_path.glob("point-*"))) < 2:
        assert p.poll() is None, p.communicate()
        assert time.monotonic() - t0 < 60, "the sweep's workers never started a point"
        time.sleep(0.02)
    workers = [int(m.name.split("-")[1]) for m in tmp_path.glob("point-*")]
    assert p.pid not in workers and all(w in _session_processes(p.pid) for w in workers)
    time.sleep(0.5)
    _, err, took = _stopped_at_once(p, sig)
    assert took < 2.0
    if sig == signal.SIGTERM:
        assert p.returncode == 143, err
        assert err.strip().splitlines() == [
            "aisim: interrupted (SIGTERM); 0 of 3 points to run had finished; finished points "
            f"are kept in {out / 'points'}, rerun the same command to resume"
        ], err
    t0 = time.monotonic()  # after SIGKILL the OS kills the workers as the leader dies
    while _session_processes(p.pid) and time.monotonic() - t0 < 2.0:
        time.sleep(0.02)
    assert _session_processes(p.pid) == []
    if sig == signal.SIGTERM:  # reaped by the leader (after SIGKILL that is init's part)
        assert not any(Path(f"/proc/{w}").exists() for w in workers)
    assert not list((out / "points").glob("*.json"))


def test_a_sweep_whose_every_point_fails_exits_1(tmp_path: Path) -> None:
    out = tmp_path / "sw"
    res = CliRunner().invoke(
        main,
        [
            "sweep",
            "-c",
            str(_cfg(tmp_path)),
            "--grid",
            "traffic.load.concurrency=0,-1",
            "-o",
            str(out),
            "-j",
            "2",
        ],
    )
    assert res.exit_code == 1, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert lines == [
        "aisim: error: every point of the sweep failed; the first: "
        f"{tmp_path / 'cfg.yaml'}: traffic.load.concurrency: must be a positive "
        "integer, got 0"
    ], res.stderr
    assert (out / "sweep.parquet").is_file()
