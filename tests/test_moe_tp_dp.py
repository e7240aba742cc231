"""MoE models with attention tensor x attention-DP groups, per op, against AISimulate 0.13.

Golden figures: tests/golden_optable/moe_tp_dp.json, AISimulate's own per-op evaluation
(`static_phase_diagnostics`, run outside the repo) for DeepSeek-V3 (MLA; vLLM TP2 x DP4 and
TP4 x DP2, TRT-LLM TP2 x DP4), DeepSeek-V3.2 (DSA; TRT-LLM TP2 x DP4) and Qwen3 MoE (GQA;
Qwen3-30B-A3B vLLM TP2 x DP4 x EP8 and TRT-LLM TP4 x DP2 x moe_tensor 8, Qwen3-235B-A22B
TRT-LLM TP2 x DP4 x EP8): prefills with and without a cached prefix, one far beyond the
allreduce curve (8 x 16384: the merged dispatch curve's hold), decodes up to batch 512.
Latency through `aisim estimate` (the CLI), energy through the energy pricer; 1e-9 relative.
The rule itself: aisim/timing/dispatch_tpdp.py.
"""

from __future__ import annotations

import json
import tempfile
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from aisim.cli import main
from aisim.timing.dispatch_tpdp import summed_curve

HERE = Path(__file__).parent
GOLDEN = json.loads((HERE / "golden_optable" / "moe_tp_dp.json").read_text())
REL = 1e-9
VERSIONS = {"vllm": "0.24.0", "trtllm": "1.3.0rc20"}

CONFIG = """\
traffic:
  source: {{type: synthetic, input_tokens: 1024, output_tokens: 8}}
  load: {{type: concurrency, concurrency: 8}}
  stop: {{requests: 8}}
engine:
  mode: aggregated
  model: {model}
  hardware: b200_sxm
  backend: {backend}
  backend_version: "{version}"
  estimation_mode: op_level
  database_mode: SILICON
  fallback_policy: deny
  enable_shared_layer: true
  workers:
    aggregated:
      parallelism: {{replicas: 1, tensor: {tensor}, pipeline: 1, attention_data: {attention_data},
                    moe_tensor: {moe_tensor}, moe_expert: {moe_expert}}}
      scheduler: {{max_batched_tokens: 8192, max_sequences: 256}}
      kv_cache: {{block_size: 64, prefix_caching: true, capacity: {{type: fixed, blocks: 16384}}}}
      timing: {{type: default}}
"""


def _name(d: dict) -> str:
    return (
        f"{d['model'].split('/')[1]}-{d['backend']}-tp{d['tensor']}-dp{d['attention_data']}"
        f"-mtp{d['moe_tensor']}-ep{d['moe_expert']}"
    )


DEPLOYMENTS = {_name(d): d for d in GOLDEN["deployments"]}


@cache
def _config_path(name: str) -> str:
    d = DEPLOYMENTS[name]
    path = Path(tempfile.mkdtemp(prefix="aisim-tpdp-")) / "cfg.yaml"
    path.write_text(CONFIG.format(version=VERSIONS[d["backend"]], **d))
    return str(path)


@cache
def _estimate(name: str, kind: str) -> tuple:
    shapes = sorted(DEPLOYMENTS[name][kind])
    args = [a for s in shapes for a in (f"--{kind}", s)]
    res = CliRunner().invoke(
        main, ["estimate", "-c", _config_path(name), *args, "--format", "json"]
    )
    assert res.exit_code == 0, res.output
    passes = [p for p in json.loads(res.stdout)["passes"] if p["kind"] == kind]
    return tuple(zip(shapes, passes, strict=True))


def _close(got: float, ref: float) -> bool:
    return abs(got - ref) <= REL * max(abs(ref), 1e-12)


@pytest.mark.golden
@pytest.mark.parametrize("kind", ["prefill", "decode"])
@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_per_op_latency(name: str, kind: str) -> None:
    bad = []
    for shape, got in _estimate(name, kind):
        ref = DEPLOYMENTS[name][kind][shape]
        ours = {op["op"]: op["ms"] for op in got["ops"]}
        assert set(ours) == set(ref), (shape, sorted(set(ours) ^ set(ref)))
        bad += [
            f"{shape} {op}: {ours[op]} vs {ms}"
            for op, (ms, _e) in ref.items()
            if not _close(ours[op], ms)
        ]
        total = sum(ms for ms, _e in ref.values())
        if not _close(got["total_ms"], total):
            bad.append(f"{shape} total: {got['total_ms']} vs {total}")
    assert not bad, "\n".join(bad)


@pytest.mark.golden
@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_per_op_energy(name: str) -> None:
    from aisim.config.load import load_config
    from aisim.engine.spec import resolve
    from aisim.timing.energy import EnergyPricer
    from aisim.timing.provider import plan_for

    pricer = EnergyPricer(plan_for(resolve(load_config(_config_path(name))), "test"))
    names = pricer.plan.op_names
    bad = []
    for kind in ("prefill", "decode"):
        for shape, ref in DEPLOYMENTS[name][kind].items():
            b, rest = shape.split("x")
            if kind == "prefill":
                new, _, prefix = rest.partition("+")
                pricer.prefill(int(b), int(new) + int(prefix or 0), int(prefix or 0))
            else:
                pricer.decode(int(b), int(rest))
            for op, (_ms, energy) in ref.items():
                got = float(pricer.energy_wms[names.index(op)])
                if not _close(got, energy):
                    bad.append(f"{kind} {shape} {op}: {got} vs {energy}")
    assert not bad, "\n".join(bad)


def _lookup(x: np.ndarray, y: np.ndarray, e: float) -> float:
    from aisim.kernels.optime_comm import allreduce_latency_ms

    return float(allreduce_latency_ms(e, x, y, 8.0, 2.0, 900e9))


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
