"""Native MTP (docs/rules.md 8): acceptance lowering, the seeded ChaCha12 walk, validation.

End-to-end MTP scheduling is pinned by the tests/golden/mtp-* cases (AISimulate figures); here
the numba generator is checked against the plain-Python reading in tests/reference/stdrng.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from aisim import state as st
from aisim.kernels import mtp_step, rng
from aisim.kernels.mtp_step import mtp_on
from tests.reference.stdrng import StdRng, burst

SEEDS = (0, 1, 41, 42, 43, 49, 12345, 2**32 - 1, 2**32, 2**63 + 7, 2**64 - 1)


def _mtp_state(rates: list[float], seeds: tuple[int, ...]) -> st.MtpState:
    mtp = st.allocate_mtp(len(rates), 0.0, len(seeds))
    for i, rate in enumerate(rates):
        mtp.thresholds[i], mtp.always[i] = rng.bernoulli_threshold(rate)
    for r, seed in enumerate(seeds):
        rng.seed_from_u64(mtp.rng[r], np.uint64(seed))
    return mtp


def test_first_twelve_bursts_seed_42() -> None:
    """docs/rules.md 8.6: rank 0 of worker 0 (seed 42), nextn 2 accepted 1.5 -> [1, 0.5]."""
    mtp = st.allocate_mtp(2, 1.5, 1)
    assert [mtp_step.burst_tokens(mtp, 0, 3) for _ in range(12)] == [
        2,
        2,
        2,
        3,
        3,
        3,
        2,
        2,
        3,
        3,
        2,
        2,
    ]


# every refill width this machine can run (0 SSE2 x4, 1 AVX2 x8, 2 AVX-512 x16)
LEVELS = tuple(range(rng.host_vector_level() + 1))


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("seed", SEEDS)
def test_u64_stream_matches_reference(seed: int, level: int) -> None:
    state = rng.new_stream(seed, level)
    ref = StdRng(seed)
    # an odd number of 32-bit words first puts a u64 across the buffer boundary (256 words)
    for k in range(3):
        assert rng.next_u32(state) == ref.next_u32(), k
    for k in range(700):
        assert rng.next_u64(state) == ref.next_u64(), k


def test_stream_levels_agree_past_many_refills() -> None:
    """The vector widths compute the same keystream, block counter carries included."""
    words = []
    for level in LEVELS:
        state = rng.new_stream(2**64 - 1, level)
        state[rng.META] = 0xFFFFFFF8  # the 16-block refill crosses the counter's low word
        words.append([int(rng.next_u32(state)) for _ in range(3 * rng.BUF_WORDS)])
    assert all(w == words[0] for w in words)
    ref = StdRng(2**64 - 1)
    ref.counter = 0xFFFFFFF8
    assert words[0] == [ref.next_u32() for _ in range(3 * rng.BUF_WORDS)]


def test_host_level_is_a_known_width() -> None:
    assert rng.host_vector_level() in (0, 1, 2)
    assert rng.new_stream(42)[rng.LEVEL] == rng.host_vector_level()


@pytest.mark.parametrize(
    "rates",
    [
        [1.0, 0.5],
        [1.0, 0.7, 0.0],
        [0.5, 0.0],
        [0.9],
        [0.25, 1.0],
        [1.0] * 5,
        [0.0] * 3,
        [0.8, 0.6, 0.4, 0.2, 0.1],
    ],
)
def test_walks_match_reference(rates: list[float]) -> None:
    mtp = _mtp_state(rates, SEEDS)
    for r, seed in enumerate(SEEDS):
        ref = StdRng(seed)
        for step in range(200):
            slots = 1 + (step % (len(rates) + 1))  # short-changed requests walk fewer rates
            want = burst(ref, rates[: slots - 1])
            assert mtp_step.burst_tokens(mtp, r, slots) == want, (seed, step)


def test_each_rank_has_its_own_stream() -> None:
    """Seeds 42 + worker_index x dp_size + dp_rank, i.e. 42 + scheduler rank."""
    mtp = st.allocate_mtp(3, 1.7, 4)
    for r in range(4):
        ref = StdRng(42 + r)
        got = [mtp_step.burst_tokens(mtp, r, 4) for _ in range(50)]
        assert got == [burst(ref, [1.0, 0.7, 0.0]) for _ in range(50)]


@pytest.mark.parametrize(
    ("nextn", "accepted", "rates"),
    [
        (2, 1.5, [1.0, 0.5]),
        (3, 1.7, [1.0, 0.7, 0.0]),
        (2, 0.0, [0.0, 0.0]),
        (2, 2.0, [1.0, 1.0]),
        (1, 0.6, [0.6]),
        (5, 3.0, [1.0, 1.0, 1.0, 0.0, 0.0]),
        (4, 0.25, [0.25, 0.0, 0.0, 0.0]),
    ],
)
def test_acceptance_rates(nextn: int, accepted: float, rates: list[float]) -> None:
    assert st.acceptance_rates(nextn, accepted) == pytest.approx(rates, abs=0.0)


def test_rate_one_consumes_no_draw() -> None:
    """Bernoulli(1) accepts without a draw: [1, 1] walks leave the stream untouched."""
    mtp = _mtp_state([1.0, 1.0], (42,))
    assert [mtp_step.burst_tokens(mtp, 0, 3) for _ in range(10)] == [3] * 10
    ref = StdRng(42)
    assert rng.next_u64(mtp.rng[0]) == ref.next_u64()


def test_mtp_switch_is_the_argument_type() -> None:
    assert mtp_on(st.allocate_mtp(2, 1.5, 1))
    assert not mtp_on(st.allocate_mtp(0, None, 1))
    assert isinstance(st.allocate_mtp(0, None, 3), st.NoMtp)
