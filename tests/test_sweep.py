"""aisim sweep: grids, sweep YAML (product + zip), rows equal to lone runs (local and Ray),
failing points recorded, resume, hive-partitioned request tables."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from aisim.cli import main
from aisim.output.summary import column_value
from tests.analysis_configs import OP_LEVEL

HOST = ("wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s")
CONC = "traffic.load.concurrency"
CONC_COL = "traffic__load__concurrency"  # its sweep.parquet column
MBT = "engine.workers.aggregated.scheduler.max_batched_tokens"
MBT_COL = MBT.replace(".", "__")


def _base(tmp_path: Path) -> Path:
    cfg = tmp_path / "base.yaml"
    cfg.write_text(OP_LEVEL)
    return cfg


def _sweep(*args: str):
    res = CliRunner().invoke(main, ["sweep", *args])
    assert res.exit_code == 0, res.output
    return res


def _alone(tmp_path: Path, cfg: Path, overrides: list[str]) -> dict:
    out = tmp_path / ("alone-" + "-".join(o.split("=")[1] for o in overrides))
    args = ["predict", "-c", str(cfg), "-o", str(out), "--overwrite"]
    for o in overrides:
        args += ["--set", o]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    return json.loads((out / "prediction.json").read_text())


def _assert_row_is_prediction(table, row: dict, pred: dict) -> None:
    for k, v in pred.items():
        if k in HOST:
            assert k not in row
            continue
        got = column_value(table.schema.field(k), row[k])
        assert got == v and type(got) is type(v), k


def test_grid_rows_equal_lone_runs_and_failures_are_recorded(tmp_path: Path) -> None:
    cfg = _base(tmp_path)
    out = tmp_path / "sw"
    _sweep(
        "-c",
        str(cfg),
        "--grid",
        f"{CONC}=1,5,0",
        "--grid",
        f"{MBT}=512,1024",
        "-o",
        str(out),
        "--jobs",
        "2",
    )
    table = pq.read_table(out / "sweep.parquet")
    rows = table.to_pylist()
    assert [(r[CONC_COL], r[MBT_COL]) for r in rows] == [
        (1, 512),
        (1, 1024),
        (5, 512),
        (5, 1024),
        (0, 512),
        (0, 1024),
    ]
    assert table.schema.field(CONC_COL).type == "int64"
    assert [r["status"] for r in rows] == ["ok"] * 4 + ["error"] * 2
    assert "concurrency" in rows[-1]["error"] and rows[-1]["mean_ttft_ms"] is None
    for r in rows[:4]:
        pred = _alone(tmp_path, cfg, [f"{CONC}={r[CONC_COL]}", f"{MBT}={r[MBT_COL]}"])
        _assert_row_is_prediction(table, r, pred)
    meta = json.loads(table.schema.metadata[b"aisim"])
    assert meta["table"] == "sweep" and len(meta["optable_sha256"]) == 64
    for f in table.schema:
        if not f.nullable:
            assert table.column(f.name).null_count == 0, f.name


def test_rerun_skips_finished_points(tmp_path: Path, monkeypatch) -> None:
    import aisim.sweeps.run as run

    cfg = _base(tmp_path)
    out = tmp_path / "sw"
    _sweep("-c", str(cfg), "--grid", f"{CONC}=2,4", "-o", str(out), "--jobs", "1")
    first = pq.read_table(out / "sweep.parquet")
    ran = []
    real = run.run_point
    monkeypatch.setattr(run, "run_point", lambda t: ran.append(t["overrides"]) or real(t))
    _sweep("-c", str(cfg), "--grid", f"{CONC}=2,4,6", "-o", str(out), "--jobs", "1")
    assert ran == [[f"{CONC}=6"]]
    second = pq.read_table(out / "sweep.parquet")
    assert second.slice(0, 2).equals(first)


def test_sweep_yaml_product_and_zip_and_request_dataset(tmp_path: Path) -> None:
    cfg = _base(tmp_path)
    spec = tmp_path / "sweep.yaml"
    spec.write_text(f"""\
product:
  {CONC}: [2, 6]
zip:
  traffic.source.input_tokens: [128, 256]
  traffic.source.output_tokens: [16, 8]
""")
    out = tmp_path / "sw"
    _sweep(
        "-c",
        str(cfg),
        "--sweep-file",
        str(spec),
        "-o",
        str(out),
        "--jobs",
        "1",
        "--capture-per-request",
    )
    table = pq.read_table(out / "sweep.parquet")
    rows = table.to_pylist()
    assert [
        (r[CONC_COL], r["traffic__source__input_tokens"], r["traffic__source__output_tokens"])
        for r in rows
    ] == [(2, 128, 16), (2, 256, 8), (6, 128, 16), (6, 256, 8)]
    import pyarrow.dataset as ds

    dataset = ds.dataset(out / "requests", format="parquet", partitioning="hive")
    reqs = dataset.to_table()
    assert reqs.num_rows == 4 * 48
    assert set(reqs.column("point_id").to_pylist()) == {r["point_id"] for r in rows}
    duckdb = pytest.importorskip("duckdb", reason="duckdb comes with the [test] extra")
    joined = (
        duckdb.connect()
        .execute(f"""
        select any_value(s.point_index), avg(r.ttft_ms), any_value(s.mean_ttft_ms)
        from read_parquet('{out}/requests/*/*.parquet', hive_partitioning = true) r
        join '{out / "sweep.parquet"}' s using (point_id) group by point_id order by 1
        """)
        .fetchall()
    )
    assert [j[0] for j in joined] == [0, 1, 2, 3]
    swept = duckdb.sql(  # swept columns read without quoting
        f"select traffic__load__concurrency, traffic__source__input_tokens "
        f"from '{out / 'sweep.parquet'}' order by point_index"
    ).fetchall()
    assert swept == [(r[CONC_COL], r["traffic__source__input_tokens"]) for r in rows]
    for _, mean_req, mean_summary in joined:
        assert mean_req == pytest.approx(mean_summary, rel=1e-12)


def test_bad_sweep_input_is_one_line(tmp_path: Path) -> None:
    cfg = _base(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("zip:\n  a.b: [1, 2]\n  c.d: [1]\n")
    for args in (["--grid", "traffic.load.concurrency"], ["--sweep-file", str(bad)], []):
        res = CliRunner().invoke(main, ["sweep", "-c", str(cfg), "-o", str(tmp_path / "x"), *args])
        assert res.exit_code == 2, res.output
        assert res.output.count("\n") == 1 and "Traceback" not in res.output
    assert not (tmp_path / "x" / "sweep.parquet").exists()


def test_shared_memo_gives_the_same_rows(tmp_path: Path) -> None:
    """Points run one after the other in one process share the pass-time memo (the later
    points start from the prices the earlier ones cached); every row stays exact."""
    import aisim
    from aisim.sweeps import point

    cfg = _base(tmp_path)
    point._MEMOS.clear()
    seqs = "engine.workers.aggregated.scheduler.max_sequences"
    table = aisim.sweep(str(cfg), {seqs: [64, 4, 64]}, jobs=1)
    assert len(point._MEMOS["plans"]) == 1  # scheduler limits do not enter the plan
    assert len(point._MEMOS["memos"]) == 1  # one plan, one memo for the three points
    lone = [aisim.predict(str(cfg), overrides=[f"{seqs}={v}"]) for v in (64, 4, 64)]
    assert table.column("prediction_sha256").to_pylist() == [r.prediction_sha256 for r in lone]


def test_disaggregated_points_share_memos_per_role(tmp_path: Path) -> None:
    """A P/D sweep shares pass-time memos too, one per plan and pool role (each pool sums its
    own phases for the energy report); every row equals its lone run."""
    import aisim
    from aisim.sweeps import point
    from tests.analysis_configs import PD_OP_LEVEL

    cfg = tmp_path / "pd.yaml"
    cfg.write_text(PD_OP_LEVEL)
    point._MEMOS.clear()
    table = aisim.sweep(str(cfg), {CONC: [6, 2, 6]}, jobs=1)
    assert len(point._MEMOS["plans"]) == 1  # both pools run the same deployment
    assert sorted(role for _, role in point._MEMOS["memos"]) == ["decode", "prefill"]
    lone = [aisim.predict(str(cfg), overrides=[f"{CONC}={v}"]) for v in (6, 2, 6)]
    assert table.column("prediction_sha256").to_pylist() == [r.prediction_sha256 for r in lone]


def test_a_path_swept_twice_is_refused() -> None:
    from aisim.errors import ConfigError
    from aisim.sweeps.grid import expand

    with pytest.raises(ConfigError, match="swept twice"):
        expand([((CONC, [1]),), ((CONC, [2]),)])


ray_missing = pytest.mark.skipif(
    __import__("importlib").util.find_spec("ray") is None,
    reason="Ray is not installed: pip install -e '.[ray]' (CI installs it with [test])",
)


@ray_missing
def test_ray_executor_rows_are_byte_identical(tmp_path: Path) -> None:
    cfg = _base(tmp_path)
    local, remote = tmp_path / "local", tmp_path / "ray"
    _sweep("-c", str(cfg), "--grid", f"{CONC}=1,4,0", "-o", str(local), "--jobs", "2")
    _sweep("-c", str(cfg), "--grid", f"{CONC}=1,4,0", "-o", str(remote), "--executor", "ray")
    a = pq.read_table(local / "sweep.parquet")
    b = pq.read_table(remote / "sweep.parquet")
    assert a.equals(b, check_metadata=True)
    assert a.to_pylist() == b.to_pylist()
    pred = _alone(tmp_path, cfg, [f"{CONC}=4"])
    _assert_row_is_prediction(b, b.to_pylist()[1], pred)


def test_progress_bar_only_on_a_terminal() -> None:
    import io

    from aisim.sweeps.progress import Progress

    quiet = io.StringIO()
    p = Progress(4, stream=quiet)  # StringIO is not a terminal
    p.advance()
    p.close()
    assert quiet.getvalue() == ""
    shown = io.StringIO()
    p = Progress(4, stream=shown, enabled=True)
    p.advance()
    p.advance(ok=False)
    p.close()
    text = shown.getvalue()
    assert "2/4 points, 1 failed" in text and "ETA" in text and text.endswith("\n")
