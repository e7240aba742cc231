"""DeepSeek-V3 / R1 on TRT-LLM, per op, against AISimulate 0.13.

Golden figures: tests/golden_optable/deepseek_v3_trtllm.json, AISimulate's own per-op
evaluation (`static_phase_diagnostics`, run outside the repo) for attention-DP 8 (V3, R1) and
attention-TP 8 (V3), each with expert parallelism 8: prefills with and without a cached prefix,
on and off the context MLA kernel's grid (ragged staircase edges, the hold beyond isl 32768 or
batch 256), GEMM m between 16384 and 32768 (where the kv_b GEMM's IDW drops the neighbour site
whose m-curve ends at 16384), and decodes. Latency goes through `aisim estimate` (the CLI),
energy through the energy pricer; both within 1e-9 relative per op and in total.
"""

from __future__ import annotations

from tests.moe_per_op import PerOpGolden, per_op_tests

GOLDEN = PerOpGolden("deepseek_v3_trtllm.json", backend="trtllm")
test_per_op_latency, test_per_op_energy = per_op_tests(GOLDEN)


def test_block_is_one_reported_op() -> None:
    """AISimulate reports the composed prefill block and the decode module as `*_mla_block`."""
    (_shape, got), *_rest = GOLDEN.estimate("DeepSeek-V3-trtllm-tp1-dp8-mtp1-ep8", "prefill")
    assert "context_mla_block" in {op["op"] for op in got["ops"]}
    assert "context_attention" not in {op["op"] for op in got["ops"]}
