"""Pass compression (lazy decoders) must change nothing: every random case of the reference test
and a long steady workload give bit-identical state with the fast path on and off."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from aisim.engine.driver import simulate_pool
from aisim.engine.workload import WorkloadSpec
from aisim.errors import CapacityError
from aisim.kernels.codes import CNT_LAZY
from aisim.traffic import synthetic
from tests.test_kernel_vs_reference import random_case

COMPARED = (
    "status",
    "rank",
    "arrival_ms",
    "first_admit_ms",
    "first_token_ms",
    "second_token_ms",
    "last_token_ms",
    "terminal_ms",
    "num_generated",
    "num_admissions",
    "reused_first",
    "reused_max",
)


def _run(spec, traffic, lazy_decode):
    try:
        return simulate_pool(
            spec, traffic, capture=True, lazy_decode=lazy_decode, check_invariants=True
        )
    except CapacityError:
        return None


def _assert_same(a, b) -> None:
    assert (a is None) == (b is None)
    if a is None:
        return
    for name in COMPARED:
        np.testing.assert_array_equal(
            getattr(a.requests, name), getattr(b.requests, name), err_msg=name
        )
    np.testing.assert_array_equal(a.stats.counters[:7], b.stats.counters[:7])
    np.testing.assert_array_equal(a.stats.bins, b.stats.bins)
    np.testing.assert_array_equal(a.stats.cnt, b.stats.cnt)
    np.testing.assert_allclose(a.stats.acc, b.stats.acc, rtol=1e-12)


@pytest.mark.parametrize("seed", range(0, 1000, 3))
def test_lazy_decoders_change_nothing(seed: int) -> None:
    spec, traffic = random_case(seed)
    _assert_same(_run(spec, traffic, True), _run(spec, traffic, False))


def test_fast_path_engages_on_a_steady_workload() -> None:
    spec, _ = random_case(0)
    spec = dataclasses.replace(
        spec,
        backend="vllm",
        replicas=2,
        dp_size=2,
        block_size=16,
        num_blocks=400,
        max_tokens=512,
        max_seqs=16,
        max_model_len=40960,
        prefix_caching=True,
        chunked_prefill=True,
        prefill_interval=2,
        timing="polynomial",
    )
    workload = WorkloadSpec(
        load="concurrency",
        num_requests=300,
        concurrency=40,
        input_tokens=100,
        output_tokens=90,
        cached_prefix_tokens=48,
    )
    traffic = synthetic(spec, workload)
    fast, slow = _run(spec, traffic, True), _run(spec, traffic, False)
    assert fast.stats.counters[CNT_LAZY] >= 250  # nearly every request turns lazy once
    assert slow.stats.counters[CNT_LAZY] == 0
    _assert_same(fast, slow)
