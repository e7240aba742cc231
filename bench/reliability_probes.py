"""Reliability probes: each way a run could lose results, half-write them or end in a traceback,
run against one aisim install, with the outcome printed as one Markdown row per probe.

usage: python bench/reliability_probes.py [--aisim CMD] [--only NAME ...] [--big]

CMD is how to start aisim (default: the `aisim` next to this Python). `--big` adds the
200,000-request capture probes (a minute and ~3 GB on the old code). bench/RELIABILITY.md
records the rows of the code before and after the reliability work.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from reliability_configs import ALIAS_BOMB, QUICK, TRACE_CASES, TRACE_CONFIG, trace_text


def default_signals() -> None:
    """Children get Ctrl-C's default action back: a shell's background job starts with SIGINT
    ignored, and a Python started that way never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Probe:
    def __init__(self, aisim: list[str], work: Path):
        self.aisim = aisim
        self.work = work
        self.rows: list[tuple[str, str, str]] = []

    def config(self, name: str, requests: int = 256, text: str | None = None) -> Path:
        path = self.work / f"{name}.yaml"
        path.write_text(text if text is not None else QUICK.replace("REQUESTS", str(requests)))
        return path

    def run(
        self,
        args: list[str],
        timeout: float = 120,
        fsize: int | None = None,
        cwd: Path | None = None,
    ) -> dict:
        def limit():
            default_signals()
            if fsize is not None:
                resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

        t0 = time.monotonic()
        try:
            p = subprocess.run(
                self.aisim + args,
                capture_output=True,
                text=True,
                timeout=timeout,
                preexec_fn=limit,
                cwd=cwd,
            )
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as exc:
            rc, out, err = "timeout", exc.stdout or "", exc.stderr or ""
            out = out.decode() if isinstance(out, bytes) else out
            err = err.decode() if isinstance(err, bytes) else err
        return {"rc": rc, "out": out, "err": err, "s": time.monotonic() - t0}

    def record(self, name: str, command: str, outcome: str) -> None:
        row = (name, command, " ".join(outcome.split()))
        self.rows.append(row)
        print(f"| {row[0]} | `{row[1]}` | {row[2]} |", flush=True)


def err_summary(r: dict, width: int = 160) -> str:
    lines = [ln for ln in r["err"].splitlines() if ln.strip()]
    last = lines[-1][:width] if lines else ""
    return f"exit {r['rc']}, {len(lines)} stderr line(s): {last!r}"


def listing(folder: Path) -> dict[str, int]:
    out = {}
    for root, _dirs, files in os.walk(folder):
        for f in files:
            p = Path(root) / f
            with contextlib.suppress(OSError):
                out[str(p.relative_to(folder))] = p.stat().st_size
    return out


def interrupt_when(
    cmd: list[str], ready, sig=signal.SIGINT, timeout: float = 300, group: bool = False
) -> dict:
    """Start cmd, send `sig` once ready() is true; exit code, seconds from signal to exit."""
    p = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=default_signals,
    )
    t0 = time.monotonic()
    sent = None
    while p.poll() is None and time.monotonic() - t0 < timeout:
        if sent is None and ready(time.monotonic() - t0, p.pid):
            sent = time.monotonic()
            os.killpg(p.pid, sig) if group else p.send_signal(sig)
        time.sleep(0.01)
    if p.poll() is None:
        p.kill()
    done = time.monotonic()
    p.wait()
    orphans = children_alive(p.pid)  # workers that outlived their leader hold the pipes open
    for pid in orphans:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    out, err = p.communicate()
    return {
        "rc": p.returncode,
        "out": out,
        "err": err,
        "pid": p.pid,
        "orphans": orphans,
        "after_signal_s": None if sent is None else done - sent,
    }


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def children_alive(pid: int) -> list[int]:
    alive = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid or (int(stat[3]) == pid):  # parent, or same process group
                alive.append(int(d.name))
    return alive


# --------------------------------------------------------------------------- probes


def probe_overwrite(pr: Probe, requests: int) -> None:
    cfg = pr.config(f"q{requests}", requests)
    small = pr.config("q256", 256)
    out = pr.work / f"ow{requests}"
    pr.run(
        [
            "predict",
            "-c",
            str(small),
            "-o",
            str(out),
            "--overwrite",
            "--capture-per-request",
            "--format",
            "json",
        ]
    )
    before = listing(out)
    old = (out / "prediction.sha256").read_text()
    r = interrupt_when(
        [
            *pr.aisim,
            "predict",
            "-c",
            str(cfg),
            "-o",
            str(out),
            "--overwrite",
            "--capture-per-request",
            "--format",
            "json",
        ],
        lambda _t, _pid: listing(out) != before,
    )
    now = listing(out)
    sha = (out / "prediction.sha256").read_text() if (out / "prediction.sha256").exists() else None
    state = (
        "earlier results kept"
        if sha == old and now == before
        else "new results complete"
        if sha and r["rc"] == 0
        else "earlier results LOST"
    )
    extra = sorted(set(now) - set(before))
    pr.record(
        f"2 overwrite + Ctrl-C in the write ({requests:,} requests)",
        f"aisim predict -c q{requests}.yaml -o DIR --overwrite --capture-per-request; "
        "SIGINT once DIR changes",
        f"{err_summary(r)}; {state} ({len(now)} files, before {len(before)}); "
        f"leftovers: {extra or 'none'}",
    )


def probe_full_disk(pr: Probe) -> None:
    cfg = pr.config("q2048", 2048)
    small = pr.config("q256", 256)
    out = pr.work / "fsize"
    pr.run(["predict", "-c", str(small), "-o", str(out), "--overwrite", "--format", "json"])
    before = listing(out)
    for attempt in (1, 2):
        r = pr.run(
            [
                "predict",
                "-c",
                str(cfg),
                "-o",
                str(out),
                "--overwrite",
                "--capture-per-request",
                "--format",
                "json",
            ],
            fsize=1 << 20,
        )
        now = listing(out)
        pr.record(
            f"3 file-size limit 1 MiB (RLIMIT_FSIZE), run {attempt}",
            "aisim predict -c q2048.yaml -o DIR --overwrite --capture-per-request",
            f"{err_summary(r)}; files now {sorted(now)}; earlier set "
            f"{'kept' if all(now.get(k) == v for k, v in before.items()) else 'LOST'}",
        )
    tiny = pr.work / "tinyfs"
    tiny.mkdir(exist_ok=True)
    if (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=5m", "tmpfs", str(tiny)], capture_output=True
        ).returncode
        != 0
    ):
        pr.record("3 5 MB filesystem", "mount -t tmpfs -o size=5m", "not run (mount refused)")
        return
    try:
        cfg = pr.config("q8192", 8192)
        for attempt in (1, 2):
            r = pr.run(
                [
                    "predict",
                    "-c",
                    str(cfg),
                    "-o",
                    str(tiny / "out"),
                    "--overwrite",
                    "--capture-per-request",
                    "--format",
                    "json",
                ]
            )
            pr.record(
                f"3 5 MB tmpfs, run {attempt}",
                "aisim predict -c q8192.yaml -o TINY/out --overwrite --capture-per-request",
                f"{err_summary(r)}; files now {sorted(listing(tiny))}",
            )
    finally:
        subprocess.run(["umount", str(tiny)], capture_output=True)


def probe_kernel_interrupt(pr: Probe) -> None:
    cfg = pr.config("q10m", 10_000_000)
    out = pr.work / "kint"

    def in_kernel(_t, pid):
        """10 M requests' state is allocated and the event loop is touching its pages (RSS
        past 1.3 GB of the run's ~1.9 GB peak; measured by sampling a run)."""
        return rss_mb(pid) > 1300

    r = interrupt_when([*pr.aisim, "predict", "-c", str(cfg), "-o", str(out)], in_kernel)
    pr.record(
        "4 Ctrl-C while the kernel runs",
        "aisim predict -c q10m.yaml -o DIR; SIGINT once the state is allocated",
        f"{err_summary(r)}; stopped {r['after_signal_s'] or -1:.2f} s after the signal; "
        f"written: {sorted(listing(out)) if out.exists() else 'nothing'}",
    )


def sweep_args(pr: Probe, out: Path, jobs: int, values: str) -> list[str]:
    cfg = pr.config("q20k", 20000)
    return [
        *pr.aisim,
        "sweep",
        "-c",
        str(cfg),
        "--grid",
        f"traffic.load.concurrency={values}",
        "-o",
        str(out),
        "-j",
        str(jobs),
    ]


def probe_sweeps(pr: Probe) -> None:
    values = "1,2,3,4,5,6,7,8"
    for jobs, sig, name in (
        (2, signal.SIGINT, "SIGINT"),
        (1, signal.SIGINT, "SIGINT"),
        (2, signal.SIGTERM, "SIGTERM"),
    ):
        out = pr.work / f"sweep-j{jobs}-{name}"
        shutil.rmtree(out, ignore_errors=True)

        def ready(t, _pid, out=out):
            return t > 1.0 and any((out / "points").glob("*.json"))

        r = interrupt_when(sweep_args(pr, out, jobs, values), ready, sig=sig)
        orphans = r["orphans"]
        pts = [json.loads(p.read_text()) for p in (out / "points").glob("*.json")]
        failed = sum(1 for p in pts if p["status"] != "ok")
        rerun = subprocess.run(
            sweep_args(pr, out, jobs, values),
            capture_output=True,
            text=True,
            preexec_fn=default_signals,
        )
        pr.record(
            f"5 sweep -j {jobs}, {name} to the leader",
            f"aisim sweep --grid traffic.load.concurrency={values} -j {jobs}; "
            f"{name} after the first point",
            f"{err_summary(r)}; stopped {r['after_signal_s']:.1f} s after the signal; "
            f"{len(pts)} points kept ({failed} recorded as failed); "
            f"workers left running: {len(orphans)}; rerun: exit {rerun.returncode}, "
            f"{rerun.stdout.strip()[:90]!r} {rerun.stderr.strip()[:120]!r}",
        )
    out = pr.work / "sweep-allfail"
    shutil.rmtree(out, ignore_errors=True)
    r = subprocess.run(
        [
            *pr.aisim,
            "sweep",
            "-c",
            str(pr.config("q256", 256)),
            "--grid",
            "engine.workers.aggregated.kv_cache.capacity.blocks=17,16",
            "-o",
            str(out),
            "-j",
            "1",
        ],
        capture_output=True,
        text=True,
        preexec_fn=default_signals,
    )
    pr.record(
        "5 sweep whose every point fails",
        "aisim sweep --grid engine.workers.aggregated.kv_cache.capacity.blocks=17,16",
        f"exit {r.returncode}: {r.stdout.strip()[:100]!r} {r.stderr.strip()[:100]!r}",
    )


def probe_bounds(pr: Probe) -> None:
    cfg = pr.config("q256", 256)
    w = "engine.workers.aggregated"
    for s in (
        "traffic.source.output_tokens=1000000000000000000000000000000",
        f"{w}.parallelism.replicas=18446744073709551616",
        f"{w}.kv_cache.capacity.blocks=1000000000000",
        f"{w}.parallelism.replicas=2147483648",
        f"{w}.timing.decode_ms=1.0e+13",
        f"{w}.timing.decode_ms=1.0e+15",
    ):
        r = pr.run(["predict", "-c", str(cfg), "--set", s, "--format", "json"], timeout=120)
        res = ""
        if r["rc"] == 0:
            d = json.loads(r["out"])
            res = (
                f"; duration_ms {d['duration_ms']}, mean_tpot_ms {d['mean_tpot_ms']}, "
                f"min_ttft_ms {d['min_ttft_ms']}"
            )
        pr.record(
            f"6/7 --set {s.split('=')[0].split('.')[-1]}={s.split('=')[1]}",
            f"aisim predict -c q256.yaml --set {s}",
            err_summary(r, 200) + res,
        )


def probe_alias_bomb(pr: Probe) -> None:
    cfg = pr.config("bomb", text=ALIAS_BOMB)
    r = pr.run(["validate", "-c", str(cfg)], timeout=30)
    pr.record(
        "8 YAML alias bomb (1.3 KB)",
        "aisim validate -c bomb.yaml (30 s limit)",
        err_summary(r) + f" after {r['s']:.1f} s",
    )
    deep = pr.config("deep", text="traffic: " + "[" * 100000 + "]" * 100000 + "\n")
    r = pr.run(["validate", "-c", str(deep)], timeout=30)
    pr.record("8 100,000-deep YAML brackets", "aisim validate -c deep.yaml", err_summary(r))


def probe_small_pools(pr: Probe) -> None:
    cfg = pr.config("q64", 64)
    res = []
    for blocks in (1, 15, 16, 17, 18):
        s = f"engine.workers.aggregated.kv_cache.capacity.blocks={blocks}"
        v = pr.run(["validate", "-c", str(cfg), "--set", s])
        p = pr.run(["predict", "-c", str(cfg), "--set", s, "--format", "json"])
        res.append(f"{blocks}: validate {v['rc']} / predict {p['rc']}")
    pr.record(
        "9 capacity.blocks 1-18 (1024-token prompts, 64-token blocks)",
        "aisim validate / predict --set ...capacity.blocks=N",
        "; ".join(res),
    )


def probe_defaults(pr: Probe) -> None:
    text = QUICK.replace("REQUESTS", "64")
    notraffic = pr.config("notraffic", text=text[text.index("engine:") :])
    r = pr.run(["predict", "-c", str(notraffic), "--format", "json"])
    n = json.loads(r["out"])["num_requests"] if r["rc"] == 0 else None
    pr.record(
        "10 config without traffic:",
        "aisim predict -c notraffic.yaml",
        f"{err_summary(r)}; num_requests {n}",
    )
    cfg = pr.config("q64", 64)
    r = pr.run(["predict", "-c", str(cfg), "--capture-per-request", "--format", "json"])
    pr.record(
        "10 --capture-per-request without --output-dir",
        "aisim predict -c q64.yaml --capture-per-request",
        err_summary(r),
    )
    empty = pr.work / "emptydir"
    empty.mkdir(exist_ok=True)
    r = pr.run(["predict", "-c", str(cfg), "-o", "", "--format", "json"], cwd=empty)
    pr.record(
        "10 -o ''",
        "aisim predict -c q64.yaml -o ''",
        f"{err_summary(r)}; files in the current folder: {sorted(listing(empty))}",
    )


def probe_traces(pr: Probe) -> None:
    for i, (name, kind) in enumerate(TRACE_CASES.items()):
        folder = pr.work / f"trace{i}"
        folder.mkdir(exist_ok=True)
        (folder / "trace.jsonl").write_text(trace_text(kind))
        cfg = folder / "c.yaml"
        cfg.write_text(TRACE_CONFIG)
        v = pr.run(["validate", "-c", str(cfg)])
        p = pr.run(["predict", "-c", str(cfg), "--format", "json"])
        pr.record(
            f"11/12 trace: {name}",
            "aisim validate / predict -c c.yaml",
            f"validate: {err_summary(v, 130)}; predict: {err_summary(p, 130)}",
        )
    folder = pr.work / "tracefifo"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    os.mkfifo(folder / "trace.jsonl")
    (folder / "c.yaml").write_text(TRACE_CONFIG)
    v = pr.run(["validate", "-c", str(folder / "c.yaml")], timeout=20)
    pr.record("12 trace path is a FIFO", "aisim validate -c c.yaml", err_summary(v))
    (folder / "trace.jsonl").unlink()
    (folder / "trace.jsonl").mkdir()
    v = pr.run(["validate", "-c", str(folder / "c.yaml")], timeout=20)
    pr.record("12 trace path is a directory", "aisim validate -c c.yaml", err_summary(v))


def probe_unwritable(pr: Probe) -> None:
    cfg = pr.config("q4096", 4096)
    afile = pr.work / "afile"
    afile.write_text("x")
    dangling = pr.work / "dangling"
    if not dangling.is_symlink():
        dangling.symlink_to(pr.work / "nowhere" / "deeper")
    for name, target in (
        ("parent is a file", afile / "out"),
        ("dangling symlink", dangling),
        ("/proc", Path("/proc")),
        ("/proc/aisim-out", Path("/proc/aisim-out")),
    ):
        r = pr.run(["predict", "-c", str(cfg), "-o", str(target), "--overwrite"])
        pr.record(
            f"13 output folder: {name}",
            f"aisim predict -c q4096.yaml -o {target}",
            f"{err_summary(r, 140)} after {r['s']:.1f} s",
        )


def probe_capture_memory(pr: Probe, requests: int) -> None:
    cfg = pr.config(f"q{requests}", requests)
    out = pr.work / f"mem{requests}"
    code = (
        "import resource, subprocess, sys; "
        "r = subprocess.run(sys.argv[1:]); "
        "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            *pr.aisim,
            "predict",
            "-c",
            str(cfg),
            "-o",
            str(out),
            "--overwrite",
            "--capture-per-request",
        ],
        capture_output=True,
        text=True,
        preexec_fn=default_signals,
    )
    rc, kb = r.stdout.split()[-2:]
    pr.record(
        f"14 capture memory, {requests:,} requests",
        f"aisim predict -c q{requests}.yaml -o DIR --capture-per-request",
        f"exit {rc}, peak RSS {int(kb) / 1024:.0f} MB ({int(kb) / requests:.2f} KB per request)",
    )


PROBES = {
    "overwrite": lambda pr, big: probe_overwrite(pr, 200_000 if big else 20_000),
    "fulldisk": lambda pr, big: probe_full_disk(pr),
    "kernel": lambda pr, big: probe_kernel_interrupt(pr),
    "sweep": lambda pr, big: probe_sweeps(pr),
    "bounds": lambda pr, big: probe_bounds(pr),
    "yaml": lambda pr, big: probe_alias_bomb(pr),
    "pools": lambda pr, big: probe_small_pools(pr),
    "defaults": lambda pr, big: probe_defaults(pr),
    "traces": lambda pr, big: probe_traces(pr),
    "unwritable": lambda pr, big: probe_unwritable(pr),
    "memory": lambda pr, big: [
        probe_capture_memory(pr, n) for n in ((200_000, 1_000_000) if big else (20_000,))
    ],
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--aisim", default=str(Path(sys.executable).parent / "aisim"))
    ap.add_argument("--only", nargs="*", default=None, choices=sorted(PROBES))
    ap.add_argument("--big", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="aisim-probes-"))
    pr = Probe(shlex.split(args.aisim), work)
    print("| probe | command | outcome |\n|---|---|---|", flush=True)
    try:
        for name in args.only or PROBES:
            PROBES[name](pr, args.big)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
