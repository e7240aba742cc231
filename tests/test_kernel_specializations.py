"""One compiled specialization per entry point: an int32 where int64 was expected would silently
compile (and cache) a second copy of the event loop (STYLE.md, fact 5). Only the kernels Python
calls are checked; helpers called with literal constants legitimately specialize per call site."""

from __future__ import annotations

import dataclasses

from aisim.engine.run import simulate
from aisim.kernels import loop, rng
from aisim.traffic import synthetic
from tests.test_kernel_vs_reference import random_case


def test_every_kernel_has_one_specialization() -> None:
    base, _ = random_case(3)
    for backend, timing, load, capture in (("vllm", "fixed", "concurrency", False),
                                           ("trtllm", "polynomial", "poisson", True),
                                           ("vllm", "polynomial", "constant_rate", True)):
        spec = dataclasses.replace(base, backend=backend, timing=timing, load=load,
                                   rate_per_s=50.0, num_requests=20, max_model_len=None)
        simulate(spec, synthetic(spec), capture=capture)
    assert len(rng.fill_poisson_arrivals_ms.signatures) == 1
    # the event loop compiles once per MTP switch (argument 10: NoMtp or MtpState), no more
    mtp_types = [type(sig[10]).__name__ + str(sig[10]).split("(")[0]
                 for sig in loop.run_aggregated.signatures]
    assert len(mtp_types) == len(set(mtp_types)), mtp_types
    assert {t.split("NamedTuple")[-1] for t in mtp_types} <= {"NoMtp", "MtpState"}, mtp_types
