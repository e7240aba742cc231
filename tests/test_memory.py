"""KV capacity from GPU memory (aisim/memory.py) against AISimulate's pinned figures.

Each tests/golden_memory/*.json holds one deployment run through AISimulate 0.13
(``aisimulate predict -c config.yaml --format json --detail memory``, the exact config is in the
file) and either its ``memory_diagnostics.aggregated`` figures or, when AISimulate refused the
deployment, the kind of refusal and its non-KV byte count.  Every figure must match exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aisim.errors import CapacityError, ConfigError, NotAvailableError
from aisim.memory import kv_blocks_from_memory
from aisim.models import load_model

# b200_sxm gpu.mem_capacity (180 GiB), from the silicon system yaml of AISimulate's
# performance database (systems/b200_sxm.yaml); every golden was run on b200_sxm.
B200_MEMORY_BYTES = 193_273_528_320

GOLDEN = Path(__file__).parent / "golden_memory"
CASES = sorted(GOLDEN.glob("*.json"))


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def _breakdown(case: dict, strict: bool = True):
    eng = case["extra_engine"]
    backend = case["backend"]
    return kv_blocks_from_memory(
        load_model(case["model"]),
        backend=backend,
        block_size=case["block_size"] or (64 if backend == "vllm" else 32),
        tensor=case["tensor"],
        pipeline=case["pipeline"],
        attention_data=case["attention_data"],
        moe_tensor=case["moe_tensor"],
        moe_expert=case["moe_expert"],
        memory_fraction=case["memory_fraction"],
        cuda_graph_reserved_bytes=case["cuda_graph_reserved_bytes"] or 0,
        gpu_memory_bytes=B200_MEMORY_BYTES,
        max_batched_tokens=case["max_batched_tokens"] or 8192,
        max_sequences=case["max_sequences"] or 256,
        max_model_len=case["context_length"],
        nextn=case["nextn"],
        decode_context=case["decode_context"],
        gemm_quant_mode=eng.get("gemm_quant_mode"),
        moe_quant_mode=eng.get("moe_quant_mode"),
        kvcache_quant_mode=eng.get("kvcache_quant_mode"),
        strict=strict,
    )


def test_enough_goldens():
    assert len(CASES) >= 25
    names = {p.stem for p in CASES}
    assert {"q32-tp4-vllm", "q32-tp4-trtllm", "ds32-dp8-ep8-vllm"} <= names


@pytest.mark.golden
@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_matches_aisimulate(path: Path):
    gold = _load(path)
    case = gold["case"]
    # the pinned config really is the case the test rebuilds
    par = gold["config"]["engine"]["workers"]["aggregated"]["parallelism"]
    assert par["tensor"] == case["tensor"] and par["moe_expert"] == case["moe_expert"]
    assert gold["config"]["engine"]["model"] == case["model"]
    if "error" in gold:
        assert gold["exit_code"] != 0
        with pytest.raises(CapacityError):
            _breakdown(case)
        est = _breakdown(case, strict=False)
        assert est.blocks == 0
        if gold["error"]["kind"] == "no_kv_budget":
            assert est.kv_budget_bytes <= 0
            assert int(est.non_kv_bytes) == gold["error"]["non_kv_bytes"]
        else:
            assert gold["error"]["kind"] == "zero_blocks"
            assert est.kv_budget_bytes > 0
        return
    assert _breakdown(case).as_dict() == gold["memory_diagnostics"]["aggregated"]


def test_reference_figures():
    """Reference figures: Qwen3-32B TP4 on B200, memory_fraction 0.9."""
    q32 = load_model("Qwen/Qwen3-32B")
    common = dict(tensor=4, memory_fraction=0.9, gpu_memory_bytes=B200_MEMORY_BYTES)
    vllm = kv_blocks_from_memory(q32, backend="vllm", block_size=64, **common)
    trt = kv_blocks_from_memory(q32, backend="trtllm", block_size=32, **common)
    assert (vllm.blocks, trt.blocks) == (36412, 73836)
    assert vllm.weights_bytes == 16_380_723_200 and vllm.kv_bytes_per_token == 65_536
    assert vllm.non_kv_bytes == trt.non_kv_bytes == 21_220_950_016
    # TRT-LLM takes f of the free memory, vLLM of the whole GPU
    assert trt.kv_budget_bytes - vllm.kv_budget_bytes == pytest.approx(0.1 * 21_220_950_016)


def test_unused_inputs_do_not_change_the_result():
    q32 = load_model("Qwen/Qwen3-32B")
    base = dict(backend="vllm", block_size=64, tensor=4, gpu_memory_bytes=B200_MEMORY_BYTES)
    ref = kv_blocks_from_memory(q32, **base).blocks
    assert (
        kv_blocks_from_memory(q32, max_sequences=1, max_model_len=2048, nextn=3, **base).blocks
        == ref
    )


def test_lines_show_every_term():
    ds = load_model("deepseek-ai/DeepSeek-V3.2")
    est = kv_blocks_from_memory(
        ds,
        backend="vllm",
        block_size=64,
        attention_data=8,
        moe_expert=8,
        gpu_memory_bytes=B200_MEMORY_BYTES,
    )
    text = "\n".join(est.lines())
    for word in (
        "weights",
        "activations",
        "communication",
        "runtime",
        "CUDA graphs",
        "KV budget",
        "KV bytes per token (fp8)",
        "19,593",
    ):
        assert word in text


def test_bad_inputs_are_clear():
    q32 = load_model("Qwen/Qwen3-32B")
    base = dict(block_size=64, gpu_memory_bytes=B200_MEMORY_BYTES)
    with pytest.raises(NotAvailableError, match="sglang"):
        kv_blocks_from_memory(q32, backend="sglang", **base)
    with pytest.raises(ConfigError, match="gemm_quant_mode"):
        kv_blocks_from_memory(q32, backend="vllm", gemm_quant_mode="fp7", **base)
    with pytest.raises(CapacityError, match="no KV budget"):
        kv_blocks_from_memory(q32, backend="vllm", memory_fraction=0.3, **base)
