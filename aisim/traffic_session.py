"""Synthetic multi-turn sessions as request arrays (docs/rules.md 10.5).

Requests are laid out session by session, turn by turn. Turn k's prompt is the conversation so
far: turn k - 1's prompt, the tokens it emitted (none if it was rejected) and the new tokens of
turn k. Every length is known in advance (truncation and rejection follow from the prompt
alone), so only the arrival of later turns is left to the kernel (kernels/sessions.py).
"""

from __future__ import annotations

import math

import numpy as np

from aisim.engine.bounds import rejected_at_admission
from aisim.engine.spec import EngineSpec, output_for
from aisim.engine.workload import WorkloadSpec

GROUP_SEED = 0
"""Seed of the stream that assigns sessions to prefix groups (AISimulate's synthesis seed,
whatever the load's arrival seed)."""


def turn_lengths(spec: EngineSpec, workload: WorkloadSpec) -> tuple[np.ndarray, ...]:
    """(prompt, requested output, output) of one session's turns on pool `spec`."""
    new, requested = workload.input_tokens, workload.output_tokens
    prompts, outs = [], []
    prompt = new
    for _ in range(workload.turns):
        out = output_for(spec, prompt, requested)
        prompts.append(prompt)
        outs.append(out)
        prompt += (0 if rejected(spec, prompt, out) else out) + new
    return (
        np.array(prompts, dtype=np.int64),
        np.full(workload.turns, requested, dtype=np.int64),
        np.array(outs, dtype=np.int64),
    )


def rejected(spec: EngineSpec, prompt: int, out: int) -> bool:
    """A turn that can never run is rejected and emits nothing (docs/rules.md 3.3): the
    admission check, or TRT-LLM's clamp leaving it no output."""
    if rejected_at_admission(spec, [prompt])[0]:
        return True
    return spec.backend == "trtllm" and out <= 0


def _first_arrivals(workload: WorkloadSpec, sessions: int) -> np.ndarray:
    if workload.load == "poisson":
        from aisim.kernels.rng import poisson_arrivals_ms

        return poisson_arrivals_ms(np.uint64(workload.seed), float(workload.rate_per_s), sessions)
    if workload.load == "constant_rate" and sessions:
        gap = 1000.0 / workload.rate_per_s  # a running float sum, as for requests
        return np.concatenate(([0.0], np.cumsum(np.full(sessions - 1, gap))))
    return np.zeros(sessions, dtype=np.float64)


def shared_blocks(spec: EngineSpec, workload: WorkloadSpec) -> int:
    """Full KV blocks of a first prompt that its prefix group shares: the leading
    round(ceil(new / bs) x ratio) blocks (half away from zero), full ones only."""
    if workload.prefix_groups == 0 or workload.shared_prefix_ratio == 0.0:
        return 0
    bs, new = spec.block_size, workload.input_tokens
    blocks = -(-new // bs)
    prefix = min(blocks, math.floor(blocks * workload.shared_prefix_ratio + 0.5))
    return min(prefix, new // bs)


def session_traffic(spec: EngineSpec, workload: WorkloadSpec):
    """The requests of a synthetic-session source as pool `spec` receives them."""
    from aisim.kernels.rng import below
    from aisim.traffic import Traffic, _chain_hashes

    turns = workload.turns
    sessions = workload.num_sessions
    n = sessions * turns
    prompt, requested, out = (np.tile(a, sessions) for a in turn_lengths(spec, workload))
    turn = np.tile(np.arange(turns, dtype=np.int32), sessions)
    delay = np.where(turn > 0, workload.turn_delay_ms, 0.0)
    arrival = np.zeros(n, dtype=np.float64)
    arrival[::turns] = _first_arrivals(workload, sessions)
    shared = shared_blocks(spec, workload)
    pfx_start = np.zeros(n, dtype=np.int64)
    pfx_hash = np.zeros(0, dtype=np.uint64)
    if shared:
        groups = workload.prefix_groups
        group = below(GROUP_SEED, groups, sessions)
        pfx_start[:] = np.repeat(group * shared, turns)
        contents = (np.arange(groups, dtype=np.int64)[:, None] + 1) << 32
        pfx_hash = np.concatenate(
            [_chain_hashes(contents[g] + np.arange(shared)) for g in range(groups)]
        )
    return Traffic(
        prompt_len=prompt,
        requested_output_len=requested,
        output_len=out,
        arrival_ms=arrival,
        pfx_start=pfx_start,
        pfx_len=np.full(n, shared, dtype=np.int32),
        pfx_hash=pfx_hash,
        workload=workload,
        turn=turn,
        turn_delay_ms=delay,
        conv=np.repeat(np.arange(0, n, turns, dtype=np.int32), turns),
    )
