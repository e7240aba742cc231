"""requests / passes / summary parquet: declared schema, no nulls where not nullable, metadata,
readable by pyarrow and DuckDB; pass capture changes no prediction field."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from aisim.cli import main
from aisim.output.passes import PASSES_SCHEMA
from aisim.output.schema import REQUESTS_SCHEMA
from tests.analysis_configs import OP_LEVEL, PD_OP_LEVEL, PRESSURE

HOST = ("wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s")


def _predict(tmp_path: Path, text: str, name: str, *flags: str) -> Path:
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(text)
    out = tmp_path / name
    res = CliRunner().invoke(main, ["predict", "-c", str(cfg), "-o", str(out), *flags])
    assert res.exit_code == 0, res.output
    return out


def _check_table(path: Path, table_name: str, declared=None):
    table = pq.read_table(path)
    if declared is not None:
        assert table.schema.equals(declared, check_metadata=False)
        for f in declared:  # units and meaning travel with the file
            assert table.schema.field(f.name).metadata == f.metadata
    for f in table.schema:
        assert f.metadata and f.metadata.get(b"unit") and f.metadata.get(b"doc"), f.name
        if not f.nullable:
            assert table.column(f.name).null_count == 0, f.name
        assert f.name not in HOST
    meta = json.loads(table.schema.metadata[b"aisim"])
    assert meta["table"] == table_name
    assert meta["schema_version"] and meta["aisim_version"]
    assert len(meta["config_sha256"]) == 64
    assert "optable_sha256" in meta
    return table, meta


@pytest.mark.parametrize("text", [OP_LEVEL, PRESSURE], ids=["op-level", "kv-pressure-dp"])
def test_parquet_files_schema_and_metadata(tmp_path: Path, text: str) -> None:
    out = _predict(tmp_path, text, "run", "--capture-per-request", "--capture-passes")
    pred = json.loads((out / "prediction.json").read_text())
    requests, meta = _check_table(out / "requests.parquet", "requests", REQUESTS_SCHEMA)
    assert requests.num_rows == pred["num_requests"]
    passes, pmeta = _check_table(out / "passes.parquet", "passes", PASSES_SCHEMA)
    summary, smeta = _check_table(out / "summary.parquet", "summary")
    assert meta["config_sha256"] == pmeta["config_sha256"] == smeta["config_sha256"]
    if "op_level" in text:
        assert len(meta["optable_sha256"]) == 64
    # the summary row holds the prediction.json values exactly
    row = summary.to_pylist()[0]
    for k, v in pred.items():
        if k in HOST or k == "per_request":
            continue
        got = json.loads(row[k]) if isinstance(v, dict | list) else row[k]
        assert got == v and type(got) is type(v), k
    # passes agree with the run's own totals
    cols = passes.to_pydict()
    assert sum(cols["prefill_tokens"]) == pred["committed_prefill_tokens"]
    assert all(s <= e for s, e in zip(cols["start_ms"], cols["end_ms"], strict=True))
    assert max(cols["end_ms"]) == pytest.approx(pred["duration_ms"], rel=1e-12)
    for n_p, n_d, tok in zip(
        cols["num_prefill"], cols["num_decode"], cols["tokens_scheduled"], strict=True
    ):
        assert tok >= n_d and n_p + n_d > 0
    if text is PRESSURE:
        assert sum(cols["preemptions"]) > 0
        assert set(cols["rank"]) == {0, 1, 2, 3} and set(cols["worker"]) == {0, 1}
        assert max(cols["kv_blocks_used"]) <= 30


def test_duckdb_reads_every_table(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb", reason="duckdb comes with the [test] extra")
    out = _predict(tmp_path, OP_LEVEL, "run", "--capture-per-request", "--capture-passes")
    con = duckdb.connect()
    n_req = con.execute(
        f"select count(*), count(ttft_ms) from '{out / 'requests.parquet'}'"
    ).fetchone()
    assert n_req == (48, 48)
    kinds = dict(
        con.execute(
            f"select column_name, column_type from (describe select * from "
            f"'{out / 'passes.parquet'}')"
        ).fetchall()
    )
    assert kinds["start_ms"] == "DOUBLE" and kinds["num_decode"] == "INTEGER"
    (tokens,) = con.execute(
        f"select sum(prefill_tokens) from '{out / 'passes.parquet'}'"
    ).fetchone()
    (ttft,) = con.execute(f"select mean_ttft_ms from '{out / 'summary.parquet'}'").fetchone()
    pred = json.loads((out / "prediction.json").read_text())
    assert tokens == pred["committed_prefill_tokens"]
    assert ttft == pred["mean_ttft_ms"]


@pytest.mark.parametrize("text", [OP_LEVEL, PRESSURE], ids=["op-level", "kv-pressure-dp"])
def test_capture_passes_changes_no_prediction(tmp_path: Path, text: str) -> None:
    plain = _predict(tmp_path, text, "plain")
    captured = _predict(tmp_path, text, "captured", "--capture-passes")
    assert (plain / "prediction.sha256").read_text() == (captured / "prediction.sha256").read_text()
    assert not (plain / "passes.parquet").exists()


def test_pass_capture_grows_when_the_estimate_is_short(monkeypatch) -> None:
    import aisim.engine.driver as driver
    from aisim.api import predict

    full = predict(PRESSURE, capture_passes=True)
    monkeypatch.setattr(driver, "pass_rows_estimate", lambda spec, traffic: 3)
    short = predict(PRESSURE, capture_passes=True)
    assert short.prediction_sha256 == full.prediction_sha256
    assert short.passes.equals(full.passes)


def test_disaggregated_passes_hold_both_pools(tmp_path: Path) -> None:
    """P/D --capture-passes: one table of both pools' passes, told apart by the role column."""
    plain = _predict(tmp_path, PD_OP_LEVEL, "plain")
    out = _predict(tmp_path, PD_OP_LEVEL, "run", "--capture-passes")
    assert (plain / "prediction.sha256").read_text() == (out / "prediction.sha256").read_text()
    pred = json.loads((out / "prediction.json").read_text())
    passes, _ = _check_table(out / "passes.parquet", "passes", PASSES_SCHEMA)
    cols = passes.to_pydict()
    roles = cols["role"]
    assert set(roles) == {"prefill", "decode"}
    prefill = [i for i, r in enumerate(roles) if r == "prefill"]
    decode = [i for i, r in enumerate(roles) if r == "decode"]
    # the prefill pool computes every prompt token; the decode pool (no KV pressure) none
    assert sum(cols["prefill_tokens"][i] for i in prefill) == pred["committed_prefill_tokens"]
    assert sum(cols["prefill_tokens"][i] for i in decode) == 0
    assert {cols["worker"][i] for i in decode} == {0, 1}
    assert max(cols["end_ms"][i] for i in decode) == pytest.approx(pred["duration_ms"], rel=1e-12)
    # a decode pass emits one token per decoding request; the prefill side's first token is
    # internal, so the decode pool emits every reported token
    assert sum(cols["num_decode"][i] for i in decode) == pred["total_output_tokens"]


def test_disaggregated_pass_capture_grows_when_the_estimate_is_short(monkeypatch) -> None:
    import aisim.engine.driver as driver
    from aisim.api import predict

    full = predict(PD_OP_LEVEL, capture_passes=True)
    monkeypatch.setattr(driver, "pass_rows_estimate", lambda spec, traffic: 2)
    short = predict(PD_OP_LEVEL, capture_passes=True)
    assert short.prediction_sha256 == full.prediction_sha256
    assert short.passes.equals(full.passes)


def test_capture_passes_needs_output_dir(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(OP_LEVEL)
    res = CliRunner().invoke(main, ["predict", "-c", str(cfg), "--capture-passes"])
    assert res.exit_code == 2
    assert "--output-dir" in res.output


def test_summary_parquet_only_when_asked(tmp_path: Path) -> None:
    """A plain prediction skips pyarrow; --summary-parquet (or a capture flag) writes it."""
    plain = _predict(tmp_path, OP_LEVEL, "plain")
    assert not (plain / "summary.parquet").exists()
    asked = _predict(tmp_path, OP_LEVEL, "asked", "--summary-parquet")
    summary, _ = _check_table(asked / "summary.parquet", "summary")
    pred = json.loads((asked / "prediction.json").read_text())
    assert summary.column("mean_ttft_ms")[0].as_py() == pred["mean_ttft_ms"]
