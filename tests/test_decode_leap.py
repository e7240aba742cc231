"""Decode leaps (kernels/leap.py) must change nothing: single-rank cases run with leaps (pass
compression on, no invariant checks) against the exact per-request path, bit for bit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from aisim.engine.driver import simulate_pool
from aisim.engine.workload import WorkloadSpec
from aisim.errors import CapacityError
from aisim.traffic import role_traffic, synthetic
from tests.test_kernel_vs_reference import random_case
from tests.test_pass_compression import _assert_same


def _run(spec, traffic, fast: bool):
    try:
        return simulate_pool(spec, traffic, capture=True, lazy_decode=fast)
    except CapacityError:
        return None


def _single_rank(seed: int):
    spec, traffic = random_case(seed)
    spec = dataclasses.replace(spec, replicas=1, dp_size=1)
    return spec, role_traffic(spec, traffic.workload)


@pytest.mark.parametrize("seed", range(1, 1000, 7))
def test_leaps_change_nothing(seed: int) -> None:
    spec, traffic = _single_rank(seed)
    fast, exact = _run(spec, traffic, True), _run(spec, traffic, False)
    _assert_same(fast, exact)
    if fast is not None:
        np.testing.assert_array_equal(fast.stats.acc, exact.stats.acc)
        assert (
            fast.pools[0].workers.num_passes.tolist() == exact.pools[0].workers.num_passes.tolist()
        )
        assert fast.pools[0].workers.busy_ms.tolist() == exact.pools[0].workers.busy_ms.tolist()


@pytest.mark.parametrize("load", ["concurrency", "poisson"])
def test_low_concurrency_steady_decoding(load: str) -> None:
    spec, _ = random_case(0)
    spec = dataclasses.replace(
        spec,
        backend="vllm",
        replicas=1,
        dp_size=1,
        block_size=16,
        num_blocks=400,
        max_tokens=512,
        max_seqs=16,
        max_model_len=40960,
        prefix_caching=True,
        chunked_prefill=True,
        prefill_interval=1,
        timing="polynomial",
    )
    workload = WorkloadSpec(
        load=load,
        num_requests=60,
        concurrency=2,
        rate_per_s=5.0 if load == "poisson" else 0.0,
        input_tokens=100,
        output_tokens=90,
        cached_prefix_tokens=48,
    )
    traffic = synthetic(spec, workload)
    fast, exact = _run(spec, traffic, True), _run(spec, traffic, False)
    _assert_same(fast, exact)
    np.testing.assert_array_equal(fast.stats.acc, exact.stats.acc)
