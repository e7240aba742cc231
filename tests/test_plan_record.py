"""The op plan record: one numba type for every family, named scalars, a complete cache key,
and the hardware taken from the config."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numba
import pytest

from aisim.config import load_config
from aisim.engine.spec import resolve
from aisim.errors import OpTableError
from aisim.state import placeholder_plan
from aisim.timing import provider
from aisim.timing.plan_cache import plan_sources
from aisim.timing.plan_record import pass_scalars, scalars_of

GOLDEN = Path(__file__).parent / "golden"
# one deployment per plan family: dense, Qwen3 MoE, DeepSeek-V3.2 (DSA), DeepSeek-R1 (MLA)
FAMILY_CONFIGS = (
    "dense-vllm-c64-r256",
    "qwen3-30b-a3b-tp2-ep2",
    "mla-dp8-c128-r256",
    "dsr1-trtllm-tp8",
)


def _spec(name: str):
    return resolve(load_config(str(GOLDEN / name / "config.yaml")))


@pytest.mark.parametrize("name", FAMILY_CONFIGS)
def test_every_family_has_the_placeholder_type(name: str) -> None:
    """The event loop compiles once for all runs: op-level or not, any model family."""
    plan = provider.plan_for(_spec(name), name)
    assert numba.typeof(plan.arrays) == numba.typeof(placeholder_plan())


def test_scalars_by_name() -> None:
    record = pass_scalars(num_ctx_ops=14, mem_bw=7.7e12, dispatch_allreduce=True)
    got = scalars_of(SimpleNamespace(scalars=record))
    assert (got.num_ctx_ops, got.mem_bw, got.dispatch_allreduce, got.heads) == (
        14,
        7.7e12,
        True,
        0.0,
    )
    assert type(got.num_ctx_ops) is int and type(got.heads) is float
    with pytest.raises(TypeError):
        pass_scalars(num_ctx_op=14)  # a misspelt field is an error, not a silent 0


def test_cache_key_covers_every_plan_source() -> None:
    root = Path(__file__).parents[1]
    hashed = {p.resolve() for p in plan_sources()}
    for folder, pattern in (
        ("aisim/timing", "*.py"),
        ("aisim/optable", "*.py"),
        ("kernels", "optime_*.py"),
    ):
        for path in (root / folder).glob(pattern):
            assert path.resolve() in hashed, path


def test_hardware_comes_from_the_config() -> None:
    spec = _spec("dense-vllm-c64-r256")
    assert spec.hardware == "b200_sxm"
    import pickle

    b200 = pickle.dumps(provider.plan_for(spec, "test"))
    h100 = pickle.dumps(provider.plan_for(dataclasses.replace(spec, hardware="h100_sxm"), "test"))
    assert b200 != h100  # h100_sxm's own tables and constants
    with pytest.raises(OpTableError, match="h300_sxm"):
        provider.plan_for(dataclasses.replace(spec, hardware="h300_sxm"), "test")
