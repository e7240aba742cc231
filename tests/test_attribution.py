"""Latency attribution (docs/attribution.md): every completed request's parts add up to its TTFT
and E2E in every mode, agree with the record's own timestamps, and match hand-derived passes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from aisim.cli import main
from aisim.output.attribution import PARTS, TTFT_PARTS, tail_shares, verdict
from aisim.prediction import run_prediction

GOLDEN = Path(__file__).parent / "golden"
TTFT_NAMES = [name for name, _ in TTFT_PARTS]
PD_ONLY = ("ttft_kv_transfer_ms", "ttft_handoff_wait_ms", "ttft_first_decode_ms")

# one golden per mode and pressure: preemption (vLLM, MTP, chunking off), TRT-LLM, attention-DP
# with prefill_schedule_interval, P/D with a transfer, decode-side preemption, null bandwidth
CASES = [
    "heavy-preempt-c10",
    "chunk-off-readmission-prompt-held-back",
    "difftest-mtp-kv-pressure-readmission",
    "dsv3-trtllm-dp8-prefix",
    "dp2-psi2",
    "pd-2p3d-isl1500",
    "pd-chunk-off-decode-recompute-not-held-back",
    "difftest-pd-null-bandwidth-decode-pass",
    "tokenizer-trtllm-closed-loop-bottleneck",
    "tokenizer-pd-prefill-dp2",
]


def _rows(name: str) -> tuple[list[dict], dict]:
    pred = run_prediction(str(GOLDEN / name / "config.yaml"), capture=True)
    parts = pred.records.parts
    rows = []
    for record in pred.records:
        i = int(record["session_id"].split("_")[-1])
        rows.append({**record, **{n: float(parts[n][i]) for n, _ in PARTS}})
    return rows, pred.prediction


@pytest.mark.parametrize("name", CASES)
def test_parts_add_up_and_agree_with_the_records(name: str) -> None:
    rows, prediction = _rows(name)
    done = [r for r in rows if r["terminal_status"] == "completed"]
    assert done
    disaggregated = done[0]["prefill_admit_ms"] is not None
    preempted = 0
    for r in done:
        ttft = sum(r[n] for n in TTFT_NAMES)
        e2e = ttft + r["decode_ms"] + r["decode_preempted_ms"]
        assert ttft == pytest.approx(r["ttft_ms"], rel=1e-12, abs=1e-9)
        assert e2e == pytest.approx(r["e2e_latency_ms"], rel=1e-12, abs=1e-9)
        assert min(r[n] for n, _ in PARTS) >= -1e-9, r
        admit = r["prefill_admit_ms"] if disaggregated else r["first_admit_ms"]
        # with a tokenizer the request queues from its tokenization end (docs/rules.md 2.3)
        queued_from = r.get("tokenized_ms", r["arrival_time_ms"])
        assert r["ttft_tokenizing_ms"] == pytest.approx(queued_from - r["arrival_time_ms"])
        assert r["ttft_queued_ms"] == pytest.approx(admit - queued_from, abs=1e-9)
        if disaggregated:
            # the handoff parts span the prompt's end to the first decode pass
            handoff = r["ttft_kv_transfer_ms"] + r["ttft_handoff_wait_ms"]
            assert handoff == pytest.approx(r["decode_admit_ms"] - r["source_held_ms"], abs=1e-9)
        else:
            assert all(r[n] == 0.0 for n in PD_ONLY)
        lost = r["ttft_preempted_ms"] + r["decode_preempted_ms"]
        assert (lost > 0) == (r["readmission_count"] > 0), r
        preempted += r["readmission_count"] > 0
    if name in ("heavy-preempt-c10", "pd-chunk-off-decode-recompute-not-held-back"):
        assert preempted > 0  # the case exercises preemption
    if name.startswith("tokenizer-"):
        assert all(r["ttft_tokenizing_ms"] > 0 for r in done)
    shares = prediction["latency_attribution"]["ttft_tail_shares"]
    for tail in ("p50", "p90", "p99"):
        assert sum(shares[tail].values()) == pytest.approx(1.0, abs=1e-12)


HAND = """\
traffic:
  source: {type: synthetic, input_tokens: 100, output_tokens: 3}
  load: {type: concurrency, concurrency: 2}
  stop: {requests: 2}
engine:
  mode: aggregated
  model: Qwen/Qwen3-32B
  hardware: b200_sxm
  backend: vllm
  workers:
    aggregated:
      parallelism: {tensor: 4}
      scheduler: {max_batched_tokens: 512, max_sequences: %d}
      kv_cache: {block_size: 16, capacity: {type: fixed, blocks: 64}}
      timing: {type: fixed, prefill_ms: 7.3, decode_ms: 1.7}
"""


def _hand(tmp_path: Path, max_seqs: int) -> list[dict]:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(HAND % max_seqs)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main, ["predict", "-c", str(cfg), "-o", str(out), "--capture-per-request"]
    )
    assert result.exit_code == 0, result.output
    assert "Where TTFT went:" in result.output
    return pq.read_table(out / "requests.parquet").to_pylist()


def test_one_at_a_time_is_queueing_then_prefill_alone(tmp_path: Path) -> None:
    # max_sequences 1: r0 runs alone (prefill 7.3, two decodes of 1.7, done at 10.7); r1 waits
    # for it, then runs alone too
    r0, r1 = _hand(tmp_path, 1)
    assert r0["ttft_queued_ms"] == 0.0 and r0["ttft_prefill_ms"] == pytest.approx(7.3)
    assert r0["ttft_interference_ms"] == pytest.approx(0.0, abs=1e-12)
    assert r0["decode_ms"] == pytest.approx(3.4)
    assert r1["ttft_queued_ms"] == pytest.approx(10.7)
    assert r1["ttft_prefill_ms"] == pytest.approx(7.3)
    assert r1["ttft_ms"] == pytest.approx(18.0)


def test_prompts_sharing_a_pass_are_interference(tmp_path: Path) -> None:
    # max_sequences 2: both prompts share the first 7.3 ms pass; no pass is theirs alone
    for r in _hand(tmp_path, 2):
        assert r["ttft_queued_ms"] == 0.0 and r["ttft_prefill_ms"] == 0.0
        assert r["ttft_interference_ms"] == pytest.approx(7.3)


def test_tail_shares_by_hand() -> None:
    ttft = np.array([10.0, 20.0, 30.0, 40.0, np.nan])
    parts = {name: np.zeros(5) for name in TTFT_NAMES}
    parts["ttft_queued_ms"] = np.array([0.0, 5.0, 15.0, 30.0, np.nan])
    parts["ttft_prefill_ms"] = ttft - parts["ttft_queued_ms"]
    shares = tail_shares(parts, ttft)
    # p50 by nearest rank of 4 values is 20: the tail is 20, 30, 40 (90 ms, 50 queued)
    assert shares["p50"]["ttft_queued_ms"] == pytest.approx(50 / 90)
    # p90 and p99 are 40: that request alone (30 of 40 queued)
    assert shares["p99"]["ttft_queued_ms"] == pytest.approx(0.75)
    assert verdict(shares) == "p99 TTFT: 75 % queued"
    assert tail_shares(parts, np.full(5, np.nan)) == {} and verdict({}) is None


def test_attribution_figure(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    cfg = tmp_path / "c.yaml"
    cfg.write_text((GOLDEN / "heavy-preempt-c10" / "config.yaml").read_text())
    out = tmp_path / "run"
    runner = CliRunner()
    assert (
        runner.invoke(
            main, ["predict", "-c", str(cfg), "-o", str(out), "--capture-per-request"]
        ).exit_code
        == 0
    )
    result = runner.invoke(main, ["plot", str(out), "--format", "png"])
    assert result.exit_code == 0, result.output
    assert (out / "attribution.png").stat().st_size > 10_000
    summary = json.loads((out / "prediction.json").read_text())["latency_attribution"]
    assert summary["verdict"].startswith("p99 TTFT: ")


def test_uncaptured_runs_keep_no_attribution() -> None:
    pred = run_prediction(str(GOLDEN / "heavy-preempt-c10" / "config.yaml"))
    assert "latency_attribution" not in pred.prediction


def _random_config(rng: np.random.Generator) -> tuple[str, bool]:
    """A small random deployment under pressure: aggregated or P/D, vLLM or TRT-LLM, chunked
    prefill on or off, attention-DP, a tight KV pool, fixed pass times."""
    pd = bool(rng.random() < 0.4)
    backend = "trtllm" if rng.random() < 0.3 else "vllm"
    prompt = int(rng.choice([48, 100, 200]))
    output = int(rng.integers(8, 60))
    budget = int(rng.choice([prompt, 2 * prompt, 512]))
    bs = int(rng.choice([16, 32]))
    blocks = int(rng.integers((prompt + output) // bs + 2, 2 * ((prompt + output) // bs) + 6))
    adp = int(rng.choice([1, 2]))
    prefill_ms, decode_ms = rng.choice([1.3, 7.3]), rng.choice([0.7, 1.7])
    timing = f"{{type: fixed, prefill_ms: {prefill_ms}, decode_ms: {decode_ms}}}"
    pool = (
        f"      parallelism: {{tensor: 4, attention_data: {adp}}}\n"
        f"      scheduler: {{max_batched_tokens: {budget}, max_sequences: "
        f"{int(rng.choice([4, 16, 64]))}}}\n"
        f"      kv_cache: {{block_size: {bs}, capacity: {{type: fixed, blocks: {blocks}}}}}\n"
        f"      timing: {timing}\n"
    )
    roles = ("prefill", "decode") if pd else ("aggregated",)
    workers = "".join(f"    {role}:\n{pool}" for role in roles)
    chunked = "false" if rng.random() < 0.3 else "true"
    text = (
        "traffic:\n"
        f"  source: {{type: synthetic, input_tokens: {prompt}, output_tokens: {output}}}\n"
        f"  load: {{type: poisson, requests_per_second: {int(rng.choice([200, 1000]))}, "
        f"seed: {int(rng.integers(1, 1000))}}}\n"
        f"  stop: {{requests: {int(rng.integers(10, 40))}}}\n"
        "engine:\n"
        f"  mode: {'disaggregated' if pd else 'aggregated'}\n"
        "  model: Qwen/Qwen3-32B\n  hardware: b200_sxm\n"
        f"  backend: {backend}\n  enable_chunked_prefill: {chunked}\n"
        + ("  kv_transfer: {bandwidth_gb_per_second: 50}\n" if pd else "")
        + f"  workers:\n{workers}"
    )
    return text, pd


def test_parts_add_up_on_random_deployments(tmp_path: Path) -> None:
    rng = np.random.default_rng(20261207)
    checked = preempted = 0
    for k in range(16):
        text, pd = _random_config(rng)
        cfg = tmp_path / f"r{k}.yaml"
        cfg.write_text(text)
        try:
            pred = run_prediction(str(cfg), capture=True)
        except Exception as exc:  # a drawn deployment that can never finish is refused
            assert "never" in str(exc) or "capacity" in str(exc).lower(), text
            continue
        parts = pred.records.parts
        for record in pred.records:
            if record["terminal_status"] != "completed":
                continue
            i = int(record["session_id"].split("_")[-1])
            ttft = sum(float(parts[n][i]) for n in TTFT_NAMES)
            e2e = ttft + float(parts["decode_ms"][i]) + float(parts["decode_preempted_ms"][i])
            assert ttft == pytest.approx(record["ttft_ms"], rel=1e-12, abs=1e-9), text
            assert e2e == pytest.approx(record["e2e_latency_ms"], rel=1e-12, abs=1e-9), text
            assert min(float(parts[n][i]) for n, _ in PARTS) >= -1e-9, text
            if not pd:
                assert all(float(parts[n][i]) == 0.0 for n in PD_ONLY)
            lost = float(parts["ttft_preempted_ms"][i]) + float(parts["decode_preempted_ms"][i])
            assert (lost > 0) == (record["readmission_count"] > 0), text
            preempted += record["readmission_count"] > 0
            checked += 1
    assert checked > 200 and preempted > 20
