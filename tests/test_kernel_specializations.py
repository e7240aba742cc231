"""One compiled specialization per entry point: an int32 where int64 was expected would silently
compile (and cache) a second copy of the event loop. Only the kernels Python
calls are checked; helpers called with literal constants legitimately specialize per call site."""

from __future__ import annotations

import dataclasses

from aisim.engine.driver import simulate_pool
from aisim.kernels import loop, rng
from aisim.traffic import synthetic
from tests.test_kernel_vs_reference import random_case


def test_every_kernel_has_one_specialization() -> None:
    base, traffic = random_case(3)
    for backend, timing, load, capture in (
        ("vllm", "fixed", "concurrency", False),
        ("trtllm", "polynomial", "poisson", True),
        ("vllm", "polynomial", "constant_rate", True),
    ):
        spec = dataclasses.replace(base, backend=backend, timing=timing, max_model_len=None)
        workload = dataclasses.replace(
            traffic.workload, load=load, rate_per_s=50.0, num_requests=20
        )
        simulate_pool(spec, synthetic(spec, workload), capture=capture)
    # the event loop compiles once per MTP mode by design (its `mtp` argument is NoMtp or
    # MtpState); an MTP run earlier in the session adds that one, nothing else may
    modes = [str(sig[-2]).split("(")[0] for sig in loop.run_aggregated.signatures]
    assert len(modes) == len(set(modes)), f"run_aggregated: {loop.run_aggregated.signatures}"
    assert set(modes) <= {"NoMtp", "MtpState"}, modes
    fn = rng.fill_poisson_arrivals_ms
    assert len(fn.signatures) == 1, f"{fn.__name__}: {fn.signatures}"
