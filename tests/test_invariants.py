"""The in-kernel invariant checker must catch broken state (it runs on every random case)."""

from __future__ import annotations

import dataclasses

from aisim import state as st
from aisim.kernels import invariants
from tests.test_kernel_vs_reference import random_case


def _fresh():
    spec, traffic = random_case(1)
    spec = dataclasses.replace(spec, num_blocks=8, block_size=4, max_seqs=4, max_tokens=64)
    req, ranks, blocks, _, _, _ = st.allocate(4, 1, 1, 4, 8, 4, 1, 4)
    return spec.kernel_params(traffic.workload, False), req, ranks, blocks


def test_clean_state_passes() -> None:
    p, req, ranks, blocks = _fresh()
    assert invariants.check_rank(p, req, ranks, blocks, 0, 0) == invariants.OK


def test_orphan_reference_is_caught() -> None:
    p, req, ranks, blocks = _fresh()
    ranks.clean_top[0] -= 1
    blocks.ref[0] = 1
    ranks.num_referenced[0] = 1
    assert invariants.check_rank(p, req, ranks, blocks, 0, 0) == invariants.REF_COUNT_DRIFT


def test_lost_block_is_caught() -> None:
    p, req, ranks, blocks = _fresh()
    ranks.clean_top[0] -= 1
    assert invariants.check_rank(p, req, ranks, blocks, 0, 0) == invariants.BLOCKS_NOT_CONSERVED


def test_budget_overrun_is_caught() -> None:
    p, req, ranks, blocks = _fresh()
    assert invariants.check_rank(p, req, ranks, blocks, 0, 65) == invariants.BUDGET_EXCEEDED
