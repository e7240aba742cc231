"""DeepSeek-V3 / R1 on TRT-LLM, per op, against AISimulate 0.13 (issue 6).

Golden figures: tests/golden_optable/deepseek_v3_trtllm.json, AISimulate's own per-op
evaluation (`static_phase_diagnostics`, run outside the repo) for attention-DP 8 (V3, R1) and
attention-TP 8 (V3), each with expert parallelism 8: prefills with and without a cached prefix,
on and off the context MLA kernel's grid (ragged staircase edges, the hold beyond isl 32768 or
batch 256), GEMM m between 16384 and 32768 (where the kv_b GEMM's IDW drops the neighbour site
whose m-curve ends at 16384), and decodes. Latency goes through `aisim estimate` (the CLI),
energy through the energy pricer; both within 1e-9 relative per op and in total.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
from click.testing import CliRunner

from aisim.cli import main

HERE = Path(__file__).parent
GOLDEN = json.loads((HERE / "golden_optable" / "deepseek_v3_trtllm.json").read_text())
REL = 1e-9

CONFIG = """\
traffic:
  source: {{type: synthetic, input_tokens: 1024, output_tokens: 8}}
  load: {{type: concurrency, concurrency: 8}}
  stop: {{requests: 8}}
engine:
  mode: aggregated
  model: {model}
  hardware: b200_sxm
  backend: trtllm
  backend_version: "1.3.0rc20"
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
DEPLOYMENTS = {f"{d['model'].split('/')[1]}-tp{d['tensor']}-dp{d['attention_data']}": d
               for d in GOLDEN["deployments"]}


@cache
def _config_path(name: str) -> str:
    import tempfile

    d = DEPLOYMENTS[name]
    path = Path(tempfile.mkdtemp(prefix="aisim-dsv3-trt-")) / "cfg.yaml"
    path.write_text(CONFIG.format(**{k: d[k] for k in ("model", "tensor", "attention_data",
                                                       "moe_tensor", "moe_expert")}))
    return str(path)


@cache
def _estimate(name: str, kind: str) -> tuple:
    shapes = sorted(DEPLOYMENTS[name][kind])
    args = [a for s in shapes for a in (f"--{kind}", s)]
    res = CliRunner().invoke(main, ["estimate", "-c", _config_path(name), *args, "--format",
                                    "json"])
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
        bad += [f"{shape} {op}: {ours[op]} vs {ms}" for op, (ms, _e) in ref.items()
                if not _close(ours[op], ms)]
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
    for kind, cases in (("prefill", DEPLOYMENTS[name]["prefill"]),
                        ("decode", DEPLOYMENTS[name]["decode"])):
        for shape, ref in cases.items():
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


def test_block_is_one_reported_op() -> None:
    """AISimulate reports the composed prefill block and the decode module as `*_mla_block`."""
    (_shape, got), *_rest = _estimate("DeepSeek-V3-tp1-dp8", "prefill")
    assert "context_mla_block" in {op["op"] for op in got["ops"]}
    assert "context_attention" not in {op["op"] for op in got["ops"]}
