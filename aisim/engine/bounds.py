"""Limits that follow from the deployment, checked before anything is allocated.

The state arrays (aisim.state) index requests, blocks and slots with 32-bit integers, count
tokens in 64-bit integers and time each pass in whole nanoseconds as a 64-bit integer; and they
must fit in this machine's memory. A config beyond any of these is refused with the field that
drives it, instead of overflowing silently or asking the allocator for terabytes.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from aisim.errors import ConfigError

INDEX_MAX = 2**31 - 1  # int32 request / block / slot indices
TOKENS_MAX = 2**62  # a request's prompt + output tokens, with room for sums in int64
# round_ns(prefill) + round_ns(decode) must stay below 2**63 ns (kernels/pass_price.price_rank)
PASS_MS_MAX = 9.2e12
# the simulated clock is float ms: up to 2**32 ms (~50 days) it resolves a nanosecond
CLOCK_MS_MAX = float(2**32)


def machine_memory_bytes() -> int:
    """Physical memory, or the cgroup's limit when that is lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def _state_fields() -> list:
    """Every array one aggregated run allocates (aisim.state.allocate)."""
    from aisim import state as st

    return [
        f
        for fields in (
            st.REQUEST_FIELDS,
            st.RANK_FIELDS,
            st.BLOCK_FIELDS,
            st.WORKER_FIELDS,
            st.STATS_FIELDS,
            st.LOG_FIELDS,
        )
        for f in fields
    ]


def _state_bytes(dims: dict[str, int]) -> tuple[int, object]:
    """Bytes of the state arrays of a run of these dimensions, and the largest array."""
    from aisim import state as st

    total, largest, biggest = 0, -1, None
    for f in _state_fields():
        size = math.prod(st._eval_dim(part, dims) for part in f.shape.split(","))
        nbytes = size * _itemsize(f.dtype)
        total += nbytes
        if nbytes > largest:
            largest, biggest = nbytes, f
    return total, biggest


def _itemsize(dtype) -> int:
    import numpy as np

    return np.dtype(dtype).itemsize


# which config field sets each dimension of the state, for the message (N: the request count,
# named by the caller)
_DIM_FIELDS = {
    "R": "parallelism.replicas",
    "B": "kv_cache.capacity.blocks",
    "S": "scheduler.max_sequences",
    "K": "request length",
    "M": "kv_cache.capacity.blocks",
}  # M: the block hash map, 2x the blocks


def check_state_fits(
    spec,
    n_requests: int,
    longest_tokens: int,
    where: str,
    requests_field: str,
    sessions: bool = False,
) -> None:
    """Refuse a run whose state cannot be indexed by the kernels or held in memory.

    `where` prefixes the message (the config file); `requests_field` names what sets the
    request count (traffic.stop.requests, or the trace file)."""
    role = f"engine.workers.{spec.role}"
    ranks = spec.replicas * spec.dp_size
    if n_requests > INDEX_MAX:
        raise ConfigError(
            f"{where}: {requests_field}: {n_requests:,} requests exceed the "
            f"{INDEX_MAX:,} a run can index; split the workload"
        )
    if ranks * spec.num_blocks > INDEX_MAX and ranks > spec.num_blocks:
        raise ConfigError(
            f"{where}: {role}.parallelism.replicas: {spec.replicas:,} replicas x "
            f"{spec.dp_size} attention_data ranks of {spec.num_blocks:,} KV blocks each exceed "
            f"the {INDEX_MAX:,} block ids a run can index; lower the replicas"
        )
    if ranks * spec.num_blocks > INDEX_MAX:
        raise ConfigError(
            f"{where}: {role}.kv_cache.capacity.blocks: {spec.num_blocks:,} blocks on each of "
            f"{ranks:,} scheduler ranks (parallelism.replicas x attention_data) exceed the "
            f"{INDEX_MAX:,} KV block ids a run can index; lower the blocks or the replicas"
        )
    if longest_tokens > TOKENS_MAX:
        raise ConfigError(
            f"{where}: a request of {longest_tokens:,} tokens exceeds the "
            f"{TOKENS_MAX:,} aisim counts exactly; shorten it"
        )
    running = max(1, min(spec.max_seqs, n_requests))
    if ranks * running > INDEX_MAX:
        raise ConfigError(
            f"{where}: {role}.scheduler.max_sequences: {running:,} running requests on each of "
            f"{ranks:,} ranks exceed the {INDEX_MAX:,} slots a run can index; lower it or the "
            "replicas"
        )
    from aisim import state as st

    # without per-request records (their own memory check is the records') and one log row
    dims = st.shape_dims(
        n_requests,
        ranks,
        spec.replicas,
        running,
        spec.num_blocks,
        -(-longest_tokens // spec.block_size) + 1,
        1,
        spec.block_size,
        tokenizer_threads=spec.tokenization[0],
        sessions=sessions,
    )
    need, largest = _state_bytes(dims)
    have = machine_memory_bytes()
    if need > have:
        driver = _driver(largest, requests_field)
        raise ConfigError(
            f"{where}: {role}: the simulation state would need {need / 2**30:,.1f} GiB (its "
            f"largest array, {largest.name}, grows with {driver}) but this machine has "
            f"{have / 2**30:,.1f} GiB; lower {driver}"
        )


def _driver(field, requests_field: str) -> str:
    """The config fields a state array's size grows with, for the message."""
    dims = [d for part in field.shape.split(",") for d in part.split("*")]
    fields = dict(_DIM_FIELDS, N=requests_field)
    named = [fields[d] for d in dims if d in fields]
    return " x ".join(dict.fromkeys(named)) or "the deployment"


def check_pass_time(spec, where: str) -> None:
    """Fixed timing: a pass of both phases must be timed without overflowing 64-bit ns."""
    if spec.timing != "fixed":
        return
    total = spec.prefill_ms + spec.decode_ms
    if total > PASS_MS_MAX:
        key = "decode_ms" if spec.decode_ms >= spec.prefill_ms else "prefill_ms"
        raise ConfigError(
            f"{where}: engine.workers.{spec.role}.timing.{key}: prefill_ms + decode_ms = "
            f"{total:g} ms, beyond the {PASS_MS_MAX:g} ms a pass can last (passes are timed in "
            "whole nanoseconds as 64-bit integers); give a shorter pass time"
        )


def never_finishing(spec, prompt, output) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which requests could never finish on one of spec's ranks (AISimulate loops or aborts on
    them), the KV blocks each needs and the output tokens it runs on the rank (one on a prefill
    worker, truncated to the context): on vLLM its longest sequence (an MTP burst reserves the
    last token too) over the rank's blocks. Requests the deployment ends without running
    are not stuck: a prompt at or over the context limit and a vLLM prompt larger than the pool
    are rejected at admission, a P/D handoff the decode pool could never hold fails. TRT-LLM
    clamps outputs to the pool, so none of its requests is stuck."""
    bs, nb = spec.block_size, spec.num_blocks
    p = np.asarray(prompt, dtype=np.int64)
    o = np.asarray(output, dtype=np.int64)
    if spec.role == "prefill":
        o = np.minimum(o, 1)  # a prefill worker computes the prompt and one internal token
    if spec.max_model_len is not None:
        o = np.where(p < spec.max_model_len, np.minimum(o, spec.max_model_len - p), o)
    need = -(-(p + o - (0 if spec.nextn else 1)) // bs)
    if spec.backend != "vllm":
        return np.zeros(p.shape, dtype=bool), need, o
    return ~rejected_at_admission(spec, p) & (need > nb), need, o


def rejected_at_admission(spec, prompt) -> np.ndarray:
    """Which requests the rank rejects when it first schedules them, before any of their
    tokens is computed: a prompt at or over the context limit, and on vLLM a prompt with more
    blocks than the rank's pool."""
    p = np.asarray(prompt, dtype=np.int64)
    out = np.zeros(p.shape, dtype=bool)
    if spec.max_model_len is not None:
        out |= p >= spec.max_model_len
    if spec.backend == "vllm":
        out |= -(-p // spec.block_size) > spec.num_blocks
    return out


def never_finishing_message(where: str, prompt: int, output: int, need: int, spec) -> str:
    """The capacity error of a request never_finishing flags."""
    return (
        f"{where}.kv_cache.capacity.blocks: a request of {prompt} prompt + {output} output "
        f"tokens needs {need} blocks of {spec.block_size} tokens but a rank has "
        f"{spec.num_blocks}; it could never finish. Raise the capacity or shorten the request"
    )
