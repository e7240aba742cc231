"""NVFP4 exports of the MLA / DSA models (NVIDIA ModelOpt): which parts their exclusion lists
keep bf16, how the Kimi-K2.5 export is priced, and what is refused.

Per-op figures are AISimulate 0.13's (`predict --detail time`, one request of 1024 prompt
tokens and two output tokens on b200_sxm, attention-DP 8 x EP8); memory figures its
`--detail memory`. Whole runs: the goldens mla-kimi-k25-nvfp4-*.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from aisim.cli import main
from aisim.config import load_config, unsupported_features
from aisim.models import load_model

REL = 1e-9
GOLDEN = Path(__file__).parent / "golden"

# backend -> {op: AISimulate's ms}
ORACLE = {
    "vllm": {
        "context_mla_block": 13.505400000000002,  # module rows gemm_type bfloat16, kv fp8
        "context_shared_gate_up_gemm": 1.298405297100544,  # nvfp4
        "context_shared_ffn2_gemm": 1.036837350577116,
        "context_moe": 32.26460762023925,
        "generation_mla_block": 4.5323,
        "generation_moe_overlap": 6.27657869991991,
    },
    "trtllm": {
        "context_mla_block": 16.96094697671891,  # bf16 block GEMMs + the fp8 context_mla kernel
        "context_shared_gate_up_gemm": 1.5720106383164723,
        "context_moe": 38.13817644119263,
        "context_moe_pre_dispatch": 7.0195940624999995,  # NVFP4 gather (docs/timing.md 3.7)
        "generation_mla_block": 3.8369,
        "generation_moe_overlap": 7.285975942391516,
    },
}


def test_exclusion_lists_name_the_bf16_parts() -> None:
    """GLM-5 / GLM-5.1 / Kimi-K2.5 exclude the whole attention block (by every projection or a
    `self_attn*` glob), DeepSeek-V3.1 / V3.2 only q / kv (and the indexer); GLM-5.1 also keeps
    its shared experts bf16. An entry covering the whole indexer (`self_attn.indexer*`) also
    keeps its weights bf16 (indexer_weights); GLM-5-FP8's, naming parts of it, do not."""
    cases = {
        "nvidia/DeepSeek-V3.1-NVFP4": (("kv", "q"), False),
        "nvidia/DeepSeek-V3.2-NVFP4": (("indexer", "indexer_weights", "kv", "q"), False),
        "nvidia/GLM-5-NVFP4": (("indexer", "indexer_weights", "kv", "o", "q"), False),
        "zai-org/GLM-5-FP8": (("indexer",), False),
        "nvidia/GLM-5.1-NVFP4": (("indexer", "kv", "o", "q"), True),
        "nvidia/Kimi-K2.5-NVFP4": (("indexer", "kv", "o", "q"), False),
        "deepseek-ai/DeepSeek-V3": ((), False),
    }
    for model_id, want in cases.items():
        model = load_model(model_id)
        assert (model.attention_excluded, model.shared_experts_excluded) == want, model_id


def test_kimi_k25_nvfp4_dtypes() -> None:
    from aisim.timing.deepseek_layers import DeepSeekDtypes

    d = DeepSeekDtypes.of(load_model("nvidia/Kimi-K2.5-NVFP4"))
    assert (d.gemm, d.attention, d.shared, d.moe, d.kv) == (
        "nvfp4",
        "bfloat16",
        "nvfp4",
        "nvfp4",
        "fp8",
    )
    fp8 = DeepSeekDtypes.of(load_model("deepseek-ai/DeepSeek-V3"))
    assert (fp8.attention, fp8.shared) == ("fp8_block", "fp8_block")


@pytest.mark.parametrize("backend", sorted(ORACLE))
def test_kimi_k25_nvfp4_per_op_prices_are_aisimulates(tmp_path: Path, backend: str) -> None:
    path = GOLDEN / f"mla-kimi-k25-nvfp4-{backend}-dp8-ep8" / "config.yaml"
    res = CliRunner().invoke(
        main,
        ["estimate", "-c", str(path), "--prefill", "1x1024", "--decode", "1x1025", "--format=json"],
    )
    assert res.exit_code == 0, res.output
    got = {}
    for p in json.loads(res.output)["passes"]:
        got.update({op["op"]: op["ms"] for op in p["ops"]})
    for name, ref in ORACLE[backend].items():
        assert abs(got[name] - ref) <= REL * ref, (name, got[name], ref)


@pytest.mark.parametrize(
    ("golden", "blocks"),
    [
        ("mla-kimi-k25-nvfp4-vllm-tp8-default-capacity", 40_222),
        ("mla-kimi-k25-nvfp4-trtllm-dp8-default-capacity", 38_439),
    ],
)
def test_kimi_k25_nvfp4_memory_counts_bf16_attention(golden: str, blocks: int) -> None:
    """AISimulate's weights count the excluded attention projections at 2 bytes and the shared
    experts at NVFP4's 0.5625 (weights 78,859,485,184 B at TP8; 91,415,642,112 at DP8); the KV
    cache is fp8, 61 x 576 bytes a token."""
    from aisim.engine.spec import memory_breakdown

    cfg = load_config(str(GOLDEN / golden / "config.yaml"))
    worker = cfg.engine.workers["aggregated"]
    model = load_model(cfg.engine.model)
    mem = memory_breakdown(cfg, worker, model, "c.yaml", strict=False).as_dict()
    assert mem["estimated_num_gpu_blocks"] == blocks, mem
    assert mem["kv_size_per_token_bytes"] == 35_136, mem


def test_mixed_dtype_mla_nvfp4_export_is_refused_in_one_line(tmp_path: Path) -> None:
    text = (GOLDEN / "mla-kimi-k25-nvfp4-vllm-dp8-ep8" / "config.yaml").read_text()
    path = tmp_path / "c.yaml"
    path.write_text(text.replace("nvidia/Kimi-K2.5-NVFP4", "nvidia/DeepSeek-V3.1-NVFP4"))
    lines = unsupported_features(load_config(str(path)))
    words = "q / kv projections bf16 and o_proj NVFP4"
    assert len(lines) == 1 and "\n" not in lines[0] and words in lines[0], lines


@pytest.mark.parametrize(
    "model_id", ["nvidia/GLM-5-NVFP4", "nvidia/GLM-5.1-NVFP4", "nvidia/DeepSeek-V3.2-NVFP4"]
)
def test_nvfp4_dsa_exports_are_priced(tmp_path: Path, model_id: str) -> None:
    """GLM-5 / 5.1's exclusion lists keep the whole attention block bf16, so the DSA module
    reads its bf16 rows (goldens dsa-glm5*-nvfp4-*); V3.2's o_proj is NVFP4, so it reads the
    nvfp4 rows and prices off the grid by the nvfp4 module SOL (goldens dsa-v32-nvfp4-*)."""
    text = (GOLDEN / "mla-kimi-k25-nvfp4-vllm-dp8-ep8" / "config.yaml").read_text()
    path = tmp_path / "c.yaml"
    path.write_text(text.replace("nvidia/Kimi-K2.5-NVFP4", model_id))
    assert unsupported_features(load_config(str(path))) == []


@pytest.mark.parametrize(
    ("phase", "ms"),
    [("context", 2.7644567552), ("generation", 0.22621072051948052)],
)
def test_nvfp4_dsa_module_sol_is_aisimulates(phase: str, ms: float) -> None:
    """AISimulate's SOL of DeepSeek-V3.2-NVFP4's DSA module at TP8 (16 heads a rank, 61 layers;
    one request of 1800 prompt tokens, then its decode at kv 1801): the GEMM FLOPs at the
    nvfp4 rate, the weights at 0.5625 bytes, the indexer at the fp8 rate. Context is math-bound
    (memory 0.5228 ms), generation memory-bound (math 0.0028 ms). With fp8 arithmetic for the
    GEMM FLOPs the off-grid prices were 1e7 x tolerance off."""
    from aisim.engine.spec import gpu_system
    from aisim.kernels import optime_dsa as KD
    from aisim.timing.leaf_dsa import dsa_module_par
    from aisim.timing.system import GpuSystem

    model = load_model("nvidia/DeepSeek-V3.2-NVFP4")
    par = dsa_module_par(model, 16, "nvfp4", "fp8", GpuSystem.from_dict(gpu_system("b200_sxm")))
    if phase == "context":
        sol = KD.dsa_context_sol_ms.py_func(16, 0, 1800, 1, par)
    else:
        sol = KD.dsa_generation_sol_ms.py_func(16, 1, 1801, par)
    assert abs(sol * model.num_layers - ms) <= REL * ms, (sol * model.num_layers, ms)


@pytest.mark.parametrize(
    ("parallelism", "backend", "weights", "blocks"),
    [
        ({"tensor": 1, "attention_data": 8}, "vllm", 67_917_709_312, 33_143),
        ({"tensor": 1, "attention_data": 8}, "trtllm", 67_917_709_312, 35_601),
        ({"tensor": 2, "attention_data": 4}, "trtllm", 61_650_108_416, 37_694),
        ({"tensor": 8, "attention_data": 1}, "trtllm", 56_949_407_744, 39_279),
    ],
)
def test_v32_nvfp4_memory_keeps_the_excluded_indexer_bf16(
    tmp_path: Path, parallelism: dict, backend: str, weights: int, blocks: int
) -> None:
    """AISimulate's `--detail memory` of DeepSeek-V3.2-NVFP4 (EP8, max_batched_tokens 3072 on
    b200_sxm): q / kv and the indexer's wq_b / weights_proj at 2 bytes, o_proj and the experts
    at NVFP4's 0.5625 (the indexer at 0.5625 was 1,143,590,912 B a rank short)."""
    from aisim.engine.spec import memory_breakdown

    text = (GOLDEN / "dsa-v32-nvfp4-vllm-dp8-default" / "config.yaml").read_text()
    cfg_path = tmp_path / "c.yaml"
    cfg_path.write_text(text)
    raw = yaml.safe_load(text)
    raw["engine"]["backend"] = backend
    raw["engine"]["backend_version"] = "0.24.0" if backend == "vllm" else "1.3.0rc20"
    raw["engine"]["workers"]["aggregated"]["parallelism"].update(parallelism)
    cfg_path.write_text(yaml.safe_dump(raw))
    cfg = load_config(str(cfg_path))
    worker = cfg.engine.workers["aggregated"]
    model = load_model(cfg.engine.model)
    mem = memory_breakdown(cfg, worker, model, "c.yaml", strict=False).as_dict()
    got = (mem["memory_breakdown"]["weights_bytes"], mem["estimated_num_gpu_blocks"])
    assert got == (weights, blocks), mem
