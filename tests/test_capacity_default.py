"""capacity {type: default}: blocks per rank from the GPU memory model (docs/timing.md 7)."""

from __future__ import annotations

from pathlib import Path

import pytest

from aisim.config import load_config
from aisim.engine.spec import resolve
from aisim.errors import CapacityError

CFG = """\
traffic:
  source: {type: synthetic, input_tokens: 1024, output_tokens: 16}
  load: {type: concurrency, concurrency: 8}
  stop: {requests: 16}
engine:
  model: Qwen/Qwen3-32B
  hardware: b200_sxm
  backend: vllm
  workers:
    aggregated:
      parallelism: {tensor: 4}
      kv_cache: {capacity: {type: default}}
      timing: {type: default}
"""


@pytest.mark.parametrize(
    ("backend", "blocks", "block_size"), [("vllm", 36412, 64), ("trtllm", 73836, 32)]
)
def test_qwen3_32b_tp4_default_capacity(tmp_path: Path, backend, blocks, block_size) -> None:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(CFG)
    spec = resolve(load_config(cfg, [f"engine.backend={backend}"]))
    assert (spec.num_blocks, spec.block_size) == (blocks, block_size)


def test_no_kv_budget_is_a_capacity_error(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(CFG)
    with pytest.raises(CapacityError, match=r"kv_cache\.capacity"):
        resolve(
            load_config(
                cfg,
                [
                    "engine.workers.aggregated.parallelism.tensor=1",
                    "engine.workers.aggregated.kv_cache.capacity.memory_fraction=0.3",
                ],
            )
        )
