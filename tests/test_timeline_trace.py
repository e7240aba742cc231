"""aisim trace: the Perfetto file decoded back (its protobuf wire format read here, packet by
packet) and the Chrome JSON: a pass slice per passes.parquet row, request phases that tile each
request's end-to-end latency, the cuts, and bad input."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from aisim.cli import main
from tests.analysis_configs import PD_OP_LEVEL, PRESSURE


def _fields(buf: bytes):
    """(field number, wire type, value) of one protobuf message."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 1:
            value, i = struct.unpack_from("<d", buf, i)[0], i + 8
        elif wire == 2:
            n, i = _varint(buf, i)
            value, i = buf[i : i + n], i + n
        else:
            raise AssertionError(f"unexpected wire type {wire}")
        yield field, wire, value


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        b = buf[i]
        i += 1
        out |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return out, i


def _decode(path: Path):
    """Track names by uuid and the track events (ts, type, track, name, annotations)."""
    names, parents, events = {}, {}, []
    for field, _, packet in _fields(path.read_bytes()):
        assert field == 1
        body = {f: v for f, _, v in _fields(packet)}
        if 60 in body:
            desc = {f: v for f, _, v in _fields(body[60])}
            names[desc[1]] = desc[2].decode()
            parents[desc[1]] = desc.get(5)
        if 11 in body:
            ev = dict((f, v) for f, _, v in _fields(body[11]) if f not in (4, 12, 31))
            args, extra_tracks, extra_values = {}, [], []
            for f, _, v in _fields(body[11]):
                if f == 4:
                    ann = {k: x for k, _, x in _fields(v)}
                    args[ann[10].decode()] = ann.get(4, ann.get(5, ann.get(6)))
                elif f == 31:
                    extra_tracks.append(v)
                elif f == 12:
                    extra_values.append(v)
            args["counters"] = dict(zip(extra_tracks, extra_values, strict=True))
            events.append((body[8], ev[9], ev[11], ev.get(23, b"").decode(), args))
    return names, parents, events


def _run(tmp_path: Path, text: str) -> Path:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    out = tmp_path / "run"
    args = ["predict", "-c", str(cfg), "-o", str(out), "--capture-passes", "--capture-per-request"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    return out


@pytest.mark.parametrize("text", [PRESSURE, PD_OP_LEVEL], ids=["aggregated", "disaggregated"])
def test_perfetto_trace_holds_every_pass_and_request_phase(tmp_path: Path, text: str) -> None:
    run = _run(tmp_path, text)
    res = CliRunner().invoke(main, ["trace", str(run)])
    assert res.exit_code == 0, res.output
    names, parents, events = _decode(run / "trace.perfetto-trace")
    assert [e[0] for e in events] == sorted(e[0] for e in events)  # timestamp order
    passes = pq.read_table(run / "passes.parquet")
    pass_tracks = {u for u, n in names.items() if n.endswith(" passes")}
    assert all(names[parents[u]].split()[1:2] == ["worker"] for u in pass_tracks)
    begins = [e for e in events if e[1] == 1 and e[2] in pass_tracks]
    ends = [e for e in events if e[1] == 2 and e[2] in pass_tracks]
    assert len(begins) == len(ends) == passes.num_rows
    scheduled = sorted(e[4]["tokens_scheduled"] for e in begins)
    assert scheduled == sorted(passes.column("tokens_scheduled").to_pylist())
    counter_tracks = {u for u, n in names.items() if n.endswith(("KV blocks used", "waiting"))}
    used = sorted(
        v for e in begins for t, v in e[4]["counters"].items() if names[t].endswith("used")
    )
    assert used == sorted(passes.column("kv_blocks_used").to_pylist())
    assert {t for e in begins for t in e[4]["counters"]} >= counter_tracks
    records = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()]
    by_name = {n: u for u, n in names.items()}
    assert f"{len(records)} requests" in res.output
    for rec in records:
        track = by_name[f"request {rec['session_id'].split('_')[-1]}"]
        mine = [e for e in events if e[2] == track]
        starts = [e[0] for e in mine if e[1] == 1]
        stops = [e[0] for e in mine if e[1] == 2]
        assert starts[0] == round(rec["arrival_time_ms"] * 1e6)
        assert starts[1:] == stops[:-1]  # the phases tile the request's life
        assert stops[-1] == round(rec["last_token_ms"] * 1e6)
        readmits = sum(a["is_readmission"] for a in rec["admission_history"])
        assert sum(1 for e in mine if e[1] == 3) == readmits
    phase_names = {e[3] for e in events if e[1] == 1 and names[e[2]].startswith("request")}
    if text is PD_OP_LEVEL:
        assert {"queued", "prefill", "KV transfer", "decode"} <= phase_names
    else:
        assert phase_names == {"queued", "prefill", "decode"}
        assert any(e[1] == 3 for e in events)  # this case preempts: readmissions marked


def test_tokenizer_adds_a_tokenizing_phase(tmp_path: Path) -> None:
    """engine.tokenization: each request's track starts with its tokenization (arrival to
    tokenized_ms), then the phases of an ordinary run."""
    text = PRESSURE.replace("engine:\n", "engine:\n  tokenization: {workers: 1, base_ms: 2.0}\n", 1)
    run = _run(tmp_path, text)
    res = CliRunner().invoke(main, ["trace", str(run)])
    assert res.exit_code == 0, res.output
    names, _, events = _decode(run / "trace.perfetto-trace")
    by_name = {n: u for u, n in names.items()}
    for line in (run / "requests.jsonl").read_text().splitlines():
        rec = json.loads(line)
        track = by_name[f"request {rec['session_id'].split('_')[-1]}"]
        first = min((e for e in events if e[2] == track and e[1] == 1), key=lambda e: e[0])
        assert first[3] == "tokenizing"
        assert first[0] == round(rec["arrival_time_ms"] * 1e6)
        assert rec["tokenized_ms"] > rec["arrival_time_ms"]


def test_chrome_json_and_the_cuts(tmp_path: Path) -> None:
    run = _run(tmp_path, PRESSURE)
    passes = pq.read_table(run / "passes.parquet")
    res = CliRunner().invoke(main, ["trace", str(run), "--json", "-o", str(tmp_path / "t.json")])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "t.json").read_text())
    tids = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M"}
    pass_slices = [
        e for e in doc["traceEvents"] if e["ph"] == "X" and tids[e["tid"]].endswith(" passes")
    ]
    assert len(pass_slices) == passes.num_rows
    starts = passes.column("start_ms").to_pylist()
    mid = starts[len(starts) // 2] / 1000.0
    res = CliRunner().invoke(
        main,
        ["trace", str(run), "--window", f":{mid}", "--requests", "3", "-o", str(tmp_path / "c")],
    )
    assert res.exit_code == 0, res.output
    ends = passes.column("end_ms").to_pylist()
    kept = sum(1 for s, e in zip(starts, ends, strict=True) if s <= mid * 1000.0)
    assert f"{kept} passes, 3 requests" in res.output
    names, _, _ = _decode(tmp_path / "c")
    assert sorted(n for n in names.values() if n.startswith("request ")) == [
        "request 0",
        "request 1",
        "request 2",
    ]


def test_a_run_without_request_records_draws_the_passes(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(PRESSURE)
    out = tmp_path / "run"
    assert (
        CliRunner()
        .invoke(main, ["predict", "-c", str(cfg), "-o", str(out), "--capture-passes"])
        .exit_code
        == 0
    )
    res = CliRunner().invoke(main, ["trace", str(out)])
    assert res.exit_code == 0 and "rerun with --capture-per-request" in res.output


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--requests", "5-2"], "--requests '5-2': expected a count N"),
        (["--requests", "x"], "--requests 'x'"),
        (["--window", "3:1"], "--window '3:1': expected START:END"),
        (["--window", "a:b"], "--window 'a:b'"),
    ],
)
def test_bad_cuts_exit_2(tmp_path: Path, args, words: str) -> None:
    res = CliRunner().invoke(main, ["trace", str(tmp_path), *args])
    assert res.exit_code == 2 and words in res.output


def test_a_folder_without_passes_exits_2_in_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["trace", str(tmp_path)])
    assert res.exit_code == 2 and "--capture-passes" in res.output
    assert len(res.output.strip().splitlines()) == 1
    res = CliRunner().invoke(main, ["trace", str(tmp_path / "none")])
    assert res.exit_code == 2 and "not a folder" in res.output
    assert not list(tmp_path.iterdir())
