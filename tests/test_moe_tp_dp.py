"""MoE models with attention tensor x attention-DP groups, per op, against AISimulate 0.13.

Golden figures: tests/golden_optable/moe_tp_dp.json, AISimulate's own per-op evaluation
(`static_phase_diagnostics`, run outside the repo) for DeepSeek-V3 (MLA; vLLM TP2 x DP4 and
TP4 x DP2, TRT-LLM TP2 x DP4), DeepSeek-V3.2 (DSA; TRT-LLM TP2 x DP4) and Qwen3 MoE (GQA;
Qwen3-30B-A3B vLLM TP2 x DP4 x EP8 and TRT-LLM TP4 x DP2 x moe_tensor 8, Qwen3-235B-A22B
TRT-LLM TP2 x DP4 x EP8): prefills with and without a cached prefix, one far beyond the
allreduce curve (8 x 16384: the merged dispatch curve's hold), decodes up to batch 512.
Latency through `aisim estimate` (the CLI), energy through the energy pricer; 1e-9 relative.
The rule itself: aisim/timing/leaf_dispatch.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from click.testing import CliRunner

from aisim.cli import main
from aisim.timing.leaf_dispatch import summed_curve
from tests.moe_per_op import CONFIG, PerOpGolden, per_op_tests

GOLDEN = PerOpGolden("moe_tp_dp.json")
DEPLOYMENTS = GOLDEN.deployments


test_per_op_latency, test_per_op_energy = per_op_tests(GOLDEN)


def _lookup(x: np.ndarray, y: np.ndarray, e: float) -> float:
    from aisim.kernels.optime_comm import Curve, allreduce_le

    return float(allreduce_le(e, Curve(x, y, np.zeros(x.shape[0])), 8.0, 2.0, 900e9)[0])


def test_summed_curve_is_the_sum_of_two_lookups() -> None:
    """Inside both curves, inside one and held on the other, below and above both: the merged
    curve read by the kernel equals the two kernel lookups added (float rounding only)."""
    ax = np.array([128.0, 1024.0, 8192.0, 65536.0])
    ay = np.array([0.010, 0.012, 0.030, 0.200])
    bx = np.array([512.0, 4096.0, 262144.0])  # another grid, reaching further
    by = np.array([0.020, 0.025, 0.900])
    mx, my = summed_curve(ax, ay, bx, by)
    assert list(mx) == sorted(set(ax) | set(bx))
    for e in (1.0, 100.0, 128.0, 300.0, 1024.0, 5000.0, 65536.0, 100000.0, 262144.0, 1e7):
        want = _lookup(ax, ay, e) + _lookup(bx, by, e)
        assert abs(_lookup(mx, my, e) - want) <= 1e-14 * want, e


def test_missing_moe_slice_is_named(tmp_path: Path) -> None:
    """Qwen3-30B-A3B on vLLM has no moe_tensor 2 x moe_expert 2 slice (AISimulate fails on the
    same MoeKey): one line naming it."""
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(
        CONFIG.format(
            model="Qwen/Qwen3-30B-A3B",
            backend="vllm",
            version="0.24.0",
            tensor=2,
            attention_data=2,
            moe_tensor=2,
            moe_expert=2,
        )
    )
    res = CliRunner().invoke(main, ["estimate", "-c", str(cfg), "--decode", "8x1100"])
    assert res.exit_code == 2
    text = res.output.strip()
    assert "moe_tp=2 moe_ep=2" in text and "MoE perf data missing" in text, text
    assert "Traceback" not in text and len(text.splitlines()) == 1
