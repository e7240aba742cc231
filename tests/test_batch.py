"""aisim predict over many configs: expansion of -c, one batch.parquet row per config equal
to predicting it alone, failures recorded, resume, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from aisim.cli import main
from aisim.errors import AisimError
from aisim.sweeps.batch import expand_configs, is_batch

CONFIG = """\
traffic:
  source: {type: synthetic, input_tokens: 64, output_tokens: 8}
  load: {type: concurrency, concurrency: CONC}
  stop: {requests: 40}
engine:
  mode: aggregated
  model: MODEL
  hardware: b200_sxm
  backend: vllm
  workers:
    aggregated:
      parallelism: {replicas: 1, tensor: 4}
      scheduler: {max_batched_tokens: 256, max_sequences: 8}
      kv_cache: {block_size: 16, prefix_caching: true, capacity: {type: fixed, blocks: 200}}
      timing: {type: fixed, prefill_ms: 7.3, decode_ms: 1.7}
"""


def _configs(folder: Path) -> list[Path]:
    folder.mkdir()
    out = []
    for name, conc, model in (
        ("a.yaml", 4, "Qwen/Qwen3-32B"),
        ("b.yaml", 32, "Qwen/Qwen3-32B"),
        ("c.yaml", 4, "nobody/none"),
    ):
        path = folder / name
        path.write_text(CONFIG.replace("CONC", str(conc)).replace("MODEL", model))
        out.append(path)
    (folder / "notes.txt").write_text("not a config")
    return out


def _predict(*args: str):
    return CliRunner().invoke(main, ["predict", *args])


def test_expansion_of_files_folders_and_globs(tmp_path: Path) -> None:
    a, b, c = _configs(tmp_path / "cfg")
    assert expand_configs((str(tmp_path / "cfg"),)) == [a, b, c]
    assert expand_configs((str(b), str(tmp_path / "cfg" / "*.yaml"))) == [b, a, c]
    assert is_batch((str(a), str(b))) and is_batch((str(tmp_path / "cfg"),))
    assert is_batch((str(tmp_path / "*.yaml"),)) and not is_batch((str(a),))
    for bad, words in (
        (tmp_path / "none.yaml", "config file not found"),
        (tmp_path / "cfg" / "*.yml", "matches no file"),
    ):
        with pytest.raises(AisimError, match=words):
            expand_configs((str(bad),))
    (tmp_path / "empty").mkdir()
    with pytest.raises(AisimError, match=r"holds no \.yaml"):
        expand_configs((str(tmp_path / "empty"),))


def test_batch_rows_equal_single_predictions_and_failures_are_recorded(tmp_path: Path) -> None:
    a, b, c = _configs(tmp_path / "cfg")
    out = tmp_path / "out"
    res = _predict("-c", str(tmp_path / "cfg"), "-o", str(out), "-j", "2")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].split()[:3] == ["config", "TTFT", "mean"]
    assert lines[-2] == "3 configs, 1 failed"
    assert any(line.startswith("c.yaml") and "unknown model" in line for line in lines)
    rows = pq.read_table(out / "batch.parquet").to_pylist()
    assert [r["config"] for r in rows] == [str(a), str(b), str(c)]
    assert [r["status"] for r in rows] == ["ok", "ok", "error"]
    assert "engine.model" in rows[2]["error"] and rows[2]["mean_ttft_ms"] is None
    for row, path in zip(rows[:2], (a, b), strict=True):
        alone = _predict("-c", str(path), "-o", str(tmp_path / path.stem))
        assert alone.exit_code == 0, alone.output
        pred = json.loads((tmp_path / path.stem / "prediction.json").read_text())
        digest = (tmp_path / path.stem / "prediction.sha256").read_text().strip()
        assert row["prediction_sha256"] == digest
        assert row["mean_ttft_ms"] == pred["mean_ttft_ms"]
        assert row["completed_requests"] == pred["completed_requests"] == 40
    assert rows[0]["mean_ttft_ms"] < rows[1]["mean_ttft_ms"]  # 32 users queue, 4 do not


def test_batch_resumes_from_finished_configs_and_prints_json(tmp_path: Path) -> None:
    _configs(tmp_path / "cfg")
    out = tmp_path / "out"
    pattern = str(tmp_path / "cfg" / "[ab].yaml")
    assert _predict("-c", pattern, "-o", str(out)).exit_code == 0
    first = (out / "batch.parquet").read_bytes()
    points = sorted((out / "points").glob("*.json"))
    assert len(points) == 2
    points[0].unlink()
    res = _predict("-c", pattern, "-o", str(out), "--format", "json")
    assert res.exit_code == 0, res.output
    assert (out / "batch.parquet").read_bytes() == first
    rows = json.loads(res.stdout.strip().splitlines()[-1])
    assert [Path(r["config"]).name for r in rows] == ["a.yaml", "b.yaml"]
    assert all(r["status"] == "ok" for r in rows)


def test_every_config_failing_exits_1(tmp_path: Path) -> None:
    _configs(tmp_path / "cfg")
    res = _predict("-c", str(tmp_path / "cfg" / "c.yaml"), "-c", str(tmp_path / "cfg" / "c.yaml"))
    assert res.exit_code == 1
    assert "every config failed" in res.output


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--capture-passes", "-o", "OUT"], "--capture-passes: one config at a time"),
        (["--summary-parquet", "-o", "OUT"], "--summary-parquet: one config at a time"),
        (["--format", "aiperf"], "--format aiperf: one config at a time"),
        (["--capture-per-request"], "--capture-per-request needs --output-dir"),
    ],
)
def test_batch_refuses_single_run_options(tmp_path: Path, extra, words: str) -> None:
    _configs(tmp_path / "cfg")
    extra = [str(tmp_path / "o") if e == "OUT" else e for e in extra]
    res = _predict("-c", str(tmp_path / "cfg"), *extra)
    assert res.exit_code == 2, res.output
    assert words in res.output and len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_jobs_needs_a_batch(tmp_path: Path) -> None:
    a, _, _ = _configs(tmp_path / "cfg")
    res = _predict("-c", str(a), "-j", "2")
    assert res.exit_code == 2 and "--jobs: runs the configs of a batch" in res.output
