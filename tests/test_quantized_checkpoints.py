"""Checkpoint precision: every way a checkpoint declares a quantization is read; block-scaled
fp8 and NVFP4 weights and fp8 KV caches are priced (goldens quant-*), per-tensor fp8 weights are
refused wherever they would be priced (op-level timing, the GPU memory model).

Figures: tests/golden/fp32-checkpoint-op-level and pd-dtype-fp32-transfer (torch_dtype / dtype),
single-request (a quantized checkpoint under fixed timing gives AISimulate's BF16 figures).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aisim.config import load_config, unsupported_features
from aisim.models import checkpoint_quantization, dtype_bytes, load_model
from aisim.prediction import run_prediction
from tests.parity_rule import mismatches

GOLDEN = Path(__file__).parent / "golden"
BF16 = json.loads(
    (Path(__file__).parent.parent / "data" / "models" / "Qwen--Qwen3-32B_config.json").read_text()
)
BLOCK_FP8 = {
    "activation_scheme": "dynamic",
    "fmt": "e4m3",
    "quant_method": "fp8",
    "weight_block_size": [128, 128],
}

# (config.json changes, hf_quant_config.json or None, what the refusal names)
DECLARATIONS = {
    "block-fp8-weights": (
        {"quantization_config": BLOCK_FP8},
        None,
        "weights fp8_block; declared in its config.json's quantization_config",
    ),
    "per-tensor-fp8": (
        {"quantization_config": {"quant_method": "fp8"}},
        None,
        "weights fp8_static;",
    ),
    "per-tensor-fp8-dynamic": (
        {"quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"}},
        None,
        "weights fp8;",
    ),
    "awq-int4": (
        {"quantization_config": {"quant_method": "awq", "bits": 4}},
        None,
        "weights awq;",
    ),
    "kv-cache-scheme": (
        {"quantization_config": {"kv_cache_scheme": {"type": "float", "num_bits": 8}}},
        None,
        "KV cache fp8;",
    ),
    "hf-quant-weights": (
        {},
        {"quantization": {"quant_algo": "FP8"}},
        "weights fp8_static; declared in its hf_quant_config.json",
    ),
    "hf-quant-kv-only": (
        {},
        {"quantization": {"kv_cache_quant_algo": "FP8"}},
        "KV cache fp8; declared in its hf_quant_config.json",
    ),
    "hf-quant-nvfp4": (
        {},
        {"quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}},
        "weights nvfp4, KV cache fp8;",
    ),
}

OP_LEVEL = """\
traffic:
  source: {type: synthetic, input_tokens: 512, output_tokens: 8}
  load: {type: concurrency, concurrency: 2}
  stop: {requests: 4}
engine:
  model: MODEL
  hardware: b200_sxm
  backend: vllm
  workers:
    aggregated:
      parallelism: {tensor: 4}
      kv_cache: {capacity: CAPACITY}
      timing: TIMING
"""


def _checkpoint(tmp_path: Path, changes: dict, hf_quant: dict | None) -> Path:
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**BF16, **changes}))
    if hf_quant is not None:
        (folder / "hf_quant_config.json").write_text(json.dumps(hf_quant))
    return folder


def _config(
    tmp_path: Path,
    model: str,
    timing: str = "{type: default}",
    capacity: str = "{type: fixed, blocks: 4096}",
) -> Path:
    path = tmp_path / "c.yaml"
    text = OP_LEVEL.replace("MODEL", model).replace("TIMING", timing)
    path.write_text(text.replace("CAPACITY", capacity))
    return path


PRICED = tuple(name for name in DECLARATIONS if name != "awq-int4")


@pytest.mark.parametrize("name", PRICED)
def test_priced_declarations_run_where_they_are_priced(tmp_path: Path, name) -> None:
    changes, hf_quant, _ = DECLARATIONS[name]
    folder = _checkpoint(tmp_path, changes, hf_quant)
    for timing, capacity in (
        ("{type: default}", "{type: fixed, blocks: 4096}"),
        ("{type: fixed, prefill_ms: 8, decode_ms: 2}", "{type: default}"),
    ):
        cfg = load_config(str(_config(tmp_path, str(folder), timing, capacity)))
        assert unsupported_features(cfg) == []


@pytest.mark.parametrize("name", sorted(set(DECLARATIONS) - set(PRICED)))
def test_unpriced_weights_are_refused_where_they_would_be_priced(tmp_path: Path, name) -> None:
    changes, hf_quant, named = DECLARATIONS[name]
    folder = _checkpoint(tmp_path, changes, hf_quant)
    # op-level timing, by folder and by config.json path; and the memory model under fixed timing
    for model, timing, capacity in (
        (str(folder), "{type: default}", "{type: fixed, blocks: 4096}"),
        (str(folder / "config.json"), "{type: default}", "{type: fixed, blocks: 4096}"),
        (str(folder), "{type: fixed, prefill_ms: 8, decode_ms: 2}", "{type: default}"),
    ):
        lines = unsupported_features(load_config(str(_config(tmp_path, model, timing, capacity))))
        assert len(lines) == 1, lines
        assert lines[0].startswith("engine.model: ") and named in lines[0], lines[0]
        assert "quantized checkpoint" in lines[0] and "block-scaled fp8" in lines[0]


def test_quantized_hugging_face_ids(tmp_path: Path) -> None:
    for model in (
        "Qwen/Qwen3-32B-FP8",
        "Qwen/Qwen3-30B-A3B-FP8",
        "nvidia/Qwen3-235B-A22B-NVFP4",
        "Qwen/Qwen3-32B-FP8-Static-PerTensor",
        "nvidia/Llama-3.1-70B-Instruct-FP8",
    ):
        assert unsupported_features(load_config(str(_config(tmp_path, model)))) == []
    static = ("Qwen/Qwen3-32B-FP8-Static-PerTensor", "nvidia/Llama-3.1-70B-Instruct-FP8")
    for model in static:  # per-tensor fp8 without a dynamic activation scheme is static
        assert (load_model(model).weight_quant, load_model(model).kv_cache_quant) == (
            "fp8_static",
            "fp8",
        )


def test_fixed_timing_with_a_fixed_capacity_reads_no_precision() -> None:
    """AISimulate gives a quantized checkpoint the BF16 figures there (oracle: Qwen3-32B-FP8)."""
    folder = GOLDEN / "single-request"
    ref = json.loads((folder / "prediction.json").read_text())
    pred = run_prediction(str(folder / "config.yaml"), ("engine.model=Qwen/Qwen3-32B-FP8",))
    assert not mismatches(pred.prediction, ref)


def test_deepseek_block_fp8_stays_priced() -> None:
    model = load_model("deepseek-ai/DeepSeek-V3")
    assert (model.weight_quant, model.kv_cache_quant) == ("fp8_block", "")
    cfg = load_config(str(GOLDEN / "dsv3-vllm-tp2-dp4" / "config.yaml"))
    assert unsupported_features(cfg) == []


def test_what_is_not_a_quantization() -> None:
    nested = {**BF16, "text_config": {"quantization_config": BLOCK_FP8}}
    # a text model's nested text_config is not read; an explicit bf16 KV cache is the default
    assert checkpoint_quantization(nested, None)[:2] == ("", "")
    assert checkpoint_quantization({"quantization_config": {"kv_cache_dtype": "bf16"}}, None)[
        :2
    ] == ("", "bfloat16")
    assert (
        checkpoint_quantization(
            {"quantization_config": {}}, {"quantization": {"quantization_algo": "FP8"}}
        )[0]
        == ""
    )
    assert (
        checkpoint_quantization({}, {"quantization": {"quantization_algo": "FP8"}})[0]
        == "fp8_static"
    )


def test_element_bytes_follow_torch_dtype_then_dtype() -> None:
    assert dtype_bytes({"torch_dtype": "float32"}) == 4
    assert dtype_bytes({"dtype": "float32"}) == 4
    assert dtype_bytes({"torch_dtype": "bfloat16", "dtype": "float32"}) == 2
    assert dtype_bytes({"torch_dtype": "float8_e5m2"}) == 1
    assert dtype_bytes({"torch_dtype": "int8"}) == 1
    assert dtype_bytes({}) == 2


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("engine.gemm_quant_mode=fp7", "engine.gemm_quant_mode"),
        (
            "engine.workers.aggregated.timing.kvcache_quant_mode=fp9",
            "engine.workers.aggregated.timing.kvcache_quant_mode",
        ),
    ],
)
def test_an_unknown_quant_mode_is_a_config_error(tmp_path: Path, override, field) -> None:
    from aisim.engine.spec import resolve
    from aisim.errors import ConfigError

    cfg = load_config(str(_config(tmp_path, "Qwen/Qwen3-32B")), (override,))
    with pytest.raises(ConfigError, match=f"{field}: unknown quantization"):
        resolve(cfg)


def test_quant_mode_overrides_on_mla_models_are_refused(tmp_path: Path) -> None:
    """The MLA / DSA plans price DeepSeek's own dtypes only."""
    path = str(_config(tmp_path, "deepseek-ai/DeepSeek-V3"))
    for override in (
        "engine.gemm_quant_mode=fp8",
        "engine.workers.aggregated.timing.kvcache_quant_mode=fp8",
    ):
        lines = unsupported_features(load_config(path, (override,)))
        assert len(lines) == 1 and "quant_mode" in lines[0] and "not available" in lines[0]


@pytest.mark.parametrize(
    "override",
    [
        "engine.kvcache_quant_mode=fp8",
        "engine.gemm_quant_mode=fp8",
        "engine.model=Qwen/Qwen3-32B-FP8",
    ],
)
def test_fp8_on_a_gpu_without_fp8_tensor_cores_is_refused_in_one_line(tmp_path, override) -> None:
    """a100_sxm has neither fp8 rows nor an fp8 tensor-core rate: the plan is refused in one
    line (AISimulate fails such a run too), never a traceback or a silent bf16 price."""
    from aisim.engine.spec import resolve
    from aisim.errors import OpTableError
    from aisim.timing.provider import plan_for

    overrides = ("engine.hardware=a100_sxm", override)
    cfg = load_config(str(_config(tmp_path, "Qwen/Qwen3-32B")), overrides)
    with pytest.raises(OpTableError) as err:
        plan_for(resolve(cfg), "c.yaml: engine.workers.aggregated")
    assert "\n" not in str(err.value) and "fp8" in str(err.value)


def test_an_unrated_dtype_is_refused_even_when_no_pass_is_priced(tmp_path: Path) -> None:
    # every prompt is longer than the context limit: no pass is priced, yet AISimulate rejects
    # the engine config (fp8 on an A100) instead of reporting that no request completed
    from click.testing import CliRunner

    from aisim.cli import main

    path = _config(tmp_path, "Qwen/Qwen3-32B")
    overrides = (
        "engine.hardware=a100_sxm",
        "engine.gemm_quant_mode=fp8",
        "engine.context_length=64",
    )
    out = tmp_path / "out"
    args = ["predict", "-c", str(path), "--output-dir", str(out)]
    res = CliRunner().invoke(main, [*args, *(a for o in overrides for a in ("--set", o))])
    assert res.exit_code == 2, res.output
    assert "a100_sxm has no fp8 tensor-core compute" in res.output and not out.exists()


def test_a_dtype_the_gpu_does_not_rate_names_the_gpu() -> None:
    from aisim.engine.spec import gpu_system
    from aisim.errors import OpTableError
    from aisim.timing.system import GpuSystem

    a100 = GpuSystem.from_dict(gpu_system("a100_sxm"))
    assert a100.tensor_flops("bfloat16") > 0
    with pytest.raises(OpTableError, match=r"^a100_sxm has no fp8 tensor-core compute"):
        a100.tensor_flops("fp8")


@pytest.mark.parametrize(
    ("model", "override", "field"),
    [
        ("nvidia/Qwen3-235B-A22B-NVFP4", None, "engine.model"),
        ("Qwen/Qwen3-30B-A3B", "engine.moe_quant_mode=nvfp4", "engine.moe_quant_mode"),
        (
            "Qwen/Qwen3-30B-A3B",
            "engine.workers.aggregated.timing.moe_quant_mode=nvfp4",
            "engine.workers.aggregated.timing.moe_quant_mode",
        ),
    ],
)
def test_nvfp4_experts_are_priced_on_both_backends(tmp_path: Path, model, override, field) -> None:
    # the pricing itself: tests/test_trtllm_nvfp4_experts.py and the quant-*-nvfp4-trtllm goldens
    for backend in ("trtllm", "vllm"):
        overrides = [f"engine.backend={backend}"] + ([override] if override else [])
        cfg = load_config(str(_config(tmp_path, model)), overrides)
        assert unsupported_features(cfg) == [], (backend, field)
