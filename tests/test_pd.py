"""Disaggregated prefill/decode (docs/rules.md 9): role resolution, transfer parameters and
errors. End-to-end parity is in tests/golden/pd-* (tests/test_golden.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aisim.config import load_config
from aisim.engine.deployment import resolve_run
from aisim.errors import CapacityError, ConfigError, NotAvailableError
from aisim.prediction import run_prediction

GOLDEN = Path(__file__).parent / "golden"

PD = """\
traffic:
  source: {type: synthetic, input_tokens: 1000, output_tokens: 8}
  load: {type: concurrency, concurrency: 2}
  stop: {requests: 4}
engine:
  mode: disaggregated
  model: Qwen/Qwen3-32B
  hardware: b200_sxm
  kv_transfer: {bandwidth_gb_per_second: 400.0}
  workers:
    prefill:
      parallelism: {replicas: 1, tensor: 4}
      kv_cache: {block_size: 64, capacity: {type: fixed, blocks: 100}}
      timing: {type: fixed, prefill_ms: 10, decode_ms: 1}
    decode:
      parallelism: {replicas: 2, tensor: 4}
      kv_cache: {block_size: 64, capacity: {type: fixed, blocks: 100}}
      timing: {type: fixed, prefill_ms: 10, decode_ms: 1}
"""


def _cfg(tmp_path: Path, text: str = PD, overrides: tuple[str, ...] = ()):
    path = tmp_path / "pd.yaml"
    path.write_text(text)
    return str(path), load_config(str(path), overrides)


def test_roles_resolve_with_prefill_defaults(tmp_path: Path) -> None:
    _, cfg = _cfg(tmp_path)
    spec = resolve_run(cfg)
    assert spec.pool("prefill").role == "prefill" and spec.pool("decode").role == "decode"
    assert (
        spec.pool("prefill").max_seqs == 1
    )  # prefill max_sequences defaults to 1 (docs/rules.md 9.1)
    assert spec.pool("decode").max_seqs == 256
    assert spec.pool("decode").replicas == 2
    # bytes_per_token auto: 2 x 64 layers x (8 kv heads / TP 4) x 128 x 2 bytes (docs/rules.md 9.4)
    assert spec.handoff.bytes_per_token == 65536.0
    assert spec.handoff.bandwidth_gb_s == 400.0
    assert not spec.handoff.full_prompt


@pytest.mark.parametrize("model", ["deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-V3.2"])
def test_auto_bytes_per_token_of_mla_models(tmp_path: Path, model: str) -> None:
    """DeepSeek's fp8 KV cache still transfers at the checkpoint dtype: 61 layers x (512 latent
    + 64 rope) x 2 bytes, no indexer keys, not split by TP (AISimulate's lowered spec)."""
    _, cfg = _cfg(tmp_path, overrides=(f"engine.model={model}",))
    assert resolve_run(cfg).handoff.bytes_per_token == 70272.0


def test_null_bandwidth_means_no_delay(tmp_path: Path) -> None:
    _, cfg = _cfg(tmp_path, overrides=("engine.kv_transfer={bandwidth_gb_per_second: null}",))
    assert resolve_run(cfg).handoff.bandwidth_gb_s == 0.0
    _, cfg = _cfg(tmp_path, overrides=("engine.kv_transfer=null",))
    assert resolve_run(cfg).handoff.bandwidth_gb_s == 0.0


def test_explicit_bytes_per_token_and_full_prompt(tmp_path: Path) -> None:
    _, cfg = _cfg(
        tmp_path,
        overrides=(
            "engine.kv_transfer={bandwidth_gb_per_second: 50, bytes_per_token: 1000, "
            "timing_mode: full_prompt}",
        ),
    )
    t = resolve_run(cfg).handoff
    assert (t.bytes_per_token, t.bandwidth_gb_s, t.full_prompt) == (1000.0, 50.0, True)


def test_transfer_delay_and_timestamps(tmp_path: Path) -> None:
    """P = 1000, bs 64: destination_missing charges 16 whole blocks = 1024 tokens, 0.16777216 ms
    at 400 GB/s (docs/rules.md 9.4); the activation on an idle decode worker happens at once."""
    path, _ = _cfg(tmp_path)
    pred = run_prediction(path, capture=True)
    first = next(r for r in pred.records if r["session_id"] == "session_0")
    assert first["prefill_admit_ms"] == 0.0
    assert first["source_held_ms"] == 10.0
    assert first["destination_reserved_ms"] == 10.0
    assert first["destination_activated_ms"] == pytest.approx(10.16777216, abs=1e-12)
    assert first["decode_admit_ms"] == first["destination_activated_ms"]
    # the prefill worker (max_sequences 1) is busy with the next prompt until 20.0: the release
    # issued at activation is deferred to that pass end
    assert first["source_released_ms"] == 20.0
    assert first["first_token_ms"] == pytest.approx(11.16777216, abs=1e-12)
    assert [h["pool"] for h in first["admission_history"]] == ["prefill", "decode"]
    assert [h["pool"] for h in first["routing_history"]] == ["prefill", "decode"]
    p = pred.prediction
    assert p["prefill_gpus_per_worker"] == 4 and p["decode_gpus_per_worker"] == 4
    duration_s = p["duration_ms"] / 1000.0
    assert p["prefill_worker_seconds"] == pytest.approx(duration_s)
    assert p["decode_worker_seconds"] == pytest.approx(2 * duration_s)
    assert p["gpu_hours"] == pytest.approx(3 * duration_s * 4 / 3600.0)
    assert set(p["prediction_provenance"]) == {"prefill", "decode"}


def test_decode_pool_that_holds_the_prompt_but_not_its_growth_is_a_capacity_error(
    tmp_path: Path,
) -> None:
    """16 blocks of 64 hold the 1024-token prompt but not 1024 + 8 - 1 tokens: no request
    could finish (AISimulate stops with a replay error), so the config is refused."""
    _, cfg = _cfg(
        tmp_path,
        overrides=(
            "engine.workers.decode.kv_cache.capacity.blocks=16",
            "traffic.source.input_tokens=1024",
        ),
    )
    with pytest.raises(CapacityError, match=r"engine\.workers\.decode\.kv_cache\.capacity\.blocks"):
        resolve_run(cfg)


def test_decode_pool_smaller_than_the_prompt_is_simulated(tmp_path: Path) -> None:
    """A pool that cannot even take the handoff makes every request fail (simulated, like
    AISimulate; tests/golden/pd-decode-pool-never-fits pins the figures)."""
    _, cfg = _cfg(tmp_path, overrides=("engine.workers.decode.kv_cache.capacity.blocks=10",))
    assert resolve_run(cfg).pool("decode").num_blocks == 10


def test_mtp_with_pd_not_available(tmp_path: Path) -> None:
    _, cfg = _cfg(
        tmp_path,
        overrides=(
            "engine.nextn=1",
            "engine.nextn_accepted=0.5",
            "engine.workers.prefill.timing={type: default}",
            "engine.workers.decode.timing={type: default}",
        ),
    )
    with pytest.raises(NotAvailableError, match=r"engine\.nextn"):
        resolve_run(cfg)


def test_kv_transfer_rejected_in_aggregated_mode(tmp_path: Path) -> None:
    text = (GOLDEN / "single-request" / "config.yaml").read_text()
    with pytest.raises(ConfigError, match=r"engine\.kv_transfer"):
        _cfg(tmp_path, text, ("engine.kv_transfer={bandwidth_gb_per_second: 10}",))


def test_pd_timestamps_match_aisimulate_to_the_last_bit() -> None:
    """pd-vllm at 256 requests: every P/D timestamp of every request equals AISimulate's exactly
    (prefill pass ends go through seconds, as AISimulate converts them; a 1-ulp drift would
    show here long before it moves a summary field)."""
    folder = Path(__file__).parent / "golden" / "pd-vllm-c64-r256"
    ref = {r["session_id"]: r for r in map(json.loads, (folder / "requests.jsonl").open())}
    pred = run_prediction(str(folder / "config.yaml"), capture=True)
    keys = (
        "arrival_time_ms",
        "prefill_admit_ms",
        "source_held_ms",
        "destination_reserved_ms",
        "destination_activated_ms",
        "decode_admit_ms",
        "source_released_ms",
        "first_token_ms",
        "last_token_ms",
        "terminal_time_ms",
    )
    assert len(pred.records) == len(ref) == 256
    bad = [
        (r["session_id"], k, r[k], ref[r["session_id"]][k])
        for r in pred.records
        for k in keys
        if r[k] != ref[r["session_id"]][k]
    ]
    assert not bad, bad[:5]


def test_decode_preemption_deadlock_is_a_capacity_error() -> None:
    """vLLM decode-side preemption that can never resume: 12 requests of P=96/O=40 on 26 decode
    blocks leave recomputes waiting behind destinations that never fit. AISimulate aborts
    ("effect-free zero-duration pass"); aisim names the pool to enlarge."""
    config = str(GOLDEN / "pd-decode-kv-pressure-preempt" / "config.yaml")
    overrides = (
        "traffic.source={type: synthetic, input_tokens: 96, output_tokens: 40}",
        "traffic.load={type: concurrency, concurrency: 12}",
        "traffic.stop={requests: 24}",
        "engine.workers.decode.kv_cache.capacity.blocks=26",
    )
    with pytest.raises(CapacityError, match=r"engine\.workers\.decode\.kv_cache\.capacity"):
        run_prediction(config, overrides)


def test_a_stuck_pd_run_is_refused_under_a_cut_off_too(tmp_path: Path) -> None:
    """A prompt larger than the prefill budget with chunking off can never run: the loop runs
    out of events long before the 0.5 s cut-off with requests open. That is a stuck run (a
    capacity error, AISimulate's "effect-free zero-duration pass"), not a cut-off result."""
    from click.testing import CliRunner

    from aisim.cli import main

    rows = [(0.0, 100, [1, 2]), (1.0, 400, [3, 4, 5, 6, 7, 8, 9]), (2.0, 90, [10, 11])]
    (tmp_path / "t.jsonl").write_text(
        "".join(
            f'{{"timestamp": {t}, "input_length": {n}, "output_length": 4, "hash_ids": {ids}}}\n'
            for t, n, ids in rows
        )
    )
    pool = (
        "      parallelism: {tensor: 1}\n"
        "      scheduler: {max_batched_tokens: %d, max_sequences: 8}\n"
        "      kv_cache: {block_size: 16, capacity: {type: fixed, blocks: 200}}\n"
        "      timing: {type: fixed, prefill_ms: 5.0, decode_ms: 1.0}\n"
    )
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "traffic:\n"
        "  source: {type: trace, paths: [t.jsonl], format: mooncake, block_size: 64}\n"
        "  load: {type: trace_timestamps}\n"
        "  stop: {max_virtual_time_seconds: 0.5}\n"
        "engine:\n"
        "  mode: disaggregated\n"
        "  model: Qwen/Qwen3-0.6B\n"
        "  hardware: b200_sxm\n"
        "  backend: vllm\n"
        "  enable_chunked_prefill: false\n"
        "  kv_transfer: {bandwidth_gb_per_second: null}\n"
        "  workers:\n"
        "    prefill:\n" + pool % 256 + "    decode:\n" + pool % 8192
    )
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["predict", "-c", str(cfg), "-o", str(out)])
    assert res.exit_code == 2, res.output
    assert "the prefill workers can make no progress" in res.output
    assert not out.exists()
    # with a budget the prompt fits, the same cut-off run ends normally
    cfg.write_text(cfg.read_text().replace("max_batched_tokens: 256", "max_batched_tokens: 512"))
    res = CliRunner().invoke(main, ["predict", "-c", str(cfg), "-o", str(out)])
    assert res.exit_code == 0, res.output
