"""aisim compare: a prediction folder against a vllm bench result file (docs/vllm-bench.md).

The measured files are vLLM-format results of the same run with values scaled by known
factors, so every relative error and distribution figure is known in advance."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner

from aisim import cli_compare
from aisim.cli import main
from aisim.compare import (
    NOTE_DURATION,
    NOTE_ITL,
    NOTE_NEAREST,
    PER_REQUEST_ARRAYS,
    compare,
    ks_distance,
)
from aisim.errors import ConfigError
from aisim.output import vllm_bench as vb
from aisim.prediction import run_prediction
from tests.test_vllm_bench import STAGGERED, TTFT


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(run folder with records, the vLLM-format result of the same run)."""
    base = tmp_path_factory.mktemp("compare")
    cfg = base / "cfg.yaml"
    cfg.write_text(STAGGERED)
    out = base / "run"
    res = CliRunner().invoke(
        main, ["predict", "-c", str(cfg), "-o", str(out), "--capture-per-request"]
    )
    assert res.exit_code == 0, res.output
    pred = run_prediction(str(cfg), capture=True)
    return out, vb.result(pred, detailed=True, metrics=vb.METRICS, percentiles=(50, 99))


def _write(tmp_path: Path, doc, name: str = "measured.json") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def _perturbed(doc: dict) -> dict:
    m = dict(doc)
    m["duration"] = doc["duration"] * 1.25
    m["request_throughput"] = doc["request_throughput"] / 1.25
    m["mean_ttft_ms"] = doc["mean_ttft_ms"] * 0.8
    m["p99_tpot_ms"] = doc["p99_tpot_ms"] * 2.0
    m["ttfts"] = [t * 1.1 for t in doc["ttfts"]]
    return m


def _rows(d: dict) -> dict:
    return {r["metric"]: r for r in d["metrics"]}


def test_relative_errors_of_known_perturbations(run, tmp_path) -> None:
    folder, doc = run
    d = compare(folder, _write(tmp_path, _perturbed(doc)))
    rows = _rows(d)
    assert rows["duration"]["relative_error"] == pytest.approx(-0.2)
    assert rows["request_throughput"]["relative_error"] == pytest.approx(0.25)
    assert rows["mean_ttft_ms"]["relative_error"] == pytest.approx(0.25)
    assert rows["p99_tpot_ms"]["relative_error"] == pytest.approx(-0.5)
    for key in ("completed", "total_output_tokens", "median_ttft_ms", "p50_e2el_ms"):
        assert rows[key]["relative_error"] == 0.0, key
    assert rows["request_goodput"]["predicted"] == 25.0
    assert rows["max_concurrent_requests"]["measured"] == 3
    # with records, the predicted side has vLLM's definitions: no note but on the ITL rows
    assert {k for k, r in rows.items() if r["note"]} == {
        "mean_itl_ms",
        "median_itl_ms",
        "std_itl_ms",
        "p50_itl_ms",
        "p99_itl_ms",
    }
    assert rows["mean_itl_ms"]["note"] == NOTE_ITL


def test_distributions_side_by_side(run, tmp_path) -> None:
    folder, doc = run
    d = compare(folder, _write(tmp_path, _perturbed(doc)))
    ttft = d["distributions"]["ttft_ms"]
    assert (ttft["n_predicted"], ttft["n_measured"]) == (3, 3)
    assert [q["quantile"] for q in ttft["quantiles"]] == [10, 50, 90, 99]
    for q in ttft["quantiles"]:
        assert q["predicted"] == np.percentile(TTFT, q["quantile"])
        assert q["relative_error"] == pytest.approx(1 / 1.1 - 1)
    # ECDFs of 10/12/14 and 11/13.2/15.4 differ by 1/3 at most
    assert ttft["ks_distance"] == pytest.approx(1 / 3)
    assert d["distributions"]["e2el_ms"]["ks_distance"] == 0.0


def test_e2e_from_itls_when_latencies_are_missing(run, tmp_path) -> None:
    folder, doc = run
    m = {k: v for k, v in doc.items() if k != "latencies"}
    # vLLM's latency = TTFT + the chunk gaps; one gap per request here
    m["itls"] = [[lat - t] for lat, t in zip(doc["latencies"], doc["ttfts"], strict=True)]
    d = compare(folder, _write(tmp_path, m))
    assert d["distributions"]["e2el_ms"]["ks_distance"] == 0.0


def test_without_records_the_prediction_json_rows_carry_notes(run, tmp_path) -> None:
    folder, doc = run
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "prediction.json").write_bytes((folder / "prediction.json").read_bytes())
    d = compare(bare, _write(tmp_path, doc))
    rows = _rows(d)
    assert d["records"] is None and d["distributions"] == {}
    assert rows["duration"]["note"] == NOTE_DURATION
    assert rows["p99_ttft_ms"]["note"] == NOTE_NEAREST
    assert rows["mean_ttft_ms"]["note"] is None  # mean and std are vLLM's definitions
    assert rows["mean_ttft_ms"]["relative_error"] == 0.0
    assert "max_concurrent_requests" not in rows


def test_parquet_records_when_there_is_no_jsonl(run, tmp_path) -> None:
    folder, doc = run
    pq_only = tmp_path / "pq"
    pq_only.mkdir()
    for name in ("prediction.json", "requests.parquet"):
        (pq_only / name).write_bytes((folder / name).read_bytes())
    d = compare(pq_only, _write(tmp_path, doc))
    assert d["records"].endswith("requests.parquet")
    assert d["distributions"]["ttft_ms"]["ks_distance"] == 0.0


def test_ks_distance() -> None:
    assert ks_distance(np.array([1.0, 2.0]), np.array([1.0, 2.0])) == 0.0
    assert ks_distance(np.array([1.0, 2.0]), np.array([3.0, 4.0])) == 1.0
    assert ks_distance(np.array([1.0, 2.0, 3.0, 4.0]), np.array([2.5])) == 0.5


def _bad_cases(doc: dict) -> dict:
    short = dict(doc, ttfts=doc["ttfts"][:2])
    extra = {**doc, **{k: doc[k] + doc[k][:1] for k in PER_REQUEST_ARRAYS if k in doc}}
    return {
        "not-json": ("{oops", "not JSON (line 1"),
        "array": ("[1, 2]", "expected a JSON object, got list"),
        "no-completed": ({k: v for k, v in doc.items() if k != "completed"}, "'completed'"),
        "duration-text": (dict(doc, duration="fast"), "field 'duration': expected a number"),
        "other-count": (dict(doc, completed=4), "field 'completed' is 4"),
        "uneven-arrays": (short, "'input_lens' has 3 entries, 'ttfts' has 2"),
        "arrays-vs-count": (extra, "completed + failed is 3"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "not-json",
        "array",
        "no-completed",
        "duration-text",
        "other-count",
        "uneven-arrays",
        "arrays-vs-count",
    ],
)
def test_bad_measured_files(run, tmp_path, case) -> None:
    folder, doc = run
    content, message = _bad_cases(doc)[case]
    path = _write(tmp_path, content)
    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        compare(folder, path)
    assert str(path) in err.value.message and "\n" not in err.value.message
    _one_line_exit_2(folder, path, str(path))


def test_bad_run_folders(run, tmp_path) -> None:
    folder, doc = run
    measured = _write(tmp_path, doc)
    with pytest.raises(ConfigError, match="not a folder"):
        compare(tmp_path / "missing", measured)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match=r"prediction\.json: no such prediction"):
        compare(empty, measured)
    _one_line_exit_2(empty, measured, "prediction.json")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "prediction.json").write_text("{}")
    with pytest.raises(ConfigError, match="field 'completed_requests' is missing"):
        compare(broken, measured)
    with pytest.raises(ConfigError, match="no such vllm bench result"):
        compare(folder, tmp_path / "nope.json")


def test_records_missing_a_field(run, tmp_path) -> None:
    folder, doc = run
    bad = tmp_path / "badrec"
    bad.mkdir()
    (bad / "prediction.json").write_bytes((folder / "prediction.json").read_bytes())
    rows = [json.loads(x) for x in (folder / "requests.jsonl").read_text().splitlines()]
    del rows[1]["ttft_ms"]
    (bad / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ConfigError, match=r"requests.jsonl: line 2: field 'ttft_ms' is missing"):
        compare(bad, _write(tmp_path, doc))


def _group() -> click.Group:
    @click.group()
    def throwaway() -> None:
        pass

    cli_compare.register(throwaway)
    return throwaway


def _one_line_exit_2(folder: Path, measured: Path, named: str) -> None:
    res = CliRunner().invoke(_group(), ["compare", str(folder), str(measured)])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aisim: error: ") and named in lines[0]
    assert res.stdout == ""


def test_the_command_prints_a_table_or_json(run, tmp_path) -> None:
    folder, doc = run
    measured = _write(tmp_path, _perturbed(doc))
    table = CliRunner().invoke(_group(), ["compare", str(folder), str(measured)])
    assert table.exit_code == 0, table.output
    assert "mean_ttft_ms" in table.stdout and "+25.00 %" in table.stdout
    assert "ttft_ms per request" in table.stdout and f"[1] {NOTE_ITL}" in table.stdout
    as_json = CliRunner().invoke(
        _group(), ["compare", str(folder), str(measured), "--format", "json"]
    )
    assert as_json.exit_code == 0
    parsed = json.loads(as_json.stdout)
    assert parsed == json.loads(json.dumps(compare(folder, measured)))
