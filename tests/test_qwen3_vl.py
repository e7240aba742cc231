"""Qwen3-VL language models (text traffic): Qwen3 plans without the q / k norm extras, and the
VL activation coefficients of the memory model (docs/timing.md 3.1, 7.3).

Figures: AISimulate 0.13.0 (`predict --detail time` / `--detail memory`), quoted below; whole
runs are the `qwen3-vl-*` goldens.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from aisim.memory import kv_blocks_from_memory
from aisim.models import load_model
from tests.single_pass import one_request_ops

GOLDEN = Path(__file__).parent / "golden" / "qwen3-vl-8b-vllm-tp1" / "config.yaml"


def _attention_ms(tmp_path: Path, model: str) -> tuple[float, float]:
    config = yaml.safe_load(GOLDEN.read_text())
    config["engine"]["model"] = model
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    ops = one_request_ops(path)
    return ops["context_attention"], ops["generation_attention"]


def test_attention_leaves_out_the_qk_norm_extras(tmp_path: Path) -> None:
    """One request of 1,024 tokens at TP1 on b200_sxm: Qwen3-VL-8B context / generation
    attention 1.506014 / 0.386504 ms, Qwen3-8B's 2.456677 / 1.337167 (the extras, 0.950663 ms
    a pass, in both phases)."""
    vl = _attention_ms(tmp_path, "Qwen/Qwen3-VL-8B-Instruct")
    text = _attention_ms(tmp_path, "Qwen/Qwen3-8B")
    assert vl == pytest.approx((1.506013968681597, 0.3865035943075782), rel=1e-9)
    assert text == pytest.approx((2.4566772829673114, 1.3371669085932927), rel=1e-9)
    assert not load_model("Qwen/Qwen3-VL-30B-A3B-Instruct").use_qk_norm


@pytest.mark.parametrize(
    ("model", "tensor", "activations"),
    [
        ("Qwen/Qwen3-VL-32B-Instruct", 1, 1_342_177_280),  # coefficient 10 (dense: 11)
        ("Qwen/Qwen3-VL-32B-Instruct", 2, 805_306_368),  # 6 (dense: 6.5)
        ("Qwen/Qwen3-VL-32B-Instruct", 8, 671_088_640),  # 5
        ("Qwen/Qwen3-VL-30B-A3B-Instruct", 2, 402_653_184),  # 6 (MoE: 13)
    ],
)
def test_vl_activation_coefficients(model: str, tensor: int, activations: int) -> None:
    est = kv_blocks_from_memory(
        load_model(model),
        backend="vllm",
        block_size=64,
        tensor=tensor,
        moe_expert=tensor if "A3B" in model else 1,
        gpu_memory_bytes=193_273_528_320,
        max_batched_tokens=8192,
    )
    assert est.activations_bytes == activations
