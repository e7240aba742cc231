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


def test_a_group_beyond_the_measured_ones_on_b60_is_refused() -> None:
    """b60 measures the custom allreduce on up to 4 cards and prices larger groups from its
    oneCCL tables, which aisim does not read: refused, naming the limit."""
    from aisim.errors import NotAvailableError
    from aisim.prediction import run_prediction

    config = GOLDEN / "hw-b60-mtp-vllm" / "config.yaml"
    with pytest.raises(NotAvailableError, match=r"oneccl tables.*at most 4 GPUs"):
        run_prediction(str(config), ("engine.workers.aggregated.parallelism.tensor=8",))


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
