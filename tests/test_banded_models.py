"""Models with windowed attention layers (docs/timing.md 3.4, 7.5): gpt-oss (sliding-window
layers, MXFP4 experts, KV memory holding one window) and Llama-4 (chunked layers, interleaved
dense / MoE layers).

Figures: AISimulate 0.13.0, pinned in tests/golden_optable/banded_models_single_request.json
(per op) and quoted below (memory model); whole runs are the `moe-gpt-oss-*`, `moe-llama4-*`
and `pd-*` goldens of these models.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from aisim.cli import main
from aisim.memory import kv_blocks_from_memory
from aisim.models import load_model
from tests.single_pass import estimate, one_request_ops

HERE = Path(__file__).parent
PINNED = json.loads((HERE / "golden_optable" / "banded_models_single_request.json").read_text())
REL = 1e-9


def _write(tmp_path: Path, config: dict) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _estimate(tmp_path: Path, config: dict, *args: str) -> dict:
    return estimate(_write(tmp_path, config), *args)


def _refusal(tmp_path: Path, config: dict) -> str:
    """The one error line `aisim predict` refuses the config with (exit code 2)."""
    res = CliRunner().invoke(main, ["predict", "-c", str(_write(tmp_path, config))])
    assert res.exit_code == 2, res.output
    (error,) = [line for line in res.output.splitlines() if line.startswith("aisim: error")]
    return error


@pytest.mark.parametrize("name", sorted(PINNED["cases"]))
def test_every_op_matches_aisimulate(name: str, tmp_path: Path) -> None:
    case = PINNED["cases"][name]
    isl = case["config"]["traffic"]["source"]["input_tokens"]
    out = _estimate(tmp_path, case["config"], "--prefill", f"1x{isl}", "--decode", f"1x{isl + 1}")
    totals = {p["kind"]: p["total_ms"] for p in out["passes"]}
    assert totals["prefill"] == pytest.approx(case["prefill_ms"], rel=REL)
    assert totals["decode"] == pytest.approx(case["decode_ms"], rel=REL)
    ops = {op["op"]: op["ms"] for p in out["passes"] for op in p["ops"]}
    assert ops.keys() == case["ops"].keys()
    for op, ms in case["ops"].items():
        assert ops[op] == pytest.approx(ms, rel=REL, abs=1e-12), op


def test_banded_layers_change_the_attention_price(tmp_path: Path) -> None:
    """Read as full attention on every layer, gpt-oss-120b's context attention would be
    1.312737 ms at TP4 and 1,024 tokens; its 18 banded layers make it 1.185345 ms."""
    case = PINNED["cases"]["vllm-120b-tp4-ep4-1024"]
    raw = json.loads((HERE.parent / "data/models/openai--gpt-oss-120b_config.json").read_text())
    raw["layer_types"] = ["full_attention"] * raw["num_hidden_layers"]
    (tmp_path / "config.json").write_text(json.dumps(raw))
    config = json.loads(json.dumps(case["config"]))
    config["engine"]["model"] = str(tmp_path / "config.json")
    out = _estimate(tmp_path, config, "--prefill", "1x1024")
    ops = {op["op"]: op["ms"] for op in out["passes"][0]["ops"]}
    assert ops["context_attention"] == pytest.approx(1.312737, abs=1e-6)
    assert case["ops"]["context_attention"] == pytest.approx(1.185345, abs=1e-6)


def test_checkpoint_is_read_as_banded_mxfp4_experts() -> None:
    model = load_model("openai/gpt-oss-120b")
    assert (model.num_layers, model.banded_layers, model.sliding_window) == (36, 18, 128)
    assert (model.num_experts, model.moe_intermediate_size) == (128, 2880)
    assert model.weight_quant == "w4a16_mxfp4" and model.experts_only_quant
    small = load_model("openai/gpt-oss-20b")
    assert (small.num_layers, small.banded_layers, small.num_experts) == (24, 12, 32)


def test_layer_types_of_other_models_are_read_as_full_attention(tmp_path: Path) -> None:
    """AISimulate 0.13 reads `layer_types` only for gpt-oss: a Qwen3-8B given alternating
    sliding layers of window 128 is priced as without them (oracle: context_attention
    2.330601 ms at TP4 and 1,024 tokens either way)."""
    raw = json.loads((HERE.parent / "data/models/Qwen--Qwen3-8B_config.json").read_text())
    raw.update(sliding_window=128, layer_types=["sliding_attention", "full_attention"] * 18)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    assert load_model(str(path)).banded_layers == 0


def test_kv_memory_holds_one_window_of_the_banded_layers() -> None:
    """AISimulate 0.13, gpt-oss-120b vLLM TP4 x EP4 on b200_sxm (--detail memory): budget
    153,979,359,232 B, kv_size_per_token_bytes 18,432, 16,707,701 tokens, 261,057 blocks."""
    est = kv_blocks_from_memory(
        load_model("openai/gpt-oss-120b"),
        backend="vllm",
        block_size=64,
        tensor=4,
        moe_expert=4,
        gpu_memory_bytes=193_273_528_320,
    )
    assert est.kv_budget_bytes == 153_979_359_232
    assert est.kv_bytes_per_token == 18_432
    assert (est.kv_tokens, est.blocks) == (16_707_701, 261_057)


def test_mxfp4_checkpoint_with_quantized_attention_is_refused(tmp_path: Path) -> None:
    raw = json.loads((HERE.parent / "data/models/openai--gpt-oss-120b_config.json").read_text())
    raw["quantization_config"]["modules_to_not_convert"] = ["lm_head"]
    (tmp_path / "config.json").write_text(json.dumps(raw))
    config = json.loads(json.dumps(PINNED["cases"]["vllm-120b-tp4-ep4-1024"]["config"]))
    config["engine"]["model"] = str(tmp_path / "config.json")
    error = _refusal(tmp_path, config)
    assert "weights mxfp4" in error and "checkpoint" in error


def test_llama4_is_read_as_half_chunked_layers() -> None:
    scout = load_model("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    assert (scout.num_layers, scout.banded_layers, scout.sliding_window) == (48, 24, 8192)
    assert (scout.num_experts, scout.moe_layer_step) == (16, 1)
    maverick = load_model("meta-llama/Llama-4-Maverick-17B-128E-Instruct")
    assert (maverick.moe_layer_step, maverick.dense_intermediate_size) == (2, 16384)


@pytest.mark.parametrize(
    ("model", "tensor", "weights", "tokens", "blocks"),
    [
        # AISimulate 0.13, vLLM on b200_sxm, 16,384 batched tokens (--detail memory)
        ("meta-llama/Llama-4-Scout-17B-16E-Instruct", 4, 52_422_410_240, 2_370_519, 37_039),
        ("meta-llama/Llama-4-Maverick-17B-128E-Instruct", 8, 101_260_738_560, 2_753_802, 43_028),
    ],
)
def test_llama4_kv_memory(model: str, tensor: int, weights: int, tokens: int, blocks: int) -> None:
    """Embedding whole, dense FFNs between the MoE layers, no shared expert, the dense
    activation coefficient, and every token of the chunked layers kept."""
    est = kv_blocks_from_memory(
        load_model(model),
        backend="vllm",
        block_size=64,
        tensor=tensor,
        moe_expert=tensor,
        gpu_memory_bytes=193_273_528_320,
        max_batched_tokens=16384,
    )
    assert est.weights_bytes == weights
    assert est.activations_bytes == 838_860_800
    assert (est.kv_tokens, est.blocks) == (tokens, blocks)


@pytest.mark.parametrize(
    ("model_id", "context_ms", "generation_ms"),
    [
        # AISimulate 0.13, one request of 4,096 tokens at attention-DP 8 on vLLM 0.24.0
        ("zai-org/GLM-5.2", 205.4847, 10.002000000000002),
        ("zai-org/GLM-5", 225.02999999999997, 12.3162),  # every layer runs its own indexer
    ],
)
def test_shared_indexer_layers_read_the_skip_indexer_rows_on_vllm(
    tmp_path: Path, model_id: str, context_ms: float, generation_ms: float
) -> None:
    """GLM-5.2's 57 of 78 DSA layers reuse another layer's indexer: on vLLM a layer's module
    is 21/78 x the full rows + 57/78 x the skip_indexer rows (goldens dsa-glm52-*-vllm-*); on
    TRT-LLM every layer reads the full rows (golden dsa-glm52-fp8-trtllm-dp8-ep8)."""
    assert load_model("zai-org/GLM-5.2").shared_indexer_layers == 57
    assert load_model("zai-org/GLM-5.1").shared_indexer_layers == 0
    golden = HERE / "golden" / "dsa-glm52-fp8-trtllm-dp8-ep8" / "config.yaml"
    config = yaml.safe_load(golden.read_text())
    config["engine"].update(backend="vllm", backend_version="0.24.0", model=model_id)
    ops = one_request_ops(_write(tmp_path, config), 4096)
    assert abs(ops["context_attention"] - context_ms) <= REL * context_ms, ops
    assert abs(ops["generation_attention"] - generation_ms) <= REL * generation_ms, ops


def test_a_one_point_moe_curve_is_refused(tmp_path: Path) -> None:
    """b300_sxm's vLLM moe table holds Maverick's bf16 power_law_1.01 rows at EP4 for one
    token count only; AISimulate extrapolates from it by a rule aisim lacks (1,839 ms a layer
    at 3,000 tokens), so the slice is a table miss."""
    case = PINNED["cases"]["vllm-llama4-maverick-tp8-ep8-10000"]
    config = json.loads(json.dumps(case["config"]))
    config["engine"]["hardware"] = "b300_sxm"
    config["engine"]["workers"]["aggregated"]["parallelism"].update(tensor=4, moe_expert=4)
    error = _refusal(tmp_path, config)
    assert "one token count only" in error and "moe_ep=4" in error
