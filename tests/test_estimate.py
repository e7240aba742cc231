"""`aisim estimate`: single-pass pricing from a config, as a table or JSON, and bad flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from aisim.cli import main

CONFIG = """\
traffic:
  source: {type: synthetic, input_tokens: 1024, output_tokens: 128}
  load: {type: concurrency, concurrency: 64}
  stop: {requests: 256}
engine:
  mode: aggregated
  model: Qwen/Qwen3-32B
  hardware: b200_sxm
  backend: vllm
  backend_version: "0.24.0"
  database_mode: SILICON
  workers:
    aggregated:
      parallelism: {replicas: 1, tensor: 4}
      scheduler: {max_batched_tokens: 8192, max_sequences: 256}
      kv_cache: {block_size: 64, prefix_caching: true, capacity: {type: fixed, blocks: 16384}}
      timing: {type: default}
"""

# docs/timing.md 1.3: Qwen3-32B / B200 / TP4 / vLLM 0.24.0
PREFILL_1x1024 = 22.925219513
DECODE_1x1025 = 7.463278407


def _run(tmp_path: Path, *args: str, text: str = CONFIG):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(text)
    return CliRunner().invoke(main, ["estimate", "-c", str(cfg), *args])


def test_json_anchors_and_mixed_pass(tmp_path: Path) -> None:
    res = _run(tmp_path, "--prefill", "1x1024", "--decode", "1x1025", "--format", "json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["model"], out["backend"], out["backend_version"], out["tensor_parallel"]) == (
        "Qwen/Qwen3-32B",
        "vllm",
        "0.24.0",
        4,
    )
    pre, dec = out["passes"]
    assert pre["kind"] == "prefill" and (pre["batch"], pre["isl"], pre["prefix_tokens"]) == (
        1,
        1024,
        0,
    )
    assert abs(pre["total_ms"] - PREFILL_1x1024) < 1e-9
    assert dec["kind"] == "decode" and (dec["batch"], dec["ctx"]) == (1, 1025)
    assert abs(dec["total_ms"] - DECODE_1x1025) < 1e-9
    for ps, side in ((pre, "context_"), (dec, "generation_")):
        names = [o["op"] for o in ps["ops"]]
        for op in (
            "embedding",
            "qkv_gemm",
            "attention",
            "gate_ffn1_gemm",
            "ffn2_gemm",
            "logits_gemm",
            "ar_1",
            "ar_2",
        ):
            assert side + op in names
        assert sum(o["ms"] for o in ps["ops"]) == pytest.approx(ps["total_ms"], rel=1e-12)
        assert sum(o["share_pct"] for o in ps["ops"]) == pytest.approx(100.0, rel=1e-12)
    (mixed,) = out["mixed"]
    assert mixed["additive_ms"] == pre["total_ms"] + dec["total_ms"]
    assert (mixed["prefill_ns"], mixed["decode_ns"]) == (22925220, 7463278)
    assert mixed["duration_ms"] == (22925220 + 7463278) / 1e6


def test_table_output(tmp_path: Path) -> None:
    res = _run(tmp_path, "--prefill", "1x1024", "--decode", "1x1025")
    assert res.exit_code == 0, res.output
    text = res.stdout
    assert "Qwen/Qwen3-32B" in text and "TP 4" in text
    assert "prefill 1x1024" in text and "22.925219513 ms" in text
    assert "decode 1x1025" in text and "7.463278407 ms" in text
    assert "context_attention" in text and "generation_attention" in text
    assert "share %" in text
    assert "30.388497920 ms additive" in text and "30.388498 ms" in text


def test_prefix_and_batched_decode(tmp_path: Path) -> None:
    # docs/timing.md 1.1 / 1.3: 512 new on a 512 prefix; decode batch 64 at kv 1100
    res = _run(tmp_path, "--prefill", "1x512+512", "--decode", "64x1100", "--format", "json")
    assert res.exit_code == 0, res.output
    pre, dec = json.loads(res.stdout)["passes"]
    assert (pre["new_tokens"], pre["prefix_tokens"], pre["isl"]) == (512, 512, 1024)
    assert round(pre["total_ms"], 6) == 15.663027
    assert round(dec["total_ms"], 5) == 9.17656


def test_only_one_kind_has_no_mixed_pass(tmp_path: Path) -> None:
    res = _run(tmp_path, "--decode", "1x1025", "--decode", "8x2048", "--format", "json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert [p["shape"] for p in out["passes"]] == ["1x1025", "8x2048"]
    assert out["mixed"] == []


def test_set_override_applies(tmp_path: Path) -> None:
    res = _run(
        tmp_path,
        "--set",
        "engine.workers.aggregated.parallelism.tensor=2",
        "--decode",
        "1x1025",
        "--format",
        "json",
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["tensor_parallel"] == 2
    assert out["passes"][0]["total_ms"] > DECODE_1x1025


@pytest.mark.parametrize(
    "args, flag",
    [
        (("--prefill", "0x1024"), "--prefill"),
        (("--prefill", "1x0+512"), "--prefill"),
        (("--prefill", "1x1024+"), "--prefill"),
        (("--prefill", "abc"), "--prefill"),
        (("--decode", "0x10"), "--decode"),
        (("--decode", "4x0"), "--decode"),
        (("--decode", "4x10+2"), "--decode"),
        ((), "--prefill / --decode"),
        (
            (
                "--prefill",
                "1x8",
                "--prefill",
                "2x8",
                "--decode",
                "1x9",
                "--decode",
                "2x9",
                "--decode",
                "3x9",
            ),
            "--prefill / --decode",
        ),
    ],
)
def test_bad_shapes_exit_2_naming_the_flag(tmp_path: Path, args, flag: str) -> None:
    res = _run(tmp_path, *args)
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0], res.stderr
    assert res.stdout == ""


def test_non_default_timing_exits_2(tmp_path: Path) -> None:
    text = CONFIG.replace(
        "timing: {type: default}", "timing: {type: fixed, prefill_ms: 7.3, decode_ms: 1.7}"
    )
    res = _run(tmp_path, "--decode", "1x1025", text=text)
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "timing" in lines[0] and "type: default" in lines[0]


def test_round_ns_matches_the_exact_rational_rule() -> None:
    """The kernel's float-only rounding equals the exact-rational reference, ties included
    (polynomial times land on decimal ties such as 30.4689625 ms, whose double is a hair below
    the tie), and the estimate uses the kernel's rule."""
    import random

    from aisim.estimate import round_ns
    from aisim.kernels.units import round_ns as kernel_round_ns
    from tests.reference.scheduler import round_ns as exact_round_ns

    kernel = getattr(kernel_round_ns, "py_func", kernel_round_ns)
    rng = random.Random(7)
    values = [0.0, -1.0, PREFILL_1x1024, DECODE_1x1025, 0.0000005, 0.0000015, 0.0000025]
    values += [30.4689625, 20.5744625, 1.2345674999, 1e3 / 3, 7.3, 1.7]
    values += [rng.randint(0, 10**10) * 5e-7 for _ in range(3000)]  # half-ns ties in decimal
    values += [rng.random() * 10 ** rng.randint(-6, 7) for _ in range(3000)]
    for ms in values:
        assert int(kernel(ms)) == exact_round_ns(ms) == round_ns(ms), ms
    assert exact_round_ns(30.4689625) == 30468962  # floor(ms * 1e6 + 0.5) would give ...63


def test_detail_memory_shows_the_capacity_terms(tmp_path: Path) -> None:
    from tests.test_capacity_default import CFG

    cfg = tmp_path / "cap.yaml"
    cfg.write_text(CFG)
    res = CliRunner().invoke(main, ["estimate", "-c", str(cfg), "--detail", "memory"])
    assert res.exit_code == 0, res.output
    assert "weights" in res.stdout and "36,412" in res.stdout
    res = CliRunner().invoke(
        main,
        [
            "estimate",
            "-c",
            str(cfg),
            "--detail",
            "memory",
            "--decode",
            "8x1100",
            "--format",
            "json",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["memory"]["estimated_num_gpu_blocks"] == 36412
    assert out["passes"][0]["kind"] == "decode"


def test_disaggregated_config_prices_the_named_pool(tmp_path: Path) -> None:
    """A P/D config's pools can differ, so --role names the one whose deployment prices."""
    from tests.analysis_configs import PD_OP_LEVEL

    text = PD_OP_LEVEL.replace(
        "parallelism: {replicas: 2, tensor: 4}", "parallelism: {replicas: 2, tensor: 2}"
    )
    res = _run(tmp_path, "--decode", "1x1025", text=text)
    assert res.exit_code == 2 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "--role prefill" in lines[0] and "--role decode" in lines[0]
    res = _run(tmp_path, "--decode", "1x1025", "--role", "aggregated", text=text)
    assert res.exit_code == 2 and "no 'aggregated' worker" in res.stderr
    out = {}
    for role in ("prefill", "decode"):
        res = _run(tmp_path, "--decode", "1x1025", "--role", role, "--format", "json", text=text)
        assert res.exit_code == 0, res.output
        out[role] = json.loads(res.stdout)
        assert out[role]["role"] == role
    assert (out["prefill"]["tensor_parallel"], out["decode"]["tensor_parallel"]) == (4, 2)
    # TP4 is the aggregated anchor's deployment: the prefill pool prices the same decode pass
    assert abs(out["prefill"]["passes"][0]["total_ms"] - DECODE_1x1025) < 1e-9
    assert out["decode"]["passes"][0]["total_ms"] > DECODE_1x1025
