"""CLI behaviour: outputs, overwrite, json summary, and bad input (exit 2, one line, no files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from aisim.cli import main

BASE = """\
traffic:
  source: {type: synthetic, input_tokens: 64, output_tokens: 8}
  load: {type: concurrency, concurrency: 4}
  stop: {requests: 12}
engine:
  mode: aggregated
  model: Qwen/Qwen3-32B
  hardware: b200_sxm
  backend: vllm
  workers:
    aggregated:
      parallelism: {replicas: 1, tensor: 4}
      scheduler: {max_batched_tokens: 256, max_sequences: 8}
      kv_cache: {block_size: 16, prefix_caching: true, capacity: {type: fixed, blocks: 200}}
      timing: {type: fixed, prefill_ms: 7.3, decode_ms: 1.7}
"""


def _run(tmp_path: Path, text: str, *args: str):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(text)
    return CliRunner().invoke(main, ["predict", "-c", str(cfg), *args])


def test_predict_writes_outputs_and_hash(tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = _run(
        tmp_path, BASE, "--output-dir", str(out), "--format", "json", "--capture-per-request"
    )
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    pred = json.loads((out / "prediction.json").read_text())
    assert pred["completed_requests"] == 12
    assert summary["prediction_sha256"] == (out / "prediction.sha256").read_text().strip()
    assert len((out / "requests.jsonl").read_text().splitlines()) == 12
    import pyarrow.parquet as pq

    table = pq.read_table(out / "requests.parquet")
    assert table.num_rows == 12
    assert table.schema.field("ttft_ms").metadata[b"unit"] == b"ms"
    assert b"aisim" in table.schema.metadata


def test_same_config_gives_identical_files(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        res = _run(tmp_path, BASE, "-o", str(out), "--capture-per-request")
        assert res.exit_code == 0, res.output
    for name in ("requests.jsonl", "requests.parquet", "prediction.sha256"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_existing_outputs_need_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert _run(tmp_path, BASE, "-o", str(out)).exit_code == 0
    res = _run(tmp_path, BASE, "-o", str(out))
    assert res.exit_code == 2 and "--overwrite" in res.stderr
    assert _run(tmp_path, BASE, "-o", str(out), "--overwrite").exit_code == 0


def test_set_override_changes_result(tmp_path: Path) -> None:
    res = _run(tmp_path, BASE, "--format", "json", "--set", "traffic.stop.requests=5")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["completed_requests"] == 5


def test_no_completed_request_exits_1_with_outputs(tmp_path: Path) -> None:
    text = BASE.replace("backend: vllm", "backend: vllm\n  context_length: 64")
    out = tmp_path / "out"
    res = _run(tmp_path, text, "-o", str(out))
    assert res.exit_code == 1
    assert json.loads((out / "prediction.json").read_text())["completed_requests"] == 0


BAD = [
    ("traffic.load.concurrency", ["--set", "traffic.load.concurrency=0"]),
    ("traffic.load.concurrency", ["--set", "traffic.load.concurrency=-3"]),
    ("traffic.load.concurrency", ["--set", "traffic.load.concurrency=2.5"]),
    ("traffic.load.concurrency", ["--set", "traffic.load.concurrency='4'"]),
    ("traffic.source.input_tokens", ["--set", "traffic.source.input_tokens=0"]),
    ("traffic.source.output_tokens", ["--set", "traffic.source.output_tokens=true"]),
    ("traffic.source.cached_prefix_tokens", ["--set", "traffic.source.cached_prefix_tokens=100"]),
    ("traffic.source.type", ["--set", "traffic.source.type=synthetc"]),
    ("traffic.load", ["--set", "traffic.load.type=poison"]),
    ("traffic.load", ["--set", "traffic.load.requests_per_second=3"]),
    ("traffic.stop", ["--set", "traffic.stop={}"]),
    ("traffic.stop", ["--set", "traffic.stop={requests: 3, requests_per_load_unit: 2}"]),
    ("trafic", ["--set", "trafic.x=1"]),
    ("engine.backend", ["--set", "engine.backend=tensorrt"]),
    ("engine.hardware", ["--set", "engine.hardware=l4"]),
    ("engine.model", ["--set", "engine.model=nobody/NoModel-1B"]),
    ("engine.nextn", ["--set", "engine.nextn=2"]),
    ("engine.nextn_accepted", ["--set", "engine.nextn_accepted=1.5"]),
    ("engine.kv_transfer", ["--set", "engine.kv_transfer={bandwidth_gb_per_second: 400.0}"]),
    ("engine.workers", ["--set", "engine.mode=disaggregated"]),
    (
        "engine.workers.aggregated.kv_cache.block_size",
        ["--set", "engine.workers.aggregated.kv_cache.block_size=1"],
    ),
    (
        "engine.workers.aggregated.kv_cache.capacity",
        ["--set", "engine.workers.aggregated.kv_cache.capacity={type: fixed}"],
    ),
    (
        "engine.workers.aggregated.kv_cache.capacity.blocks",
        ["--set", "engine.workers.aggregated.kv_cache.capacity.blocks=-1"],
    ),
    (
        "engine.workers.aggregated.scheduler.max_sequences",
        ["--set", "engine.workers.aggregated.scheduler.max_sequences=0"],
    ),
    (
        "engine.workers.aggregated.scheduler.max_batchd_tokens",
        ["--set", "engine.workers.aggregated.scheduler.max_batchd_tokens=64"],
    ),
    (
        "engine.workers.aggregated.timing",
        ["--set", "engine.workers.aggregated.timing={type: fixd}"],
    ),
    (
        "engine.workers.aggregated.timing.prefill_ms",
        ["--set", "engine.workers.aggregated.timing.prefill_ms=-1"],
    ),
    (
        "engine.workers.aggregated.parallelism.tensor",
        ["--set", "engine.workers.aggregated.parallelism.tensor=3"],
    ),
    (
        "engine.workers.aggregated.kv_cache.capacity.blocks",
        ["--set", "engine.workers.aggregated.kv_cache.capacity.blocks=4"],
    ),
    ("--set", ["--set", "traffic.load.concurrency"]),
]


@pytest.mark.parametrize(("path", "args"), BAD, ids=[f"{i}-{p}" for i, (p, _) in enumerate(BAD)])
def test_bad_input_exit_2_one_line_no_files(tmp_path: Path, path: str, args: list[str]) -> None:
    out = tmp_path / "out"
    res = _run(tmp_path, BASE, "-o", str(out), *args)
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert path in lines[0], lines[0]
    assert "Traceback" not in res.output
    assert not out.exists() or not any(out.iterdir())


def test_duplicate_yaml_key_is_an_error(tmp_path: Path) -> None:
    text = BASE.replace("  stop: {requests: 12}", "  stop: {requests: 12}\n  stop: {requests: 3}")
    res = _run(tmp_path, text)
    assert res.exit_code == 2 and "stop" in res.stderr


def test_missing_config_file(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["predict", "-c", str(tmp_path / "nope.yaml")])
    assert res.exit_code == 2


OP_LEVEL = BASE.replace(
    "timing: {type: fixed, prefill_ms: 7.3, decode_ms: 1.7}", "timing: {type: default}"
)


def test_op_level_timing_runs_from_the_shipped_table(tmp_path: Path) -> None:
    res = _run(tmp_path, OP_LEVEL, "--format", "json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    prov = out["prediction_provenance"]["aggregated"]
    assert prov["estimator"] == "op_level" and prov["data_version"] == "0.24.0"
    assert out["completed_requests"] == 12 and out["mean_ttft_ms"] > 0


def test_op_level_timing_for_moe_needs_matching_moe_parallelism(tmp_path: Path) -> None:
    text = OP_LEVEL.replace("Qwen/Qwen3-32B", "Qwen/Qwen3-30B-A3B")
    res = _run(tmp_path, text)  # tensor 4, moe_tensor x moe_expert 1
    assert res.exit_code == 2
    assert "engine.workers.aggregated.timing" in res.stderr
    assert "must equal moe_tensor x moe_expert" in res.stderr and "Traceback" not in res.stderr


def test_op_level_timing_runs_for_moe_models(tmp_path: Path) -> None:
    text = OP_LEVEL.replace("Qwen/Qwen3-32B", "Qwen/Qwen3-30B-A3B").replace(
        "tensor: 4", "tensor: 4, moe_expert: 4"
    )
    res = _run(tmp_path, text, "--format", "json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["completed_requests"] == 12 and out["mean_ttft_ms"] > 0
