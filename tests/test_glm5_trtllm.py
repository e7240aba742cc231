"""GLM-5-FP8 / GLM-5.1-FP8 on TRT-LLM: how an exclusion entry inside the attention block that
names no projection is read, and the bf16-GEMM DSA module it leads to.

Per-op figures are AISimulate 0.13's (`predict --detail time`, one request of N prompt tokens
and two output tokens on b200_sxm, TRT-LLM 1.3.0rc20); memory figures its `--detail memory`.
Whole runs: the goldens dsa-glm5-fp8-trtllm-* and dsa-glm51-fp8-trtllm-*.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from aisim.cli import main
from aisim.config import load_config, unsupported_features
from aisim.models import attention_excluded_on, load_model, quant_exclusions

REL = 1e-9
GOLDEN = Path(__file__).parent / "golden"
MODELS = Path(__file__).parent.parent / "data" / "models"
ALL = frozenset({"q", "kv", "o", "indexer"})


@pytest.mark.parametrize(
    ("entry", "groups", "other"),
    [
        ("model.layers.0.self_attn.q_a_layernorm", (), True),
        ("model.layers.0.self_attn.kv_a_layernorm", (), True),
        ("model.layers.0.self_attn.foo", (), True),
        ("model.layers.0.self_attn.indexers_proj", ("indexer",), False),
        ("model.layers.0.self_attn.indexer.k_norm", ("indexer",), False),
        ("model.layers.0.self_attn.o_proj", ("o",), False),
        ("model.layers.0.self_attn", tuple(sorted(ALL)), False),
        ("model.layers.0.input_layernorm", (), False),
        ("q_a_layernorm", (), False),
    ],
)
def test_exclusion_entries_by_what_they_name(entry: str, groups: tuple, other: bool) -> None:
    """Oracle, one entry at a time on GLM-5-FP8's config: q_a / kv_a layernorm, `foo` and the
    bare block turn TRT-LLM's DSA module rows to gemm_type bfloat16; indexers_proj, indexer
    k_norm, q_a / q_b / kv_a / kv_b and entries outside self_attn leave them fp8_block."""
    raw = {"quantization_config": {"modules_to_not_convert": [entry]}}
    assert quant_exclusions(raw, None) == (groups, False, other)


def test_glm5_fp8_attention_is_bf16_on_trtllm_only() -> None:
    """TRT-LLM (DSA and dense MLA) and vLLM's dense MLA read such an entry as the whole block;
    vLLM's DSA plan does not (the vLLM golden dsa-glm5-fp8-vllm-dp8-ep8 reads fp8_block rows)."""
    from aisim.timing.deepseek_layers import DeepSeekDtypes

    for model_id in ("zai-org/GLM-5-FP8", "zai-org/GLM-5.1-FP8"):
        model = load_model(model_id)
        assert model.attention_other_excluded, model_id
        assert attention_excluded_on(model, "trtllm") == ALL
        assert attention_excluded_on(model, "vllm") == {"indexer"}
        assert DeepSeekDtypes.of(model, "trtllm").attention == "bfloat16"
        assert DeepSeekDtypes.of(model, "vllm").attention == "fp8_block"
    v3 = load_model("deepseek-ai/DeepSeek-V3")
    assert not v3.attention_other_excluded
    assert attention_excluded_on(v3, "trtllm") == frozenset()


def _estimate(tmp_path: Path, parallelism: str, isl: int) -> dict:
    text = (GOLDEN / "dsa-glm5-fp8-trtllm-dp8-ep8" / "config.yaml").read_text()
    path = tmp_path / "c.yaml"
    lines = [
        f"      parallelism: {{{parallelism}}}" if "parallelism:" in ln else ln
        for ln in text.splitlines()
    ]
    path.write_text("\n".join(lines) + "\n")
    args = ["--prefill", f"1x{isl}", "--decode", f"1x{isl + 1}", "--format=json"]
    res = CliRunner().invoke(main, ["estimate", "-c", str(path), *args])
    assert res.exit_code == 0, res.output
    got = {}
    for p in json.loads(res.output)["passes"]:
        got.update({op["op"]: op["ms"] for op in p["ops"]})
    return got


@pytest.mark.parametrize(
    ("parallelism", "isl", "ref"),
    [
        # bf16-GEMM module rows 0.4289 / 0.1172 ms a layer x 78 (fp8_block: 0.3636 / 0.1076)
        (
            "replicas: 1, tensor: 1, pipeline: 1, attention_data: 8, moe_tensor: 1, moe_expert: 8",
            1024,
            {"context_attention": 33.4542, "generation_attention": 9.1416},
        ),
        (
            "replicas: 1, tensor: 8, pipeline: 1, attention_data: 1, moe_tensor: 1, moe_expert: 8",
            1800,
            {"context_attention": 30.35345625, "generation_attention": 13.5525609375},
        ),
    ],
)
def test_glm5_fp8_trtllm_attention_prices_are_aisimulates(
    tmp_path: Path, parallelism: str, isl: int, ref: dict
) -> None:
    got = _estimate(tmp_path, parallelism, isl)
    for name, want in ref.items():
        assert abs(got[name] - want) <= REL * want, (name, got[name], want)


@pytest.mark.parametrize(
    ("heads", "prefix", "new", "math_ms"),
    [(64, 0, 1024, 14.914956208810667), (8, 0, 1800, 6.482571264)],
)
def test_bf16_dsa_context_sol_counts_kv_b_at_the_bf16_rate(
    heads: int, prefix: int, new: int, math_ms: float
) -> None:
    """AISimulate's SOL math of the context module (78 layers; memory 4.2979019470129876 and
    1.0897860155844155 ms): kv_b's FLOPs at the bf16 rate, the rest as for fp8 GEMMs."""
    from aisim.engine.spec import gpu_system
    from aisim.kernels import optime_dsa as KD
    from aisim.timing.leaf_dsa import dsa_module_par
    from aisim.timing.system import GpuSystem

    model = load_model("zai-org/GLM-5-FP8")
    system = GpuSystem.from_dict(gpu_system("b200_sxm"))
    par = dsa_module_par(model, heads, "bfloat16", "fp8", system)
    sol = KD.dsa_context_sol_ms.py_func(heads, prefix, new, 1, par) * model.num_layers
    assert abs(sol - math_ms) <= REL * math_ms, (sol, math_ms)


@pytest.mark.parametrize(
    ("backend", "blocks"),
    [("trtllm", 13_449), ("vllm", 13_442)],
)
def test_glm5_fp8_memory_counts_the_excluded_block_on_trtllm(
    tmp_path: Path, backend: str, blocks: int
) -> None:
    """AISimulate's weights at attention-DP 8: 128,299,302,912 B on TRT-LLM (the whole
    attention and indexer at 2 bytes), 114,758,123,520 B on vLLM (all block-fp8)."""
    from aisim.engine.spec import memory_breakdown

    text = (GOLDEN / "dsa-glm5-fp8-trtllm-dp8-ep8" / "config.yaml").read_text()
    text = text.replace("{type: fixed, blocks: 16384}", "{type: default}")
    text = text.replace("replicas: 2", "replicas: 1")
    if backend == "vllm":
        text = text.replace("backend: trtllm", "backend: vllm").replace("1.3.0rc20", "0.24.0")
    path = tmp_path / "c.yaml"
    path.write_text(text)
    cfg = load_config(str(path))
    worker = cfg.engine.workers["aggregated"]
    model = load_model(cfg.engine.model)
    mem = memory_breakdown(cfg, worker, model, "c.yaml", strict=False).as_dict()
    assert mem["estimated_num_gpu_blocks"] == blocks, mem


def test_mixed_block_fp8_mla_attention_is_refused_in_one_line(tmp_path: Path) -> None:
    """A block-fp8 DeepSeek-V3 whose list excludes o_proj alone: AISimulate prices separate
    per-projection GEMMs (oracle), a plan aisim lacks."""
    raw = json.loads((MODELS / "deepseek-ai--DeepSeek-V3_config.json").read_text())
    raw["quantization_config"]["modules_to_not_convert"] = ["model.layers.0.self_attn.o_proj"]
    folder = tmp_path / "v3"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(raw))
    text = (GOLDEN / "dsa-glm5-fp8-trtllm-dp8-ep8" / "config.yaml").read_text()
    path = tmp_path / "c.yaml"
    path.write_text(text.replace("zai-org/GLM-5-FP8", str(folder)))
    lines = unsupported_features(load_config(str(path)))
    assert len(lines) == 1 and "o_proj projections bf16 and q / kv block-fp8" in lines[0], lines
