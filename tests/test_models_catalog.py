"""The shipped model configs by Hugging Face id, and `aisim models`: where each is priced."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from aisim.catalog import check, probe_parallelism
from aisim.cli import main
from aisim.models import load_model, shipped_model_ids

# the models of already-priced families AISimulate 0.13 bundles, shipped by id
SHIPPED = (
    "Qwen/Qwen3-0.6B",
    "Qwen/Qwen3-1.7B",
    "Qwen/Qwen3-8B",
    "Qwen/Qwen3-32B",
    "Qwen/Qwen3-30B-A3B",
    "Qwen/Qwen3-235B-A22B",
    "Qwen/Qwen3-Coder-480B-A35B-Instruct",
    "XiaomiMiMo/MiMo-7B-Base",
    "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Meta-Llama-3.1-405B",
    "deepseek-ai/DeepSeek-V3",
    "deepseek-ai/DeepSeek-R1",
    "deepseek-ai/DeepSeek-V3.2",
    "Qwen/Qwen3-32B-FP8",
    "Qwen/Qwen3-32B-FP8-Static-PerTensor",
    "nvidia/Llama-3.1-70B-Instruct-FP8",
    "nvidia/DeepSeek-V3.2-NVFP4",
    "mistralai/Mixtral-8x7B-v0.1",
    "mistralai/Mixtral-8x22B-v0.1",
    "MiniMaxAI/MiniMax-M2.5",
    "MiniMaxAI/MiniMax-M2.7",
    "nvidia/MiniMax-M2.5-NVFP4",
    "nvidia/MiniMax-M2.7-NVFP4",
    "moonshotai/Kimi-K2-Instruct",
    "zai-org/GLM-5-FP8",
    "zai-org/GLM-5.1-FP8",
)


def test_every_bundled_model_of_a_priced_family_resolves_by_id() -> None:
    ids = shipped_model_ids()
    assert set(SHIPPED) <= set(ids)
    assert not [i for i in ids if i.endswith("_hf_quant")], "quantization files are not models"
    for model_id in ids:
        assert load_model(model_id).num_layers > 0


@pytest.mark.parametrize(
    "model_id,weights,kv",
    [
        # hf_quant_config.json beside it; per-tensor fp8 with no activation scheme is static
        ("nvidia/Llama-3.1-70B-Instruct-FP8", "fp8_static", "fp8"),
        ("nvidia/DeepSeek-V3.2-NVFP4", "nvfp4", "fp8"),
        ("Qwen/Qwen3-32B-FP8-Static-PerTensor", "fp8_static", "fp8"),
        ("meta-llama/Meta-Llama-3.1-8B", "", ""),
        ("MiniMaxAI/MiniMax-M2.5", "fp8_block", ""),
        ("nvidia/MiniMax-M2.5-NVFP4", "nvfp4", "fp8"),
    ],
)
def test_shipped_checkpoints_declare_their_precision(model_id: str, weights: str, kv: str) -> None:
    model = load_model(model_id)
    assert (model.weight_quant, model.kv_cache_quant) == (weights, kv)


def test_mixtral_reads_as_an_moe_model() -> None:
    """Mixtral names its experts num_local_experts and their width intermediate_size."""
    from aisim.timing.families import is_moe_model

    m = load_model("mistralai/Mixtral-8x7B-v0.1")
    assert is_moe_model(m)
    assert (m.num_experts, m.num_experts_per_tok, m.moe_intermediate_size) == (8, 2, 14336)
    assert (m.num_attention_heads, m.num_kv_heads, m.head_dim) == (32, 8, 128)
    assert not m.use_qk_norm
    mm = load_model("MiniMaxAI/MiniMax-M2.5")  # qk-norm, like Qwen3
    assert (mm.num_experts, mm.num_experts_per_tok, mm.moe_intermediate_size) == (256, 8, 1536)
    assert mm.use_qk_norm
    dense = load_model("Qwen/Qwen3-32B")
    assert dense.num_experts == 0 and dense.moe_intermediate_size == 0


def test_probe_deployment_is_the_smallest_group_the_weights_fit() -> None:
    """BF16 weights in 90 % of one GPU's memory: 8B on one H100 (80 GiB), 70B on two (71 GB
    each), 405B on a whole node; MoE splits by experts, MLA by attention-DP."""
    assert probe_parallelism(load_model("meta-llama/Meta-Llama-3.1-8B"), "h100_sxm")["tensor"] == 1
    assert probe_parallelism(load_model("meta-llama/Meta-Llama-3.1-70B"), "h100_sxm")["tensor"] == 2
    assert (
        probe_parallelism(load_model("meta-llama/Meta-Llama-3.1-405B"), "h100_sxm")["tensor"] == 8
    )
    moe = probe_parallelism(load_model("Qwen/Qwen3-30B-A3B"), "l40s")
    assert (moe["tensor"], moe["moe_expert"]) == (2, 2)
    mla = probe_parallelism(load_model("deepseek-ai/DeepSeek-V3"), "b200_sxm")
    assert (mla["attention_data"], mla["moe_expert"], mla["tensor"]) == (8, 8, 1)


def _models_json(*args: str) -> dict:
    res = CliRunner().invoke(main, ["models", *args, "--format", "json"])
    assert res.exit_code == 0, res.output
    return {e["model_id"]: e for e in json.loads(res.output)}


def _cell(entry: dict, hardware: str, backend: str) -> dict:
    (cell,) = [c for c in entry["coverage"] if (c["hardware"], c["backend"]) == (hardware, backend)]
    return cell


def test_models_lists_where_each_is_priced_and_why_not() -> None:
    """Each claim is predict's own outcome: the plan builds, or its refusal line is given."""
    got = _models_json(
        "Qwen/Qwen3-32B",
        "Qwen/Qwen3-32B-FP8",
        "Qwen/Qwen3-32B-FP8-Static-PerTensor",
        "deepseek-ai/DeepSeek-V3",
        "XiaomiMiMo/MiMo-7B-Base",
        "--hardware",
        "b200_sxm",
        "--hardware",
        "l40s",
    )
    for hw in ("b200_sxm", "l40s"):
        for backend in ("vllm", "trtllm"):
            assert _cell(got["Qwen/Qwen3-32B"], hw, backend)["priced"]
            assert _cell(got["XiaomiMiMo/MiMo-7B-Base"], hw, backend)["priced"]
            assert _cell(got["Qwen/Qwen3-32B-FP8"], hw, backend)["priced"]
            assert _cell(got["Qwen/Qwen3-32B-FP8-Static-PerTensor"], hw, backend)["priced"]
    assert got["XiaomiMiMo/MiMo-7B-Base"]["family"] == "dense"
    assert _cell(got["deepseek-ai/DeepSeek-V3"], "b200_sxm", "trtllm")["priced"]
    l40s = _cell(got["deepseek-ai/DeepSeek-V3"], "l40s", "vllm")
    assert not l40s["priced"] and "mla_context_module" in l40s["reason"], l40s
    assert l40s["deployment"] == "DP8 EP8" and l40s["version"] == "0.24.0"


def test_a_backend_without_tables_is_named_and_the_table_says_all() -> None:
    got = _models_json("Qwen/Qwen3-8B", "--hardware", "b60")
    trt = _cell(got["Qwen/Qwen3-8B"], "b60", "trtllm")
    assert not trt["priced"] and trt["reason"] == "no trtllm tables"
    res = CliRunner().invoke(main, ["models", "Qwen/Qwen3-8B", "--hardware", "b200_sxm"])
    assert res.exit_code == 0
    row = [ln for ln in res.output.splitlines() if ln.startswith("Qwen/Qwen3-8B")]
    assert row and row[0].split()[1:] == ["dense", "bfloat16", "b200", "b200"], res.output


def test_outcomes_are_cached_and_equal_to_a_fresh_check(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AISIM_CACHE_DIR", str(tmp_path))
    first = check("Qwen/Qwen3-8B", "h200_sxm", "vllm")
    assert list((tmp_path / "coverage").glob("*.json"))
    assert check("Qwen/Qwen3-8B", "h200_sxm", "vllm") == first and first.priced


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["models", "foo/bar"], "not a shipped model"),
        (["models", "--hardware", "a100_pcie"], "unknown GPU"),
    ],
)
def test_bad_arguments_get_one_line(args: list[str], fragment: str) -> None:
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2 and fragment in res.output
    assert len(res.output.strip().splitlines()) == 1 and "Traceback" not in res.output
