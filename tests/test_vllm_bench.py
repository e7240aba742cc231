"""The vLLM bench result of a prediction (docs/vllm-bench.md): every field against hand-derived
runs and against numpy applied to the per-request records, as vLLM's client computes them."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from aisim.errors import AisimError
from aisim.kernels.codes import SKETCH_BINS, SKETCH_OFFSET
from aisim.output import vllm_bench as vb
from aisim.prediction import run_prediction

ENGINE = """
engine:
  mode: aggregated
  model: Qwen/Qwen3-8B
  hardware: b200_sxm
  backend: vllm
{extra}  workers:
    aggregated:
      parallelism: {{replicas: 1, tensor: 1}}
      scheduler: {{max_batched_tokens: 8192, max_sequences: 256}}
      kv_cache: {{block_size: 64, prefix_caching: true, capacity: {{type: fixed, blocks: 1000}}}}
      timing: {timing}
"""
FIXED = "{type: fixed, prefill_ms: 10, decode_ms: 2}"

# Three requests 10 ms apart, 4 tokens each; a pass with a prompt takes 10 + 2 ms when it also
# decodes. r0: prefill 0-10, then passes ending 22, 34, 36; r1 arrives at 10, prefills in the
# 10-22 pass, decodes at 34, 36, 38; r2 arrives at 20, waits, prefills in 22-34, decodes at
# 36, 38, 40.
STAGGERED = """
traffic:
  source: {type: synthetic, input_tokens: 100, output_tokens: 4}
  load: {type: constant_rate, requests_per_second: 100}
  stop: {requests: 3}
evaluation:
  sla: {ttft_ms: 12, itl_ms: 6}
""" + ENGINE.format(extra="", timing=FIXED)
TTFT = [10.0, 12.0, 14.0]
E2E = [36.0, 28.0, 20.0]
TPOT = [26.0 / 3, 16.0 / 3, 2.0]
GAPS = [12.0, 12.0, 2.0, 12.0, 2.0, 2.0, 2.0, 2.0, 2.0]  # every token gap of the three
PCTS = (25, 50, 70, 90, 99, 99.9)

CLOSED = """
traffic:
  source: {type: synthetic, input_tokens: 100, output_tokens: 8}
  load: {type: concurrency, concurrency: 3}
  stop: {requests: 7}
""" + ENGINE.format(extra="", timing=FIXED)
MTP = """
traffic:
  source: {type: synthetic, input_tokens: 100, output_tokens: 8}
  load: {type: concurrency, concurrency: 3}
  stop: {requests: 7}
""" + ENGINE.format(extra="  nextn: 2\n  nextn_accepted: 1.5\n", timing="{type: default}")


def _run(tmp_path, text: str, name: str = "cfg.yaml", capture: bool = True):
    path = tmp_path / name
    path.write_text(text)
    return run_prediction(str(path), capture=capture)


@pytest.fixture(scope="module")
def staggered(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("staggered"), STAGGERED)


def test_the_staggered_run_is_the_hand_derived_one(staggered) -> None:
    recs = list(staggered.records)
    assert [r["ttft_ms"] for r in recs] == TTFT
    assert [r["e2e_latency_ms"] for r in recs] == E2E


def test_summary_fields_follow_vllm(staggered) -> None:
    res = vb.result(staggered, detailed=False)
    assert res["endpoint_type"] == res["backend"] == "aisim"
    assert res["label"] is None
    assert res["model_id"] == res["tokenizer_id"] == "Qwen/Qwen3-8B"
    assert res["num_prompts"] == 3
    # constant gaps are vLLM's --burstiness inf; no concurrency limit
    assert (res["request_rate"], res["burstiness"], res["max_concurrency"]) == (
        100.0,
        math.inf,
        None,
    )
    assert res["duration"] == 0.04
    assert (res["completed"], res["failed"]) == (3, 0)
    assert (res["total_input_tokens"], res["total_output_tokens"]) == (300, 12)
    assert res["request_throughput"] == 75.0
    assert res["output_throughput"] == 300.0
    assert res["total_token_throughput"] == 7800.0
    # [0, 36), [10, 38), [20, 40) all overlap
    assert res["max_concurrent_requests"] == 3
    assert res["rtfx"] == 0.0
    assert res["latencies"] == [e / 1000 for e in E2E]
    assert res["queue_times"] == [0.0, 0.0, 0.0]  # an open loop never waits for a slot
    assert "max_output_tokens_per_s" not in res  # needs per-token times (docs/vllm-bench.md)
    for key in ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors"):
        assert key not in res


def test_goodput_maps_the_sla_to_vllms_rule(staggered) -> None:
    # ttft <= 12 and TPOT <= 6: r0 has TPOT 8.67, r2 TTFT 14; r1 (TTFT 12, inclusive) passes
    res = vb.result(staggered, detailed=False)
    assert staggered.prediction["goodput_completed_requests"] == 1
    assert res["request_goodput"] == 1 / 0.04
    reqs = vb.PerRequest.from_records(staggered.records)
    assert reqs.goodput_count(ttft=12.0, tpot=6.0) == 1
    assert reqs.goodput_count(ttft=12.0) == 2
    assert reqs.goodput_count(tpot=2.0) == 1
    assert reqs.goodput_count(e2el=28.0) == 2
    assert reqs.goodput_count() == 3


def test_latency_statistics_are_numpys_over_the_records(staggered) -> None:
    res = vb.result(staggered, detailed=False, percentiles=PCTS, metrics=vb.METRICS)
    recs = list(staggered.records)
    ttft = np.array([r["ttft_ms"] for r in recs])
    e2e = np.array([r["e2e_latency_ms"] for r in recs])
    n = np.array([r["output_length"] for r in recs])
    tpot = (e2e - ttft) / (n - 1)
    np.testing.assert_allclose(tpot, TPOT, rtol=1e-15)
    for name, values in (("ttft", ttft), ("tpot", tpot), ("e2el", e2e)):
        assert res[f"mean_{name}_ms"] == np.mean(values)
        assert res[f"median_{name}_ms"] == np.median(values)
        assert res[f"std_{name}_ms"] == np.std(values)
        for p in PCTS:
            assert res[f"p{vb.p_word(p)}_{name}_ms"] == np.percentile(values, p), (name, p)
    assert "p99.9_ttft_ms" in res and "p99_ttft_ms" in res
    # hand values: TTFT median 12, p25 11 (between 10 and 12)
    assert res["median_ttft_ms"] == 12.0 and res["p25_ttft_ms"] == 11.0


def test_itl_is_exact_when_the_gaps_sit_at_the_min_and_max(staggered) -> None:
    res = vb.result(staggered, detailed=False, percentiles=PCTS)
    assert res["mean_itl_ms"] == pytest.approx(48.0 / 9, rel=1e-15)
    assert res["std_itl_ms"] == pytest.approx(np.std(GAPS), rel=1e-12)
    assert res["median_itl_ms"] == np.percentile(GAPS, 50)
    for p in PCTS:
        assert res[f"p{vb.p_word(p)}_itl_ms"] == np.percentile(GAPS, p), p
    assert res["p70_itl_ms"] == pytest.approx(8.0)  # between a 2 ms and a 12 ms gap


def test_default_metrics_are_vllms(staggered) -> None:
    res = vb.result(staggered, detailed=False)
    for m in ("ttft", "tpot", "itl"):
        assert {f"mean_{m}_ms", f"median_{m}_ms", f"std_{m}_ms", f"p99_{m}_ms"} <= set(res)
    assert not any("e2el" in k for k in res)
    with pytest.raises(AisimError, match="percentile metric 'client_queue_time'"):
        vb.result(staggered, detailed=False, metrics=("ttft", "client_queue_time"))


def test_detailed_arrays(staggered) -> None:
    res = vb.result(staggered, detailed=True)
    assert res["input_lens"] == [100, 100, 100]
    assert res["output_lens"] == [4, 4, 4]
    assert res["ttfts"] == [t / 1000 for t in TTFT]
    assert res["start_times"] == [0.0, 0.01, 0.02]
    assert res["generated_texts"] == ["", "", ""]
    assert res["errors"] == ["", "", ""]
    assert "itls" not in res  # no per-token times (docs/vllm-bench.md)


def test_no_records_is_one_clear_error(tmp_path) -> None:
    pred = _run(tmp_path, STAGGERED, capture=False)
    with pytest.raises(AisimError, match=r"per-request records.*--capture-per-request"):
        vb.result(pred, detailed=False)


def test_a_closed_loop_is_unlimited_rate_at_max_concurrency(tmp_path) -> None:
    pred = _run(tmp_path, CLOSED)
    res = vb.result(pred, detailed=True)
    assert (res["request_rate"], res["burstiness"], res["max_concurrency"]) == ("inf", 1.0, 3)
    # three waves of 24 ms: vLLM's requests wait for a slot from the start until they are sent
    assert res["start_times"] == [0.0] * 3 + [0.024] * 3 + [0.048]
    assert res["queue_times"] == res["start_times"]
    assert res["max_concurrent_requests"] == 3  # an end and the next start do not overlap
    assert res["duration"] == 0.072
    assert f"{'Maximum request concurrency:':<40} {'3':<10}" in vb.render(res).splitlines()
    assert "Request rate configured" not in vb.render(res)  # an unlimited rate


def test_failed_requests_carry_vllms_defaults() -> None:
    # a rejected request (terminal at 50 ms) ends the benchmark after the last completion
    reqs = vb.PerRequest.from_columns(
        {
            "arrival_time_ms": [0.0, 5.0, 10.0],
            "terminal_time_ms": [30.0, 50.0, 40.0],
            "ttft_ms": [10.0, None, 12.0],
            "e2e_latency_ms": [30.0, None, 30.0],
            "input_length": [100, 9000, 100],
            "output_length": [5, 0, 1],
            "terminal_status": ["completed", "rejected", "completed"],
            "admission_count": [1, 0, 1],
        }
    )
    res = vb.summary_fields({}, reqs, detailed=True, closed_loop=False)
    assert res["duration"] == 0.05
    assert (res["completed"], res["failed"]) == (2, 1)
    assert res["total_input_tokens"] == 200 and res["total_output_tokens"] == 6
    assert res["request_goodput"] is None  # no SLA bound, no --goodput
    assert res["ttfts"] == [0.01, 0.0, 0.012]
    assert res["latencies"] == [0.03, 0.0, 0.03]
    assert res["output_lens"] == [5, 0, 1]
    assert res["errors"] == ["", "aisim: request rejected", ""]
    # a 1-token output has no TPOT sample but passes any TPOT bound, as in vLLM
    assert len(reqs.samples()["tpot"]) == 1
    assert reqs.goodput_count(tpot=0.0) == 1
    lat = vb.latency_fields(reqs, None, (99,), vb.METRICS)
    assert lat["mean_tpot_ms"] == 5.0 and lat["mean_e2el_ms"] == 30.0
    assert not any("itl" in k for k in lat)


def _sketched(gaps: np.ndarray, zeros: int) -> vb.ItlStats:
    """The streamed statistics kernels/tokstats.py keeps for these gaps (plus zero gaps)."""
    pos = gaps[gaps > 0]
    keys = np.ceil(np.log(pos) / vb._LOG_GAMMA).astype(np.int64) + SKETCH_OFFSET
    bins = np.bincount(np.clip(keys, 0, SKETCH_BINS - 1), minlength=SKETCH_BINS)
    every = np.concatenate([pos, np.zeros(zeros)])
    return vb.ItlStats(
        total=float(every.sum()),
        m2=float(((every - every.mean()) ** 2).sum()),
        n_all=len(every),
        zeros=zeros,
        min_all=float(every.min()),
        max_all=float(every.max()),
        bins=bins,
    )


def test_itl_leaves_zero_gaps_out_and_stays_within_the_sketch_bound() -> None:
    rng = np.random.default_rng(7)
    gaps = rng.lognormal(mean=2.0, sigma=0.6, size=5000)
    itl = _sketched(gaps, zeros=3000)
    assert itl.n == 5000
    assert itl.mean() == pytest.approx(np.mean(gaps), rel=1e-12)
    assert itl.std() == pytest.approx(np.std(gaps), rel=1e-9)
    for p in (0, 1, 10, 25, 50, 75, 90, 99, 99.9, 100):
        assert itl.percentile(p) == pytest.approx(np.percentile(gaps, p), rel=vb.SKETCH_ALPHA)
    assert itl.percentile(100) == gaps.max()  # the exact maximum bounds the top bucket
    no_zero = _sketched(gaps, zeros=0)
    assert no_zero.percentile(0) == gaps.min()


def test_mtp_bursts_are_one_chunk(tmp_path) -> None:
    pred = _run(tmp_path, MTP)
    itl = vb.ItlStats.from_stats(pred.records.result.stats)
    reqs = vb.PerRequest.from_records(pred.records)
    assert itl.n_all == int((reqs.output_len - 1).sum())  # every gap after a first token
    assert itl.zeros > 0  # the extra tokens of MTP bursts
    res = vb.result(pred, detailed=False)
    # the chunk gaps sum to each request's last - first token time
    expect = float((reqs.e2e_ms - reqs.ttft_ms).sum()) / itl.n
    assert res["mean_itl_ms"] == pytest.approx(expect, rel=1e-12)
    assert res["mean_itl_ms"] > pred.prediction["mean_itl_ms"]  # which counts the zero gaps
    assert res["mean_tpot_ms"] == np.mean(reqs.samples()["tpot"])


def test_render_is_vllms_block(staggered) -> None:
    res = vb.result(staggered, detailed=False)
    text = vb.render(res)
    lines = text.splitlines()
    assert lines[0] == "============ Serving Benchmark Result ============"
    assert lines[-1] == "=" * 50
    assert f"{'Successful requests:':<40} {'3':<10}" in lines
    assert f"{'Failed requests:':<40} {'0':<10}" in lines
    assert f"{'Request rate configured (RPS):':<40} {'100.00':<10}" in lines
    assert f"{'Benchmark duration (s):':<40} {'0.04':<10}" in lines
    assert f"{'Total generated tokens:':<40} {'12':<10}" in lines
    assert f"{'Request goodput (req/s):':<40} {'25.00':<10}" in lines
    assert f"{'Peak concurrent requests:':<40} {'3.00':<10}" in lines
    assert f"{'Mean TTFT (ms):':<40} {'12.00':<10}" in lines
    assert f"{'P99 ITL (ms):':<40} {'12.00':<10}" in lines
    assert "Maximum request concurrency:" not in text  # an open loop
    assert "Peak output token throughput" not in text  # the field is left out
    headings = [ln for ln in lines if ln.startswith("-")]
    assert headings == [
        "---------------Time to First Token----------------",
        "-----Time per Output Token (excl. 1st token)------",
        "---------------Inter-token Latency----------------",
    ]
    e2e = vb.render(vb.result(staggered, detailed=False, metrics=("e2el",), percentiles=(90,)))
    assert "----------------End-to-end Latency----------------" in e2e
    assert f"{'P90 E2EL (ms):':<40} {'34.40':<10}" in e2e.splitlines()


def test_p_word_is_vllms_key_suffix() -> None:
    assert [vb.p_word(p) for p in (99, 99.0, 99.9, 50)] == ["99", "99", "99.9", "50"]


def test_itl_from_stats_reads_the_kernel_rows() -> None:
    stats = SimpleNamespace(
        acc=np.array([[10.0, 2.5, 1.0, 0.0, 4.0], [0.0] * 5]),
        cnt=np.array([[5, 1], [0, 0]]),
        bins=np.zeros((2, SKETCH_BINS), dtype=np.int64),
    )
    itl = vb.ItlStats.from_stats(stats)
    assert (itl.total, itl.m2, itl.n_all, itl.zeros, itl.max_all) == (10.0, 1.0, 5, 1, 4.0)
    assert itl.mean() == 2.5  # 10 ms over the 4 positive gaps
