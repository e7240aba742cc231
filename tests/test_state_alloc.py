"""Request-state memory: traffic arrays serve in place, loop-only arrays are dropped after a run,
and nothing is sized by output tokens (the 10 M-request scale run depends on all three)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from aisim import state as st
from aisim.engine.driver import simulate_pool
from aisim.metrics import summarize
from aisim.traffic import synthetic
from tests.test_kernel_vs_reference import random_case


def test_given_request_arrays_are_used_in_place() -> None:
    prompt = np.arange(5, dtype=np.int64) + 10
    req, *_ = st.allocate(5, 1, 1, 2, 8, 4, 1, 16, {"prompt_len": prompt})
    assert req.prompt_len is prompt
    assert req.output_len.shape == (5,) and not np.shares_memory(req.output_len, prompt)


def test_given_request_array_of_the_wrong_dtype_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"RequestState\.pfx_len"):
        st.allocate(3, 1, 1, 2, 8, 4, 1, 16, {"pfx_len": np.zeros(3, np.int64)})


def test_summary_is_the_same_without_the_loop_only_fields() -> None:
    spec, traffic = random_case(7)
    workload = dataclasses.replace(
        traffic.workload, num_requests=40, load="concurrency", concurrency=8
    )
    result = simulate_pool(spec, synthetic(spec, workload))
    full = summarize(result)
    result = result.without_run_fields()
    assert all(len(getattr(result.requests, name)) == 0 for name in st.RUN_ONLY_FIELDS)
    assert summarize(result) == full


def test_request_state_does_not_grow_with_output_tokens() -> None:
    base, traffic = random_case(3)
    spec = dataclasses.replace(base, max_model_len=None)
    sizes = []
    for output in (16, 4096):
        workload = dataclasses.replace(traffic.workload, num_requests=32, output_tokens=output)
        result = simulate_pool(spec, synthetic(spec, workload))
        sizes.append(sum(a.nbytes for a in result.requests))
    assert sizes[0] == sizes[1]
