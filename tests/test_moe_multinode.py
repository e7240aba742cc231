"""MoE groups over more than 8 GPUs (beyond one b200 node), per op, against AISimulate 0.13.

Golden figures: tests/golden_optable/moe_multinode.json, AISimulate's own per-op evaluation
(`static_phase_diagnostics`, run outside the repo) for DeepSeek-V3 (vLLM TP8 x DP2, DP16,
DP32, TP16; TRT-LLM TP8 x DP2), DeepSeek-R1 TRT-LLM TP4 x DP4, DeepSeek-V3.2 DP16 (vLLM,
TRT-LLM) and Qwen3 MoE (235B vLLM DP16, TRT-LLM TP16; 30B TRT-LLM TP2 x DP8, vLLM TP4 x DP4):
prefills with and without a cached prefix, one far beyond the curves (8 x 16384), decodes up
to batch 512. Latency through `aisim estimate` (the CLI), energy through the energy pricer;
1e-9 relative. The rule itself: aisim/timing/multinode.py.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from aisim.cli import main
from aisim.timing.multinode import group_scale
from aisim.timing.system import GpuSystem
from tests.moe_per_op import CONFIG, VERSIONS, PerOpGolden, per_op_tests

GOLDEN = PerOpGolden("moe_multinode.json")
DEPLOYMENTS = GOLDEN.deployments


test_per_op_latency, test_per_op_energy = per_op_tests(GOLDEN)


NODE = GpuSystem(
    mem_bw=8e12,
    mem_eff=1.0,
    mem_const_s=0.0,
    intra_node_bw=900e9,
    inter_node_bw=50e9,
    p2p_latency_s=0.0,
    gpus_per_node=8,
    flops={},
)


def test_group_scale() -> None:
    """Measured sizes keep their curve; beyond one node the ring growth times the bandwidth
    ratio (intra / inter = 18 on b200_sxm)."""
    assert group_scale(8, 8, NODE) == 1.0
    assert group_scale(4, 8, NODE) == 1.0
    assert group_scale(16, 8, NODE) == pytest.approx(15 / 7 * 8 / 16 * 18, rel=1e-15)
    assert group_scale(32, 8, NODE) == pytest.approx(31 / 7 * 8 / 32 * 18, rel=1e-15)
    # measured beyond one node already: no bandwidth step, ring growth only
    assert group_scale(32, 16, NODE) == pytest.approx(31 / 15 * 16 / 32, rel=1e-15)


def test_group_bandwidth_tiers() -> None:
    """A group's link: NVLink within a node, the inter-node link within a rack (or beyond the
    node when the system has no racks), the inter-rack link beyond a rack."""
    assert NODE.group_bw(8) == 900e9
    assert NODE.group_bw(16) == 50e9
    assert NODE.group_bw(4096) == 50e9
    rack = dataclasses.replace(NODE, gpus_per_node=4, gpus_per_rack=72, inter_rack_bw=25e9)
    assert [rack.group_bw(n) for n in (4, 8, 72, 144)] == [900e9, 50e9, 50e9, 25e9]
    no_rack_bw = dataclasses.replace(rack, inter_rack_bw=None)
    assert no_rack_bw.group_bw(144) == 50e9


SHARED = "  enable_shared_layer: true\n"
MOE_OVERRIDE = CONFIG.replace(SHARED, SHARED + "{extra}")


@pytest.mark.parametrize(
    ("model", "extra", "needle"),
    [
        # a dense model: AISimulate refuses EPLB / wide-EP slots ("require an MoE model")
        ("Qwen/Qwen3-32B", "  enable_eplb: true\n", "engine.enable_eplb: expert load balancing"),
        ("Qwen/Qwen3-32B", "  wideep_num_slots: 64\n", "engine.wideep_num_slots: wide-EP"),
        # DeepEP / MegaMoE: AISimulate takes moe_backend with backend sglang only
        ("deepseek-ai/DeepSeek-V3", "  moe_backend: deepep_moe\n", "sglang only"),
    ],
)
def test_moe_controls_refused_in_one_line(
    tmp_path: Path, model: str, extra: str, needle: str
) -> None:
    cfg = tmp_path / "bad.yaml"
    moe = model.startswith("deepseek")
    cfg.write_text(
        MOE_OVERRIDE.format(
            extra=extra,
            model=model,
            backend="vllm",
            version="0.24.0",
            tensor=1 if moe else 4,
            attention_data=8 if moe else 1,
            moe_tensor=1,
            moe_expert=8 if moe else 1,
        )
    )
    res = CliRunner().invoke(main, ["estimate", "-c", str(cfg), "--decode", "8x1100"])
    assert res.exit_code == 2, res.output
    text = res.output.strip()
    assert needle in text and "Traceback" not in text and len(text.splitlines()) == 1, text


@pytest.mark.golden
def test_eplb_and_slots_price_as_without(tmp_path: Path) -> None:
    """enable_eplb / wideep_num_slots on an MoE model: same per-op figures (AISimulate 0.13)."""
    name = "DeepSeek-V3-vllm-tp8-dp2-mtp1-ep16"
    d = DEPLOYMENTS[name]
    cfg = tmp_path / "eplb.yaml"
    cfg.write_text(
        MOE_OVERRIDE.format(
            extra="  enable_eplb: true\n  wideep_num_slots: 288\n",
            version=VERSIONS[d["backend"]],
            **{
                k: d[k]
                for k in (
                    "model",
                    "backend",
                    "tensor",
                    "attention_data",
                    "moe_tensor",
                    "moe_expert",
                )
            },
        )
    )
    shapes = sorted(d["decode"])
    args = [a for s in shapes for a in ("--decode", s)]
    res = CliRunner().invoke(main, ["estimate", "-c", str(cfg), *args, "--format", "json"])
    assert res.exit_code == 0, res.output
    passes = json.loads(res.stdout)["passes"]
    without = GOLDEN.estimate(name, "decode")
    assert [p["total_ms"] for p in passes] == [p["total_ms"] for _s, p in without]
