"""Trace replay: reading Mooncake JSONL, prefix keys per engine block, bad rows
(docs/rules.md 10.1, 10.2).

End-to-end figures against AISimulate are the `trace-*` goldens (tests/golden/), which replay the
fixtures under tests/fixtures/traces/.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from aisim import state as st
from aisim.errors import ConfigError
from aisim.traffic_trace import _read_columnar, _scan_rows, prefix_keys, read_trace

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
GOLDEN = Path(__file__).parent / "golden"


def _write(tmp_path: Path, rows: list, name: str = "t.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def _row(ids, out=4, **extra) -> dict:
    return {"timestamp": 0, "output_length": out, "hash_ids": ids, **extra}


@pytest.mark.parametrize("name", ["shared-prefix.jsonl", "rejection.jsonl"])
def test_columnar_reader_equals_line_scan(name: str) -> None:
    path = str(FIXTURES / name)
    fast, slow = _read_columnar(path, 32), _scan_rows(path, 32)
    for a, b in zip(fast, slow, strict=True):
        np.testing.assert_array_equal(a, b)


def test_defaults_aliases_and_blank_lines(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        [
            {"timestamp": 5.5, "output_length": 3, "hash_ids": [7, 8]},
            "",
            {"created_time": 2, "input_tokens": 40, "output_tokens": 2, "hash_ids": [7, 9], "x": 1},
            {"output_length": 1, "hash_ids": [2**64 - 1]},
        ],
    )
    rows = read_trace(path, 32)
    np.testing.assert_array_equal(rows.input_len, [64, 40, 32])  # default len(hash_ids) x bs
    np.testing.assert_array_equal(rows.output_len, [3, 2, 1])
    np.testing.assert_array_equal(rows.timestamp_ms, [5.5, 2.0, 0.0])
    assert rows.hash_ids[-1] == np.uint64(2**64 - 1)


def _shared_blocks(rows_ids, lengths, engine_bs, trace_bs=32):
    """Leading engine blocks of each row whose key another row has too."""
    rows = [_row(ids, input_length=n) for ids, n in zip(rows_ids, lengths, strict=True)]
    tmp = Path(pytest.importorskip("tempfile").mkdtemp())
    tr = read_trace(_write(tmp, rows), trace_bs)
    start, length, chain = prefix_keys(tr, engine_bs, trace_bs)
    # engine block j's content is (entry block_src[j] of the row's slice, j); j is common
    src = st.prefix_keys(chain, trace_bs, engine_bs, 64).block_src
    return [chain[s + src[:n]] for s, n in zip(start, length, strict=True)]


@pytest.mark.parametrize(("engine_bs", "a_b_shared"), [(16, 2), (32, 1), (48, 0), (64, 0)])
def test_prefix_follows_leading_hash_ids_in_engine_blocks(engine_bs: int, a_b_shared: int) -> None:
    # A = [1, 2], B = [1, 3]: they agree on one 32-token source block only
    a, b, a2 = _shared_blocks([[1, 2], [1, 3], [1, 2]], [64, 64, 64], engine_bs)
    common = 0
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1
    assert common == a_b_shared
    # an identical prompt shares every full engine block
    assert len(a2) == 64 // engine_bs and np.array_equal(a, a2)


def test_partial_last_block_is_not_shareable() -> None:
    a, b = _shared_blocks([[1, 2], [1, 2]], [60, 64], 16)
    assert len(a) == 3 and len(b) == 4 and np.array_equal(a, b[:3])


def test_unshared_rows_list_no_keys() -> None:
    a, b = _shared_blocks([[1, 2], [5, 6]], [64, 64], 16)
    assert len(a) == 0 and len(b) == 0


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "not a JSON object"),
        ("[1, 2]", "must be a JSON object"),
        (
            '{"timestamp": 1, "output_length": 2.0, "hash_ids": [2]}',
            "output_length must be a positive",
        ),
        (
            '{"timestamp": 1, "output_length": 0, "hash_ids": [2]}',
            "output_length must be a positive",
        ),
        ('{"timestamp": 1, "hash_ids": [2]}', "output_length must be a positive"),
        ('{"timestamp": 1, "output_length": 2, "hash_ids": []}', "hash_ids must be a non-empty"),
        ('{"timestamp": 1, "output_length": 2, "hash_ids": [-1]}', "hash_ids must be a non-empty"),
        (
            '{"timestamp": 1, "output_length": 2, "hash_ids": [2, true]}',
            "hash_ids must be a non-empty",
        ),
        (
            '{"timestamp": 1, "output_length": 2, "input_length": 0, "hash_ids": [2]}',
            "input_length must be a positive",
        ),
        (
            '{"timestamp": 1, "output_length": 2, "input_length": 33, "hash_ids": [2]}',
            "input_length 33 exceeds the 1 hash ids x block_size 32 = 32 tokens",
        ),
        ('{"timestamp": "x", "output_length": 2, "hash_ids": [2]}', "timestamp must be a number"),
        ('{"timestamp": 1, "output_length": 2, "hash_ids": [2]} {"a": 1}', "not a JSON object"),
    ],
)
def test_bad_row_names_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = _write(tmp_path, [_row([1]), "", line, _row([1])])
    with pytest.raises(ConfigError) as err:
        read_trace(path, 32)
    assert f"{path}:3: " in str(err.value) and message in str(err.value)


def test_session_rows_are_read_with_their_fields(tmp_path: Path) -> None:
    path = _write(tmp_path, [_row([1]), _row([1], session_id="a", delay=4)])
    rows = read_trace(path, 32)
    assert rows.session == [None, "a"]
    assert np.isnan(rows.delay_ms[0]) and rows.delay_ms[1] == 4.0
    assert rows.stamped.tolist() == [True, True]
    plain = read_trace(_write(tmp_path, [_row([1]), _row([2])]), 32)
    assert plain.session is None and plain.delay_ms is None


def test_empty_trace_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no request"):
        read_trace(_write(tmp_path, [""]), 32)


def _config(tmp_path: Path, trace: str, extra_stop: str = "") -> Path:
    cfg = (GOLDEN / "trace-vllm-bs16" / "config.yaml").read_text()
    cfg = cfg.replace("../../fixtures/traces/shared-prefix.jsonl", trace)
    if extra_stop:
        cfg = cfg.replace("  load:", f"  stop: {extra_stop}\n  load:")
    path = tmp_path / "cfg.yaml"
    path.write_text(cfg)
    return path


def test_cli_bad_row_exits_2_without_outputs(tmp_path: Path) -> None:
    from aisim.cli import main

    _write(tmp_path, [_row([1]), '{"hash_ids": [1]}'], name="bad.jsonl")
    out = tmp_path / "out"
    res = CliRunner().invoke(
        main, ["predict", "-c", str(_config(tmp_path, "bad.jsonl")), "--output-dir", str(out)]
    )
    assert res.exit_code == 2
    assert "bad.jsonl:2: output_length must be a positive integer" in res.output
    assert "Traceback" not in res.output and not out.exists()


def test_requests_parquet_indexes_requests_not_file_rows(tmp_path: Path) -> None:
    """A trace's records are named by file row (`request_<row>`), its requests.parquet rows by
    creation index: the two differ when timestamps are out of file order, and the last row's
    name is one past the last index."""
    import pyarrow.parquet as pq

    from aisim.cli import main

    _write(tmp_path, [_row([1], timestamp=5), _row([2], timestamp=0), _row([3], timestamp=9)])
    out = tmp_path / "out"
    cfg = str(_config(tmp_path, "t.jsonl"))
    res = CliRunner().invoke(main, ["predict", "-c", cfg, "-o", str(out), "--capture-per-request"])
    assert res.exit_code == 0, res.output
    table = pq.read_table(out / "requests.parquet").to_pydict()
    rows = dict(zip(table["request_index"], table["session_id"], strict=True))
    assert rows == {0: "request_2", 1: "request_1", 2: "request_3"}
    # the attribution parts are the request's own: its TTFT splits into them
    for k, ttft in enumerate(table["ttft_ms"]):
        parts = sum(
            table[name][k] for name in table if name.startswith("ttft_") and name != "ttft_ms"
        )
        assert parts == pytest.approx(ttft)


def test_relative_trace_path_is_read_from_the_config_folder(tmp_path: Path) -> None:
    from aisim.prediction import run_prediction

    (tmp_path / "sub").mkdir()
    _write(tmp_path / "sub", [_row([1, 2], out=3), _row([1, 2], out=3)], name="t.jsonl")
    pred = run_prediction(str(_config(tmp_path, "sub/t.jsonl")))
    assert pred.prediction["completed_requests"] == 2
    # the second request reuses every full 16-token block but the last token's
    assert pred.prediction["prefix_cache_reused_ratio"] == pytest.approx(48 / 128)


def test_speedup_divides_rebased_timestamps(tmp_path: Path) -> None:
    from aisim.config import load_config
    from aisim.engine.spec import resolve
    from aisim.engine.workload import resolve_workload
    from aisim.traffic_trace import trace_traffic

    _write(tmp_path, [_row([1], timestamp=50), _row([2], timestamp=10), _row([3], timestamp=10)])
    cfg = (
        _config(tmp_path, "t.jsonl")
        .read_text()
        .replace("{type: trace_timestamps}", "{type: trace_timestamps, speedup: 4.0}")
    )
    (tmp_path / "cfg.yaml").write_text(cfg)
    cfg = load_config(str(tmp_path / "cfg.yaml"))
    traffic = trace_traffic(resolve(cfg), resolve_workload(cfg))
    np.testing.assert_array_equal(traffic.arrival_ms, [0.0, 0.0, 10.0])
    np.testing.assert_array_equal(traffic.row, [1, 2, 0])  # stable by timestamp


def test_cutoff_leaves_unfinished_requests_out(tmp_path: Path) -> None:
    from aisim.prediction import run_prediction

    _write(tmp_path, [_row([1], out=3), _row([2], out=200), _row([3], out=3, timestamp=500)])
    pred = run_prediction(
        str(_config(tmp_path, "t.jsonl", "{max_virtual_time_seconds: 0.1}")), capture=True
    )
    p = pred.prediction
    assert (p["num_requests"], p["completed_requests"]) == (2, 1)
    assert [r["session_id"] for r in pred.records] == ["request_1"]
    assert p["mean_itl_ms"] == pytest.approx(1.7)  # only the finished request's gaps


@pytest.mark.parametrize("fmt", ["agentic_mooncake", "weka", "applied_compute_agentic"])
def test_other_trace_formats_are_not_available(tmp_path: Path, fmt: str) -> None:
    from aisim.config import load_config, unsupported_features

    _write(tmp_path, [_row([1])])
    cfg = _config(tmp_path, "t.jsonl").read_text().replace("format: mooncake", f"format: {fmt}")
    (tmp_path / "cfg.yaml").write_text(cfg)
    lines = unsupported_features(load_config(str(tmp_path / "cfg.yaml")))
    assert lines and lines[0].startswith("traffic.source.format:")
