"""Every GPU AISimulate 0.13 ships silicon tables for: the registry, the shipped tables and their
system constants agree, and each GPU's own figures are pinned by the hw-* goldens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aisim.config import registry as reg
from aisim.optable.load import default_root
from aisim.timing.system import GpuSystem

GOLDEN = Path(__file__).parent / "golden"


def _shipped() -> dict[str, dict]:
    return {
        d.name: json.loads((d / "manifest.json").read_text())
        for d in sorted(default_root().iterdir())
        if (d / "manifest.json").exists()
    }


def test_every_known_gpu_ships_its_tables_and_nothing_else_does() -> None:
    assert sorted(_shipped()) == sorted(reg.KNOWN_HARDWARE)
    assert not set(reg.UNPRICED_HARDWARE) & set(reg.KNOWN_HARDWARE)


@pytest.mark.parametrize("hardware", reg.KNOWN_HARDWARE)
def test_every_priced_version_is_compiled(hardware: str) -> None:
    targets = {(t["backend"], t["version"]) for t in _shipped()[hardware]["targets"]}
    for backend in ("vllm", "trtllm"):
        for version in reg.priced_versions(hardware, backend):
            assert (backend, version) in targets, (hardware, backend, version)


@pytest.mark.parametrize("hardware", reg.KNOWN_HARDWARE)
def test_system_constants_are_the_gpus_own(hardware: str) -> None:
    system = json.loads((default_root() / hardware / "system.json").read_text())
    assert system["hardware"] == hardware
    gpu = GpuSystem.from_dict(system)
    assert gpu.hardware == hardware and gpu.mem_bw > 0 and gpu.gpus_per_node
    assert system["gpu"]["mem_capacity"] > 0 and int(system["misc"]["other_mem"]) > 0


def test_the_collective_library_comes_from_the_system() -> None:
    collectives = {
        hw: GpuSystem.from_dict(
            json.loads((default_root() / hw / "system.json").read_text())
        ).collectives
        for hw in reg.KNOWN_HARDWARE
    }
    assert collectives.pop("b60") == "oneccl"
    assert set(collectives.values()) == {"nccl"}


def test_each_gpu_has_a_golden() -> None:
    pinned = set()
    for folder in GOLDEN.glob("*"):
        cfg = folder / "config.yaml"
        if cfg.exists() and (folder / "prediction.json").exists():
            for line in cfg.read_text().splitlines():
                if line.strip().startswith("hardware:"):
                    pinned.add(line.split(":", 1)[1].strip())
    assert set(reg.KNOWN_HARDWARE) <= pinned, set(reg.KNOWN_HARDWARE) - pinned


def test_b60_tensor_groups_read_eager_rows_where_no_graph_rows_exist() -> None:
    """b60's vLLM 0.28.0 tables measure the custom allreduce on 2 and 4 cards (CUDA-graph
    rows); 8 cards come from 0.26.0, measured in eager mode only, and 16 cards scale the 8-card
    curve by the multi-node rule, as AISimulate prices them (goldens hw-b60-tp8-current,
    hw-b60-tp16-multinode)."""
    from aisim.timing.leaf_comm import allreduce_curve
    from aisim.timing.multinode import group_scale
    from aisim.timing.tables import load_tables

    tables, system = load_tables("b60", "vllm", "0.28.0", ("custom_allreduce",))
    x4, y4, _ = allreduce_curve(tables, 4, system)
    x8, y8, _ = allreduce_curve(tables, 8, system)
    x16, y16, _ = allreduce_curve(tables, 16, system)
    at = {float(v): i for i, v in enumerate(x8)}
    assert y8[at[4194304.0]] == 0.7105269599999999  # the 0.26.0 eager row
    assert y4[list(x4).index(65536.0)] == 0.02423073  # 0.28.0's CUDA-graph row, not eager
    factor = group_scale(16, 8, system)
    assert factor == pytest.approx(15 / 7 * 8 / 16 * 28.4 / 50.0, rel=1e-12)
    assert (x16 == x8).all() and (y16 == y8 * factor).all()


def test_b60_collectives_come_from_its_oneccl_tables() -> None:
    """b60 names a oneCCL version and no NCCL table of its own: its collective table is the
    oneCCL one (2 and 4 cards), and 8 cards scale the 4-card curve by the multi-node rule,
    as AISimulate prices the attention-DP MoE dispatch there (golden hw-b60-moe-adp8)."""
    from aisim.optable.load import read_manifest
    from aisim.timing.leaf_comm import nccl_curve
    from aisim.timing.tables import FAMILIES, load_tables

    manifest = read_manifest("b60")
    assert (manifest["collective_library"], manifest["nccl_version"]) == ("oneccl", "2022.0.0")
    tables, system = load_tables("b60", "vllm", "0.28.0", (*FAMILIES, "nccl"))
    x4, y4, _ = nccl_curve(tables, "all_gather", 4, "test", system)
    x8, y8, _ = nccl_curve(tables, "all_gather", 8, "test", system)
    assert y4[list(x4).index(262144.0)] == 0.02942  # the oneCCL row
    assert (x8 == x4).all() and (y8 == y4 * (7 / 3 * 4 / 8)).all()


def test_a_version_without_gemm_rows_of_its_own_is_refused_even_if_nothing_runs(tmp_path) -> None:
    """vLLM next (0.31.0) on b200_sxm has no folder of its own: with enable_shared_layer false
    its GEMM table is empty, which AISimulate refuses before any pass, even when every request
    would be rejected without one (a pool smaller than a prompt)."""
    from aisim.errors import EmptyTableError
    from aisim.prediction import run_prediction

    (tmp_path / "c.yaml").write_text(
        """
traffic:
  source: {type: synthetic, input_tokens: 1500, output_tokens: 3}
  load: {type: concurrency, concurrency: 4}
  stop: {requests: 8}
engine:
  model: Qwen/Qwen3-8B
  hardware: b200_sxm
  backend: vllm
  backend_version: next
  enable_shared_layer: false
  workers:
    aggregated:
      parallelism: {tensor: 1}
      scheduler: {max_batched_tokens: 2048, max_sequences: 8}
      kv_cache: {block_size: 16, capacity: {type: fixed, blocks: 93}}
      timing: {type: default}
"""
    )
    with pytest.raises(EmptyTableError, match=r"0\.31\.0 tables of b200_sxm hold no GEMM rows"):
        run_prediction(str(tmp_path / "c.yaml"))


def test_empty_attention_tables_refuse_a_run_that_prices_no_pass(tmp_path) -> None:
    """gb200's vLLM 0.31.0 rows hold no attention of their own; with enable_shared_layer false
    AISimulate loads the attention tables before any pass and refuses the run even when every
    request is rejected at admission (context_length below every prompt; difftest run AE)."""
    from aisim.errors import EmptyTableError
    from aisim.prediction import run_prediction

    (tmp_path / "c.yaml").write_text(
        """
traffic:
  source: {type: synthetic, input_tokens: 16, output_tokens: 32}
  load: {type: concurrency, concurrency: 2}
  stop: {requests: 4}
engine:
  model: Qwen/Qwen3-8B
  hardware: gb200
  backend: vllm
  backend_version: 0.31.0
  enable_shared_layer: false
  context_length: 15
  workers:
    aggregated:
      parallelism: {tensor: 2, attention_data: 2}
      kv_cache: {block_size: 64, capacity: {type: fixed, blocks: 6}}
      timing: {type: default}
"""
    )
    with pytest.raises(
        EmptyTableError, match=r"0\.31\.0 tables of gb200 hold no context_attention"
    ):
        run_prediction(str(tmp_path / "c.yaml"))
