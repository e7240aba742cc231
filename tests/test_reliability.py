"""Nothing lost, nothing half-written, never a traceback: interrupts, full disks, unwritable
folders, bounds that follow from the deployment, bounded parsing and the lenient reads that are
refused. Signals and filesystem limits are exercised in child processes."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from aisim.cli import main
from tests.test_cli import BASE

ROOT = Path(__file__).resolve().parent.parent
W = "engine.workers.aggregated"


def _cfg(tmp_path: Path, text: str = BASE, name: str = "cfg.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _cli(*args: str):
    return CliRunner().invoke(main, list(args))


def _one_line_error(res, code: int = 2) -> str:
    assert res.exit_code == code, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    return lines[0]


def _child(code: str, *args: str, fsize: int | None = None, **kw) -> subprocess.Popen:
    """A Python child running `code` with Ctrl-C's default action restored (a background job
    starts with SIGINT ignored) and optionally a file-size limit (a tiny filesystem)."""

    def setup() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=setup,
        env=env,
        start_new_session=True,
        **kw,
    )


def _aisim(*args: str, fsize: int | None = None, timeout: float = 120):
    p = _child("import sys; from aisim.cli import main; main(sys.argv[1:])", *args, fsize=fsize)
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


def _wait_for(path: Path, p: subprocess.Popen, timeout: float = 60.0) -> None:
    t0 = time.monotonic()
    while not path.exists():
        assert p.poll() is None, p.communicate()
        assert time.monotonic() - t0 < timeout, f"{path} never appeared"
        time.sleep(0.02)


def _files(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


# --------------------------------------------------------------------------- results (2, 3, 13)


def test_interrupted_overwrite_keeps_the_earlier_results(tmp_path: Path) -> None:
    """Ctrl-C in the middle of streaming the records: the earlier run stays whole."""
    cfg = _cfg(tmp_path)
    out = tmp_path / "out"
    assert _cli("predict", "-c", str(cfg), "-o", str(out), "--capture-per-request").exit_code == 0
    before = _files(out)
    marker = tmp_path / "writing"
    p = _child(
        f"""
        import os, signal, sys, time
        from aisim.output import records
        batches = records.RequestRecords.indexed_batches
        def slow(self, size=records.BATCH):
            for i, batch in enumerate(batches(self, 2)):
                if i == 3:
                    open({str(marker)!r}, "w").close()
                    time.sleep(30)
                yield batch
        records.RequestRecords.indexed_batches = slow
        from aisim.cli import main
        main(sys.argv[1:])
        """,
        "predict",
        "-c",
        str(cfg),
        "-o",
        str(out),
        "--overwrite",
        "--capture-per-request",
        "--set",
        "traffic.stop.requests=40",
    )
    _wait_for(marker, p)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 130
    assert err.strip().splitlines() == ["aisim: interrupted (SIGINT); nothing was written"]
    assert _files(out) == before  # no staging folder, no temporary file, nothing replaced


def test_full_disk_writes_nothing_and_leaves_nothing(tmp_path: Path) -> None:
    """A file-size limit below requests.jsonl: one line, exit 2, the earlier set intact, and
    no temporary files piling up over reruns."""
    cfg = _cfg(tmp_path)
    out = tmp_path / "out"
    assert _cli("predict", "-c", str(cfg), "-o", str(out)).exit_code == 0
    before = _files(out)
    for _ in range(2):
        code, _out, err = _aisim(
            "predict",
            "-c",
            str(cfg),
            "-o",
            str(out),
            "--overwrite",
            "--capture-per-request",
            "--set",
            "traffic.stop.requests=400",
            fsize=64 << 10,
        )
        assert code == 2, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "File too large" in lines[0], err
        assert "the earlier results are kept" in lines[0]
        assert _files(out) == before
        assert sorted(p.name for p in out.iterdir()) == sorted(before)


def test_staging_of_a_killed_run_is_removed_by_the_next(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    (out / f".aisim-staging-{dead}-x").mkdir()
    (out / f".aisim-staging-{dead}-x" / "prediction.json").write_text("{")
    (out / f".prediction.json.tmp{dead}").write_text("{")
    (out / "mine.txt").write_text("kept")
    assert _cli("predict", "-c", str(_cfg(tmp_path)), "-o", str(out)).exit_code == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "mine.txt",
        "prediction.json",
        "prediction.sha256",
    ]


@pytest.mark.parametrize("kind", ["parent is a file", "dangling symlink", "proc", "proc child"])
def test_unwritable_output_folder_is_refused_before_simulating(
    tmp_path: Path, monkeypatch, kind: str
) -> None:
    import aisim.prediction

    def never(*args, **kwargs):
        raise AssertionError("simulated before checking the output folder")

    monkeypatch.setattr(aisim.prediction, "predict_config", never)
    (tmp_path / "afile").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "nowhere" / "deeper")
    target = {
        "parent is a file": tmp_path / "afile" / "out",
        "dangling symlink": tmp_path / "link",
        "proc": Path("/proc"),
        "proc child": Path("/proc/aisim-x"),
    }[kind]
    line = _one_line_error(
        _cli("predict", "-c", str(_cfg(tmp_path)), "-o", str(target), "--overwrite")
    )
    assert line.startswith("aisim: error: --output-dir:")
    assert not (tmp_path / "nowhere").exists()


def test_empty_output_dir_and_capture_without_one_are_refused(tmp_path: Path) -> None:
    cfg = str(_cfg(tmp_path))
    assert "empty" in _one_line_error(_cli("predict", "-c", cfg, "-o", ""))
    line = _one_line_error(_cli("predict", "-c", cfg, "--capture-per-request"))
    assert "--capture-per-request needs --output-dir" in line


def test_streamed_records_give_the_whole_list_bytes(tmp_path: Path, monkeypatch) -> None:
    """prediction.json, requests.jsonl and the hash equal a whole-list dump, across batches
    and parquet row groups."""
    import pyarrow.parquet as pq

    from aisim.output import records as rec
    from aisim.output import write
    from aisim.output.write import HOST_FIELDS, prediction_sha256

    monkeypatch.setattr(rec, "BATCH", 3)
    monkeypatch.setattr(write, "ROW_GROUP", 5)
    monkeypatch.setattr(rec.RequestRecords.indexed_batches, "__defaults__", (3,))
    out = tmp_path / "out"
    res = _cli(
        "predict",
        "-c",
        str(_cfg(tmp_path)),
        "-o",
        str(out),
        "--capture-per-request",
        "--format",
        "json",
    )
    assert res.exit_code == 0, res.output
    lines = (out / "requests.jsonl").read_text().splitlines()
    records = [json.loads(ln) for ln in lines]
    assert len(records) == 12
    assert lines == [json.dumps(r, sort_keys=True, separators=(",", ":")) for r in records]
    pred = json.loads((out / "prediction.json").read_text())
    assert pred["per_request"] == records
    assert (out / "prediction.json").read_text() == json.dumps(
        pred, indent=2, sort_keys=True
    ) + "\n"
    assert (out / "prediction.sha256").read_text().strip() == prediction_sha256(pred)
    table = pq.read_table(out / "requests.parquet")
    assert table.column("session_id").to_pylist() == [r["session_id"] for r in records]
    assert pq.ParquetFile(out / "requests.parquet").num_row_groups == 2  # 6 + 6 rows
    assert HOST_FIELDS[0] in pred


def test_streamed_parquet_has_the_bytes_of_the_whole_table(tmp_path: Path) -> None:
    """requests.parquet written a batch at a time equals one pq.write_table of the whole list
    byte for byte (the file earlier versions wrote). 70,000 distinct session ids outgrow the
    writer's 1 MB dictionary page, where chunked input would change the encoding."""
    import aisim
    from aisim.output.records import BATCH
    from aisim.output.write import RequestsParquet, requests_table, table_bytes

    result = aisim.predict(BASE, capture_requests=True)
    seed = list(result.records)
    records = [
        dict(seed[i % len(seed)], request_index=i, session_id=f"session_{i}") for i in range(70_000)
    ]
    parquet = RequestsParquet(tmp_path / "requests.parquet", result.provenance)
    for start in range(0, len(records), BATCH):
        parquet.add(records[start : start + BATCH], range(start, min(start + BATCH, len(records))))
    parquet.close()
    whole = table_bytes(requests_table(records, range(len(records)), result.provenance))
    assert (tmp_path / "requests.parquet").read_bytes() == whole


# --------------------------------------------------------------------------- bounds (6, 7, 9)


@pytest.mark.parametrize(
    "override,fragment",
    [
        ("traffic.source.output_tokens=1000000000000000000000000000000", "64-bit integer"),
        (f"{W}.parallelism.replicas=18446744073709551616", "64-bit integer"),
        (f"{W}.kv_cache.capacity.blocks=1000000000000", "KV block ids"),
        (f"{W}.parallelism.replicas=2147483648", "parallelism.replicas"),
        ("traffic.stop.requests=3000000000", "traffic.stop.requests"),
        (f"{W}.kv_cache.capacity.blocks=2000000000", "GiB"),
        ("traffic.stop.requests=2000000000", "grows with traffic.stop.requests"),
        (f"{W}.timing.decode_ms=1.0e+13", "timing.decode_ms"),
        (f"{W}.timing.prefill_ms=9.3e+12", "a pass can last"),
    ],
)
def test_deployment_bounds_are_refused_before_allocating(
    tmp_path: Path, override: str, fragment: str
) -> None:
    cfg = str(_cfg(tmp_path))
    for command in ("validate", "predict"):
        line = _one_line_error(_cli(command, "-c", cfg, "--set", override))
        assert fragment in line


def test_pass_times_inside_the_range_still_run(tmp_path: Path) -> None:
    res = _cli(
        "predict",
        "-c",
        str(_cfg(tmp_path)),
        "--set",
        f"{W}.timing.decode_ms=1.0e+12",
        "--format",
        "json",
    )
    assert res.exit_code == 0
    pred = json.loads(res.output.splitlines()[-1])
    # past 1e12 ms the float ms clock resolves ~0.2 us, so the 7.3 ms prefill reads as
    # 7.2998046875 (AISimulate's figure too); what matters is that it is not rounded away
    assert pred["mean_tpot_ms"] > 9e11 and abs(pred["min_ttft_ms"] - 7.3) < 1e-3


@pytest.mark.parametrize("blocks", [1, 3, 4])
def test_validate_and_predict_agree_on_a_pool_no_prompt_fits(tmp_path: Path, blocks: int) -> None:
    """64-token prompts in 16-token blocks need 4 blocks: 1-3 reject every request (predict
    exits 1 with its outputs, as AISimulate does; validate says so, exit 1); 4 cannot finish
    one (both refuse, exit 2)."""
    cfg = str(_cfg(tmp_path))
    s = f"{W}.kv_cache.capacity.blocks={blocks}"
    v = _cli("validate", "-c", cfg, "--set", s)
    p = _cli("predict", "-c", cfg, "--set", s, "-o", str(tmp_path / "out"))
    assert v.exit_code == p.exit_code == (1 if blocks < 4 else 2)
    if blocks < 4:
        assert "no request can complete" in v.output and "capacity.blocks" in v.output
        assert (tmp_path / "out" / "prediction.json").exists()


# --------------------------------------------------------------------------- parsing (8, 10)

BOMB = BASE.replace(
    "load: {type: concurrency, concurrency: 4}",
    """load:
    type: concurrency
    concurrency:
      - &a [x, x, x, x, x, x, x, x, x, x]
      - &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
      - &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
      - &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
      - &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
      - &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
      - &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
      - [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]""",
)


@pytest.mark.parametrize(
    "text,fragment",
    [
        (BOMB, "through its aliases"),
        ("traffic: " + "[" * 100000 + "]" * 100000 + "\n", "nests deeper"),
        ("traffic: " + "[" * 150 + "]" * 150 + "\n", "nests deeper"),
        ("a: " + "x" * (5 << 20) + "\n", "is not a config"),
    ],
)
def test_bounded_parsing(tmp_path: Path, text: str, fragment: str) -> None:
    t0 = time.monotonic()
    line = _one_line_error(_cli("validate", "-c", str(_cfg(tmp_path, text))))
    assert fragment in line and time.monotonic() - t0 < 5
    assert len(line) < 400


def test_a_small_alias_whose_value_is_wrong_is_quoted_briefly(tmp_path: Path) -> None:
    text = BASE.replace("concurrency: 4}", "concurrency: &x [" + ", ".join(["1"] * 500) + "]}")
    line = _one_line_error(_cli("validate", "-c", str(_cfg(tmp_path, text))))
    assert "traffic.load.concurrency" in line and len(line) < 300


def test_missing_traffic_section_runs_the_default_with_a_note(tmp_path: Path) -> None:
    text = BASE[BASE.index("engine:") :]
    res = CliRunner().invoke(main, ["predict", "-c", str(_cfg(tmp_path, text)), "--format", "json"])
    assert res.exit_code == 0
    assert json.loads(res.stdout.splitlines()[-1])["num_requests"] == 100
    assert "no traffic: section" in res.stderr and "100 synthetic requests" in res.stderr


# --------------------------------------------------------------------------- traces (11, 12)

TRACE = (
    BASE.replace(
        "source: {type: synthetic, input_tokens: 64, output_tokens: 8}",
        "source: {type: trace, paths: [trace.jsonl], format: mooncake, block_size: 16}",
    )
    .replace("load: {type: concurrency, concurrency: 4}", "load: {type: trace_timestamps}")
    .replace("  stop: {requests: 12}\n", "")
)


def _rows() -> list[dict]:
    return [
        {"timestamp": 10 * i, "input_length": 40, "output_length": 5, "hash_ids": [1, 2, 3]}
        for i in range(4)
    ]


def _trace(tmp_path: Path, lines: list[str]) -> str:
    (tmp_path / "trace.jsonl").write_text("".join(ln + "\n" for ln in lines))
    return str(_cfg(tmp_path, TRACE))


def _lines(edit=None) -> list[str]:
    rows = _rows()
    if edit:
        edit(rows)
    return [json.dumps(r) for r in rows]


@pytest.mark.parametrize(
    "name,lines,fragment",
    [
        (
            "negative input_length",
            _lines(lambda r: r[1].update(input_length=-5)),
            ":2: input_length must be a positive integer",
        ),
        (
            "NaN timestamp",
            [ln.replace('"timestamp": 10,', '"timestamp": NaN,') for ln in _lines()],
            ":2: timestamp must be a number",
        ),
        (
            "timestamp 1e300",
            _lines(lambda r: r[2].update(timestamp=1e300)),
            ":3: timestamp 1e+300 ms",
        ),
        (
            "two objects on one line",
            [_lines()[0] + _lines()[1], *_lines()[2:]],
            ":1: not a JSON object (Extra data)",
        ),
        (
            "deep brackets",
            [*_lines()[:2], "[" * 100000 + "]" * 100000, *_lines()[2:]],
            ":3: nested too deeply",
        ),
        (
            "huge output_length",
            _lines(lambda r: r[3].update(output_length=2**70)),
            ":4: output_length must be a positive integer up to",
        ),
    ],
)
def test_lenient_trace_reads_are_refused_by_validate_and_predict(
    tmp_path: Path, name: str, lines: list[str], fragment: str
) -> None:
    cfg = _trace(tmp_path, lines)
    for command in ("validate", "predict"):
        line = _one_line_error(_cli(command, "-c", cfg))
        assert "trace.jsonl" in line and fragment in line, line


def test_out_of_order_rows_are_replayed_with_a_note(tmp_path: Path) -> None:
    cfg = _trace(tmp_path, _lines(lambda r: (r[0].update(timestamp=25), r[2].update(timestamp=0))))
    res = CliRunner().invoke(main, ["validate", "-c", cfg])
    assert res.exit_code == 0
    assert "2 of 4 rows carry a timestamp earlier than a row above them" in res.stderr


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_trace_that_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    cfg = _trace(tmp_path, _lines())
    (tmp_path / "trace.jsonl").unlink()
    if kind == "fifo":
        os.mkfifo(tmp_path / "trace.jsonl")
    else:
        (tmp_path / "trace.jsonl").mkdir()
    assert "is not a regular file" in _one_line_error(_cli("validate", "-c", cfg))


# --------------------------------------------------------------------------- API, packaging


def test_api_overrides_take_a_dict_and_say_when_nothing_was_captured() -> None:
    import aisim

    by_list = aisim.predict(BASE, overrides=["traffic.load.concurrency=2"])
    by_dict = aisim.predict(BASE, overrides={"traffic.load.concurrency": 2})
    assert by_list.prediction_sha256 == by_dict.prediction_sha256
    with pytest.warns(UserWarning, match="capture_requests=True"):
        assert by_dict.requests is None
    captured = aisim.predict(BASE, capture_requests=True)
    assert captured.requests.num_rows == 12 and len(list(captured.records)) == 12


def test_install_hints_name_the_distribution_the_readme_names() -> None:
    import tomllib

    name = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
    assert name != "aisim"  # PyPI's "aisim" is an unrelated placeholder
    readme = (ROOT / "README.md").read_text()
    for source in ("aisim/plot.py", "aisim/sweeps/ray_exec.py"):
        # every registry install names the distribution ('-e .[x]' is the checkout form)
        named = re.findall(r"pip install '([^'.][^'\[]*)\[", (ROOT / source).read_text())
        assert named and set(named) == {name}, (source, named)
        assert f"pip install '{name}[" in readme
