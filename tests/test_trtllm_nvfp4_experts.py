"""TRT-LLM NVFP4 experts (docs/timing.md 4.7, 3.7): passes of at most 128 global tokens read the
min-latency kernel's rows of the moe table, larger ones the default rows; under attention-DP the
pre-dispatch all_gather moves the NVFP4-quantized inputs (0.5625 bytes per element).

Golden figures: tests/golden_optable/trtllm_nvfp4_experts.json, AISimulate's own per-op
evaluation of Qwen3-30B-A3B on b200_sxm at TP4 x EP4 and attention-DP 4 x EP4, on both sides of
the 128-token threshold (decode 128 / 129 at TP4, 32 / 33 per rank at DP4, prefills of 100 and
129 tokens).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

REL = 1e-9
GOLDEN = json.loads(
    (Path(__file__).parent / "golden_optable" / "trtllm_nvfp4_experts.json").read_text()
)
CONFIG = """\
traffic:
  source: {{type: synthetic, input_tokens: 100, output_tokens: 8}}
  load: {{type: concurrency, concurrency: 8}}
  stop: {{requests: 8}}
engine:
  mode: aggregated
  model: Qwen/Qwen3-30B-A3B
  hardware: b200_sxm
  backend: trtllm
  backend_version: "1.3.0rc20"
  estimation_mode: op_level
  moe_quant_mode: nvfp4
  workers:
    aggregated:
      parallelism: {{tensor: {tensor}, attention_data: {attention_data}, moe_expert: {moe_expert}}}
      scheduler: {{max_batched_tokens: 8192, max_sequences: 256}}
      kv_cache: {{block_size: 64, capacity: {{type: fixed, blocks: 4096}}}}
      timing: {{type: default}}
"""
CASES = [(i, shape) for i, d in enumerate(GOLDEN["deployments"]) for shape in sorted(d["shapes"])]


@cache
def _pricer(i: int, folder: str):
    from aisim.config.load import load_config
    from aisim.engine.spec import resolve
    from aisim.timing.pricer import PassPricer
    from aisim.timing.provider import plan_for

    d = GOLDEN["deployments"][i]
    path = Path(folder) / f"nvfp4-{i}.yaml"
    path.write_text(CONFIG.format(**{k: d[k] for k in ("tensor", "attention_data", "moe_expert")}))
    return PassPricer(plan_for(resolve(load_config(str(path))), "test"))


@pytest.mark.golden
@pytest.mark.parametrize(("i", "shape"), CASES, ids=[f"{i}-{s}" for i, s in CASES])
def test_moe_ops_match_aisimulate(i: int, shape: str, tmp_path_factory) -> None:
    pricer = _pricer(i, str(tmp_path_factory.getbasetemp()))
    phase, dims = shape.split()
    b, n = (int(v) for v in dims.split("x"))
    got = dict(
        pricer.prefill_breakdown(b, n) if phase == "prefill" else pricer.decode_breakdown(b, n)
    )
    for op, ref in GOLDEN["deployments"][i]["shapes"][shape].items():
        assert abs(got[op] - ref) <= REL * abs(ref), (op, got[op], ref)
