"""The vLLM bench format on the command line (predict --format vllm-bench, vllm_bench.json)
and `aisim compare` registered on the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from aisim.cli import main

CONFIG = """\
traffic:
  source: {type: synthetic, input_tokens: 64, output_tokens: 8}
  load: {type: concurrency, concurrency: 16}
  stop: {requests: 200}
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


def _cli(tmp_path: Path, *args: str):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(CONFIG)
    return CliRunner().invoke(main, [*(a.replace("CFG", str(cfg)) for a in args)])


def test_vllm_bench_format_prints_and_writes_the_result(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = _cli(
        tmp_path,
        "predict",
        "-c",
        "CFG",
        "-o",
        str(out),
        "--format",
        "vllm-bench",
        "--metric-percentiles",
        "50,90",
        "--capture-per-request",
    )
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("============ Serving Benchmark Result ============")
    doc = json.loads((out / "vllm_bench.json").read_text())
    assert doc["completed"] == 200 and doc["failed"] == 0 and doc["max_concurrency"] == 16
    assert "p50_ttft_ms" in doc and "p90_tpot_ms" in doc and "p99_ttft_ms" not in doc
    ttft_ms = np.asarray(doc["ttfts"]) * 1000.0  # --save-detailed arrays, in seconds
    assert doc["p90_ttft_ms"] == pytest.approx(np.percentile(ttft_ms, 90), rel=1e-12)
    assert f"{'P90 TTFT (ms):':<40} {doc['p90_ttft_ms']:<10.2f}" in res.stdout
    assert (out / "requests.jsonl").exists()  # asked for, so written
    pred = json.loads((out / "prediction.json").read_text())
    assert doc["total_output_tokens"] == pred["total_output_tokens"]


def test_vllm_bench_without_capture_writes_no_request_files(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = _cli(tmp_path, "predict", "-c", "CFG", "-o", str(out), "--format", "vllm-bench")
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == [
        "prediction.json",
        "prediction.sha256",
        "vllm_bench.json",
    ]
    assert "ttfts" not in json.loads((out / "vllm_bench.json").read_text())


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--metric-percentiles", "99"], "--metric-percentiles: only with --format vllm-bench"),
        (["--format", "vllm-bench", "--metric-percentiles", "0,x"], "expected comma-separated"),
        (["--format", "vllm-bench", "--metric-percentiles", "120"], "in (0, 100]"),
    ],
)
def test_bad_percentiles_exit_2(tmp_path: Path, args, words: str) -> None:
    res = _cli(tmp_path, "predict", "-c", "CFG", "-o", str(tmp_path / "o"), *args)
    assert res.exit_code == 2 and words in res.output
    assert not (tmp_path / "o").exists()


def test_compare_is_a_command_and_agrees_with_its_own_prediction(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = _cli(
        tmp_path,
        "predict",
        "-c",
        "CFG",
        "-o",
        str(out),
        "--format",
        "vllm-bench",
        "--capture-per-request",
    )
    assert res.exit_code == 0, res.output
    res = _cli(tmp_path, "compare", str(out), str(out / "vllm_bench.json"), "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    errors = {json.dumps(v) for v in _errors(doc)}
    assert errors and errors <= {"0.0", "-0.0"}
    (tmp_path / "bad.json").write_text("[1, 2]")
    res = _cli(tmp_path, "compare", str(out), str(tmp_path / "bad.json"))
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1


def _errors(doc):
    for row in doc["metrics"]:
        if row.get("relative_error") is not None and row["metric"] != "max_concurrent_requests":
            yield row["relative_error"]


def test_compare_reads_the_runs_own_vllm_bench_file(tmp_path: Path) -> None:
    """Without per-request records the run folder's vllm_bench.json (vLLM's definitions)
    stands in for prediction.json's nearest-rank and per-token ITL figures."""
    out = tmp_path / "run"
    res = _cli(tmp_path, "predict", "-c", "CFG", "-o", str(out), "--format", "vllm-bench")
    assert res.exit_code == 0, res.output
    assert not (out / "requests.jsonl").exists()
    res = _cli(tmp_path, "compare", str(out), str(out / "vllm_bench.json"), "--format", "json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)["metrics"]
    assert {r["metric"] for r in rows} >= {"p99_itl_ms", "median_ttft_ms", "duration"}
    for row in rows:
        if row["metric"] != "max_concurrent_requests":
            assert row["relative_error"] in (0.0, -0.0, None), row
            assert row["note"] is None, row
