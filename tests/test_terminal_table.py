"""The terminal summaries: the default one in vLLM bench's order within 80 columns, the
AISimulate table under --format aiperf, and requests.parquet's vLLM-named tpot_ms."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
from click.testing import CliRunner

from aisim.cli import main
from aisim.output.table import render_summary

CONFIG = """\
traffic:
  source: {type: synthetic, input_tokens: 64, output_tokens: 8}
  load: {type: concurrency, concurrency: 4}
  stop: {requests: 1200}
engine:
  mode: aggregated
  model: Qwen/Qwen3-32B
  hardware: b200_sxm
  backend: vllm
  workers:
    aggregated:
      parallelism: {replicas: 2, tensor: 4, pipeline: 2}
      scheduler: {max_batched_tokens: 256, max_sequences: 8}
      kv_cache: {block_size: 16, prefix_caching: true, capacity: {type: fixed, blocks: 200}}
      timing: {type: fixed, prefill_ms: 7.3, decode_ms: 1.7}
"""


def _predict(tmp_path: Path, *args: str, text: str = CONFIG):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(text)
    return CliRunner().invoke(main, ["predict", "-c", str(cfg), *args])


def test_default_table_reads_like_vllm_bench_in_80_columns(tmp_path: Path) -> None:
    res = _predict(tmp_path, "-o", str(tmp_path / "out"))
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert max(len(line) for line in lines if not line.startswith("Saved")) <= 80
    assert lines[-2].startswith("sha256 ")
    assert lines[0] == "aisim | Qwen/Qwen3-32B | b200_sxm | vllm | aggregated TP4 PP2 x2"
    assert lines[1].split() == ["ms", "mean", "median", "p90", "p99"]
    assert [line.split()[0] for line in lines[3:7]] == ["TTFT", "TPOT", "ITL", "E2E"]
    pred = json.loads((tmp_path / "out" / "prediction.json").read_text())
    tpot = lines[4].split()[1:]
    assert tpot == [f"{pred[f'{s}_tpot_ms']:,.2f}" for s in ("mean", "median", "p90", "p99")]
    assert "Successful requests:             1,200" in lines  # a count, not 1,200.00
    assert f"Duration (s):                    {pred['duration_ms'] / 1000:,.2f}" in lines
    assert not any("Goodput" in line for line in lines)


def test_goodput_rows_appear_with_an_sla(tmp_path: Path) -> None:
    text = (
        CONFIG.replace("concurrency: 4", "concurrency: 32")
        + "evaluation:\n  sla: {ttft_ms: 20.0}\n"
    )
    res = _predict(tmp_path, "-o", str(tmp_path / "out"), text=text)
    assert res.exit_code == 0, res.output
    pred = json.loads((tmp_path / "out" / "prediction.json").read_text())
    met = pred["goodput_completed_requests"]
    assert 0 < met < 1200
    assert f"Requests meeting the SLA:          {met:,d}" in res.stdout.splitlines()
    assert "Goodput (req/s):" in res.stdout


def test_aiperf_format_keeps_aisimulates_table(tmp_path: Path) -> None:
    res = _predict(tmp_path, "--format", "aiperf")
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("aisim | LLM Metrics")
    assert "Time to Second Token (ms)" in res.stdout


def test_a_missing_statistic_reads_na() -> None:
    text = render_summary({"mean_ttft_ms": 1.5, "completed_requests": 3}, "m")
    assert text.splitlines()[3].split() == ["TTFT", "1.50", "N/A", "N/A", "N/A"]
    assert "Successful requests:" in text and "Request throughput" not in text


def test_requests_parquet_names_the_per_request_tpot(tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = _predict(tmp_path, "-o", str(out), "--capture-per-request")
    assert res.exit_code == 0, res.output
    table = pq.read_table(out / "requests.parquet")
    assert "itl_ms" not in table.column_names
    rows = table.to_pylist()
    jsonl = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    by_index = {int(r["session_id"].split("_")[-1]): r for r in jsonl}
    for row in rows:
        rec = by_index[row["request_index"]]
        want = (rec["last_token_ms"] - rec["first_token_ms"]) / (rec["output_length"] - 1)
        assert row["tpot_ms"] == rec["itl_ms"] == want
    assert b'"schema_version": "3"' in table.schema.metadata[b"aisim"]
