"""Requests as arrays: lengths, open-loop arrival times and shareable prefix-block hashes."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from aisim.engine.spec import EngineSpec
from aisim.engine.workload import WorkloadSpec


class Traffic(NamedTuple):
    prompt_len: np.ndarray  # int64[N] tokens
    requested_output_len: np.ndarray  # int64[N] tokens, as configured
    output_len: np.ndarray  # int64[N] tokens the request will emit (truncated / clamped)
    arrival_ms: np.ndarray  # float64[N] ms (open loop); zeros for closed loop
    pfx_start: np.ndarray  # int64[N] start of the request's slice of pfx_hash
    pfx_len: np.ndarray  # int32[N] shareable leading blocks
    pfx_hash: np.ndarray  # uint64[*] chained content hashes of shareable blocks
    workload: WorkloadSpec  # what the arrays were drawn from (closed or open loop, cut-off)
    row: np.ndarray | None = None  # int64[N] trace file row of each request; None: synthetic
    pfx_src_tokens: int = 0  # tokens per pfx_hash entry (trace block size); 0: one per KV block
    turn: np.ndarray | None = None  # int32[N] turn within its session; None: no sessions
    turn_delay_ms: np.ndarray | None = None  # float64[N] think time before the turn, ms
    conv: np.ndarray | None = None  # int32[N] request keying its conversation's own blocks
    session_names: list[str] | None = None  # a session trace's session id of each request

    @property
    def sessions(self) -> bool:
        """Requests are the turns of multi-turn sessions (kernels/sessions.py)."""
        return self.turn is not None


def _chain_hashes(contents: np.ndarray) -> np.ndarray:
    """Hash chain over block contents: a block matches only when all its parents match."""
    out = np.empty(len(contents), dtype=np.uint64)
    h = 0x243F6A8885A308D3
    mask = (1 << 62) - 1  # bit 62 is reserved for blocks no other request can share
    for k, c in enumerate(contents.tolist()):
        h = (h * 0x100000001B3 ^ (int(c) + 0x9E3779B97F4A7C15)) & 0xFFFFFFFFFFFFFFFF
        h ^= h >> 29
        out[k] = (h & mask) | 1
    return out


def truncated_outputs(spec: EngineSpec, prompt: np.ndarray, requested: np.ndarray) -> np.ndarray:
    """int64 tokens each request emits on pool `spec`: truncated to the context, and TRT-LLM
    clamps max_output_tokens to what the KV pool can hold at enqueue (docs/rules.md 3.2;
    aisim.engine.spec.output_for for one request)."""
    out = np.array(requested, dtype=np.int64)
    if spec.max_model_len is not None:
        fits = prompt < spec.max_model_len
        out[fits] = np.minimum(out[fits], spec.max_model_len - prompt[fits])
    if spec.backend == "trtllm":
        out = np.minimum(out, spec.num_blocks * spec.block_size - prompt)
    return out


def synthetic(spec: EngineSpec, workload: WorkloadSpec) -> Traffic:
    """A synthetic source's requests as the pool `spec` receives them (outputs truncated to its
    context, clamped to a TRT-LLM pool)."""
    n = workload.num_requests
    p, o = workload.input_tokens, workload.output_tokens
    prompt = np.full(n, p, dtype=np.int64)
    requested = np.full(n, o, dtype=np.int64)
    out = truncated_outputs(spec, prompt, requested)
    # Every request shares the first cached_prefix_tokens tokens; full blocks of it are shareable.
    shared_blocks = workload.cached_prefix_tokens // spec.block_size
    pfx_hash = _chain_hashes(np.arange(shared_blocks, dtype=np.int64))
    arrival = np.zeros(n, dtype=np.float64)
    if workload.load == "poisson":
        from aisim.kernels.rng import poisson_arrivals_ms

        arrival = poisson_arrivals_ms(np.uint64(workload.seed), float(workload.rate_per_s), n)
    elif workload.load == "constant_rate":
        # AISimulate accumulates the constant gap in float ms (not k x gap)
        gap = 1000.0 / workload.rate_per_s
        arrival = np.concatenate(([0.0], np.cumsum(np.full(n - 1, gap)))) if n else arrival
    return Traffic(
        prompt_len=prompt,
        requested_output_len=requested,
        output_len=out,
        arrival_ms=arrival,
        pfx_start=np.zeros(n, dtype=np.int64),
        pfx_len=np.full(n, shared_blocks, dtype=np.int32),
        pfx_hash=pfx_hash,
        workload=workload,
    )


def role_traffic(spec: EngineSpec, workload: WorkloadSpec) -> Traffic:
    """One pool's view of the workload's requests (a synthetic source or a trace): its block
    size keys the prefix hashes, its limits clamp the output lengths."""
    if workload.trace_path is not None:
        from aisim.traffic_trace import trace_traffic

        return trace_traffic(spec, workload)
    if workload.turns > 1:
        from aisim.traffic_session import session_traffic

        return session_traffic(spec, workload)
    return synthetic(spec, workload)
