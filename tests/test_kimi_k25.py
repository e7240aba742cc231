"""Kimi-K2.5: a multimodal wrapper whose language model is Kimi-K2 with int4 routed experts.

Per-op figures are AISimulate 0.13's (`predict --detail time`, one request of 1024 prompt
tokens and two output tokens on b200_sxm, vLLM 0.24.0); whole runs: the goldens
mla-kimi-k25-* (the memory model's capacity: mla-kimi-k25-vllm-tp8-default-capacity). TRT-LLM
1.3.0rc20 has no int4 expert rows (AISimulate: "MoE data missing").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from aisim.cli import main
from aisim.config import load_config, unsupported_features
from aisim.models import load_model
from tests.single_pass import one_request_ops

REL = 1e-9
GOLDEN = Path(__file__).parent / "golden" / "mla-kimi-k25-vllm-dp8-ep8" / "config.yaml"

# (tensor, attention_data) -> {op or pass total: AISimulate's ms}
ORACLE = {
    (1, 8): {
        "prefill": 310.11342068380895,
        "context_mla_block": 13.4383,
        "context_shared_gate_up_gemm": 2.515097853210237,
        "context_moe": 266.53584480285645,  # 61 x the int4_wo row at 8192 tokens, 4.36944 ms
        "decode": 14.60034094736935,
        "generation_mla_block": 4.4591,
        "generation_moe_overlap": 9.409929507348268,
    },
    (8, 1): {
        "prefill": 89.73753549719449,
        "context_moe": 66.97351198196411,
        "context_tp_allreduce": 6.980644683837891,
        "decode": 8.648584164681576,
        "generation_moe_overlap": 4.973221004383295,
    },
    (2, 4): {
        "prefill": 204.11741201027192,
        "context_moe": 161.15595035552977,
        "decode": 12.325642001707639,
    },
}


def _config(tmp_path: Path, tensor: int, adp: int, **sets: str) -> Path:
    text = GOLDEN.read_text().replace(
        "tensor: 1, pipeline: 1, attention_data: 8",
        f"tensor: {tensor}, pipeline: 1, attention_data: {adp}",
    )
    for old, new in sets.items():
        text = text.replace(old, new)
    path = tmp_path / f"k25-tp{tensor}-dp{adp}.yaml"
    path.write_text(text)
    return path


def test_the_wrapper_is_read_as_its_language_model() -> None:
    model = load_model("moonshotai/Kimi-K2.5")
    assert (model.model_type, model.num_layers, model.num_attention_heads) == ("kimi_k2", 61, 64)
    assert (model.num_experts, model.moe_intermediate_size, model.kv_lora_rank) == (384, 2048, 512)
    assert (model.weight_quant, model.kv_cache_quant, model.experts_only_quant) == (
        "int4_wo",
        "",
        True,
    )
    nvfp4 = load_model("nvidia/Kimi-K2.5-NVFP4")  # the wrapper's own ModelOpt declaration
    assert (nvfp4.num_layers, nvfp4.weight_quant, nvfp4.kv_cache_quant) == (61, "nvfp4", "fp8")
    assert not nvfp4.experts_only_quant


@pytest.mark.parametrize(("tensor", "adp"), sorted(ORACLE))
def test_per_op_prices_are_aisimulates(tmp_path: Path, tensor: int, adp: int) -> None:
    path = _config(tmp_path, tensor, adp)
    res = CliRunner().invoke(
        main,
        [
            "estimate",
            "-c",
            str(path),
            "--prefill",
            "1x1024",
            "--decode",
            "1x1025",
            "--format",
            "json",
        ],
    )
    assert res.exit_code == 0, res.output
    got = {}
    for p in json.loads(res.output)["passes"]:
        got[p["kind"]] = p["total_ms"]
        got.update({op["op"]: op["ms"] for op in p["ops"]})
    for name, ref in ORACLE[(tensor, adp)].items():
        assert abs(got[name] - ref) <= REL * ref, (name, got[name], ref)


def test_trtllm_has_no_int4_experts(tmp_path: Path) -> None:
    from aisim.engine.spec import resolve
    from aisim.errors import OpTableError
    from aisim.timing.provider import plan_for

    sets = {"backend: vllm": "backend: trtllm", '"0.24.0"': '"1.3.0rc20"'}
    cfg = load_config(str(_config(tmp_path, 1, 8, **sets)))
    with pytest.raises(OpTableError) as err:
        plan_for(resolve(cfg), "c.yaml: engine.workers.aggregated")
    assert "\n" not in str(err.value) and "moe_dtype=int4_wo" in str(err.value)


def test_the_memory_model_keeps_gemms_and_kv_bf16() -> None:
    """AISimulate's memory model: bf16 GEMMs, int4 experts, a bf16 KV cache (70,272 bytes a
    token at attention-DP 8: 61 layers x (512 + 64) x 2 bytes)."""
    from aisim.memory import default_quant_modes

    model = load_model("moonshotai/Kimi-K2.5")
    assert default_quant_modes(model) == ("bfloat16", "int4_wo", "bfloat16")
    assert model.num_layers * (model.kv_lora_rank + model.qk_rope_head_dim) * 2 == 70_272


def test_int4_gemms_and_unpriced_nvfp4_mla_checkpoints_are_refused(tmp_path: Path) -> None:
    """An ignore list that leaves the attention GEMMs int4 (AISimulate: no int4_wo GEMM rows)
    and the NVFP4 MLA / DSA exports aisim cannot price (tests/test_mla_nvfp4.py) are refused
    in one line naming what the MLA plans price."""
    raw = json.loads(
        (Path(__file__).parent.parent / "data/models/moonshotai--Kimi-K2.5_config.json").read_text()
    )
    raw["text_config"]["quantization_config"]["ignore"] = ["lm_head"]
    folder = tmp_path / "k25-int4-gemms"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(raw))
    assert not load_model(str(folder)).experts_only_quant
    for model in (str(folder), "nvidia/DeepSeek-V3.1-NVFP4"):
        sets = {"moonshotai/Kimi-K2.5": model}
        lines = unsupported_features(load_config(str(_config(tmp_path, 1, 8, **sets))))
        assert len(lines) == 1 and "int4 routed experts" in lines[0], lines


@pytest.mark.parametrize(
    ("model", "context_ms", "generation_ms"),
    [
        # AISimulate 0.13, one request of 1,024 tokens at attention-DP 8 on gb300, vLLM 0.31.0
        ("moonshotai/Kimi-K2.5", 11.4985, 4.3371),  # Kimi-K3's rows (96 heads, nearest)
        ("nvidia/Kimi-K2.5-NVFP4", 11.4985, 4.3371),
        ("moonshotai/Kimi-K2-Instruct", 10.9556, 4.5384),
        ("deepseek-ai/DeepSeek-V3", 15.7624, 5.5876),  # its own rows
    ],
)
def test_mla_module_rows_of_the_model_nearest_in_heads(
    tmp_path: Path, model: str, context_ms: float, generation_ms: float
) -> None:
    """gb300's next vLLM tables (filled from 0.27.0's) hold Kimi-K3's MLA module rows beside
    DeepSeek-V3's: a 64-head model reads Kimi-K3's (96 heads), DeepSeek-V3 its own."""
    sets = {"moonshotai/Kimi-K2.5": model, '"0.24.0"': '"0.31.0"', "b200_sxm": "gb300"}
    ops = one_request_ops(_config(tmp_path, 1, 8, **sets))
    assert ops["context_mla_block"] == pytest.approx(context_ms, rel=1e-9)
    assert ops["generation_mla_block"] == pytest.approx(generation_ms, rel=1e-9)


def test_a_one_head_generation_module_slice_is_refused(tmp_path: Path) -> None:
    """rtx_pro_6000_server's vLLM tables hold the bf16-GEMM / fp8-KV MLA generation module at
    one head only; AISimulate extrapolates Kimi-K2.5-NVFP4's 64 heads from it by a rule aisim
    lacks (144.489 ms a decode pass where aisim's hold gave 144.033), so it is a table miss."""
    sets = {"moonshotai/Kimi-K2.5": "nvidia/Kimi-K2.5-NVFP4", "b200_sxm": "rtx_pro_6000_server"}
    res = CliRunner().invoke(main, ["predict", "-c", str(_config(tmp_path, 1, 8, **sets))])
    assert res.exit_code == 2, res.output
    (error,) = [line for line in res.output.splitlines() if line.startswith("aisim: error")]
    assert "mla_generation_module" in error and "1 head(s) only" in error
