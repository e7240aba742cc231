"""Every mutable simulation buffer, declared once: name, dtype, shape, fill, unit, meaning.

All state is structure-of-arrays, allocated once at a fixed capacity and never resized inside a
kernel. Kernels receive these NamedTuples and mutate them in place; Python reads them after the
run. Sentinel -1 means "none" for every index column.

Shape symbols: N requests, C requests when per-request records are captured (else 1), T
requests when a tokenizer runs ahead of admission (else 1), Q requests when the traffic has
multi-turn sessions (else 1), X tokenizer threads per worker, R
scheduler ranks (workers x attention_data), W workers, S running slots per rank
(max_sequences), B KV blocks per rank, K blocks in one block-table row, M hash-map slots (a
power of two), A admission-log capacity, H event-calendar buckets.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from aisim.kernels.codes import NUM_COUNTERS, SKETCH_BINS


class Field(NamedTuple):
    name: str
    dtype: type
    shape: str
    fill: float
    unit: str
    doc: str


def _state_type(name: str, fields: tuple, doc: str) -> type:
    """A NamedTuple of one array per field of `fields`, in table order: the table is the one
    declaration (dtype, shape, unit, meaning), the type its compiled view."""
    cls = NamedTuple(name, [(f.name, np.ndarray) for f in fields])
    cls.__doc__ = doc
    cls.__module__ = __name__
    return cls


# one field per line: the table is read as a table
# fmt: off
REQUEST_FIELDS = (
    Field("prompt_len", np.int64, "N", 0, "tokens", "prompt length P"),
    Field("output_len", np.int64, "N", 0, "tokens",
          "output tokens the request will emit: requested length after max_model_len truncation "
          "and the TRT-LLM pool clamp"),
    Field("arrival_ms", np.float64, "N", 0.0, "ms", "arrival time (closed loop: set at spawn)"),
    Field("status", np.int8, "N", 0, "ReqStatus", "lifecycle code"),
    Field("rank", np.int32, "N", -1, "index", "scheduler rank = worker x D + dp_rank"),
    Field("num_computed", np.int64, "N", 0, "tokens", "tokens whose KV exists or is scheduled"),
    Field("num_generated", np.int64, "N", 0, "tokens", "output tokens emitted so far"),
    Field("sched_tokens", np.int64, "N", 0, "tokens", "tokens scheduled in the in-flight pass"),
    Field("computed_before", np.int64, "N", 0, "tokens", "num_computed when last scheduled"),
    Field("slot", np.int32, "N", -1, "index", "block-table row while it holds KV"),
    Field("wait_next", np.int32, "N", -1, "index", "next request in its rank's waiting queue"),
    Field("first_admit_ms", np.float64, "N", np.nan, "ms", "start of its first scheduled pass"),
    Field("first_token_ms", np.float64, "N", np.nan, "ms", "first token time"),
    Field("second_token_ms", np.float64, "N", np.nan, "ms", "second token time"),
    Field("last_token_ms", np.float64, "N", np.nan, "ms", "latest token time"),
    Field("terminal_ms", np.float64, "N", np.nan, "ms", "completion or rejection time"),
    Field("num_admissions", np.int32, "N", 0, "count", "admissions including readmissions"),
    Field("reused_first", np.int64, "N", 0, "tokens", "prefix-cache hit at first admission"),
    Field("reused_max", np.int64, "N", 0, "tokens", "largest prefix-cache hit over admissions"),
    Field("pfx_start", np.int64, "N", 0, "index", "start of its shareable block hashes"),
    Field("pfx_len", np.int32, "N", 0, "blocks", "number of shareable leading block hashes"),
    Field("seq", np.int64, "N", 0, "count", "order key in its rank's running list (admission)"),
    Field("lazy", np.bool_, "N", False, "flag",
          "steady decoder advanced implicitly (one token per rank pass); counts are stale"),
    Field("lazy_base", np.int64, "N", 0, "pass", "rank pass index its counts were last exact"),
    Field("gen_base", np.int64, "N", 0, "tokens", "num_generated at lazy_base"),
    Field("ev_pass", np.int64, "N", -1, "pass", "rank pass of its next KV or completion event"),
    Field("ev_prev", np.int32, "N", -1, "request index", "event calendar bucket link"),
    Field("ev_next", np.int32, "N", -1, "request index", "event calendar bucket link"),
    Field("finishing", np.bool_, "N", False, "flag", "completes at the in-flight pass end"),
    Field("activated", np.bool_, "N", False, "flag",
          "admitted with its whole prompt cached (TRT-LLM): a decode-set member this pass"),
    Field("no_stats", np.bool_, "N", False, "flag",
          "its token gaps stay out of the ITL statistics (unfinished at a trace cut-off)"),
    Field("rej_next", np.int32, "N", -1, "request index",
          "next request rejected by the same in-flight pass (they settle at its end)"),
    Field("drafting", np.bool_, "N", False, "flag",
          "MTP: its next decode step verifies drafts (cleared by preemption: a recompute "
          "completes with one token)"),
    Field("draft_slots", np.int8, "N", 0, "tokens",
          "MTP: verification slots granted in the in-flight pass (1 + drafts walked); 0 = none"),
    # the tokenizer ahead of admission (shape T: N when engine.tokenization is set, else 1)
    Field("tokenized_ms", np.float64, "T", np.nan, "ms",
          "tokenization done: the request joins its rank's waiting queue"),
    Field("tok_heap", np.int32, "T", -1, "request index",
          "min-heap of the requests in the tokenizers by (tokenized_ms, index); the length is "
          "counters[CNT_TOKENIZING]"),
    # multi-turn sessions (shape Q: N when the traffic has sessions, else 1)
    Field("turn", np.int32, "Q", 0, "index", "turn of its session (0: a session's first request)"),
    Field("conv", np.int32, "Q", 0, "request index",
          "the request that names its conversation's own KV blocks (kernels/kv_blocks.py: "
          "owner_key): a synthetic session's first turn; itself for a trace's full prompts"),
    Field("turn_delay_ms", np.float64, "Q", 0.0, "ms",
          "think time: arrival after the terminal time of the session's previous turn"),
    Field("release_heap", np.int32, "Q", -1, "request index",
          "min-heap of the turns released but not arrived by (arrival_ms, index); the length "
          "is counters[CNT_RELEASING]"),
    # latency attribution, kept only for captured per-request records (shape C: N, else 1)
    Field("alone_ms", np.float64, "C", 0.0, "ms",
          "passes that computed its prompt the first time with no other request in the pass"),
    Field("preempt_at_ms", np.float64, "C", np.nan, "ms",
          "start of the pass that preempted it, until it emits its next token"),
    Field("lost_first_ms", np.float64, "C", 0.0, "ms",
          "preemption to the next token, summed over preemptions before its first token"),
    Field("lost_later_ms", np.float64, "C", 0.0, "ms",
          "preemption to the next token, summed over preemptions after its first token"),
)
# fmt: on

# Request fields only the event loop needs (queues, pass compression, MTP, scratch). A prediction
# drops them once the loop has run, before its summary's temporaries (10 M requests: ~0.8 GB).
RUN_ONLY_FIELDS = (
    "tok_heap",
    "release_heap",
    "turn_delay_ms",
    "conv",
    "slot",
    "wait_next",
    "seq",
    "lazy",
    "lazy_base",
    "gen_base",
    "ev_pass",
    "ev_prev",
    "ev_next",
    "finishing",
    "activated",
    "no_stats",
    "rej_next",
    "drafting",
    "draft_slots",
    "sched_tokens",
    "computed_before",
)


def without_run_fields(req):
    """req with its loop-only arrays replaced by empty ones (same dtypes), freeing them."""
    return req._replace(**{name: getattr(req, name)[:0].copy() for name in RUN_ONLY_FIELDS})


# one field per line: the table is read as a table
# fmt: off
RANK_FIELDS = (
    Field("run_list", np.int32, "R,S", -1, "request index", "running requests, admission order"),
    Field("run_len", np.int32, "R", 0, "count", "running requests"),
    Field("wait_head", np.int32, "R", -1, "request index", "waiting queue head (FIFO)"),
    Field("wait_tail", np.int32, "R", -1, "request index", "waiting queue tail"),
    Field("wait_len", np.int32, "R", 0, "count", "waiting requests"),
    Field("capacity_bound", np.bool_, "R", False, "flag",
          "prefill_schedule_interval: last undeferred pass left requests waiting"),
    Field("num_referenced", np.int64, "R", 0, "blocks", "blocks referenced by live requests"),
    Field("lru_head", np.int32, "R", -1, "block", "least recently freed cached block"),
    Field("lru_tail", np.int32, "R", -1, "block", "most recently freed cached block"),
    Field("lru_len", np.int64, "R", 0, "blocks", "evictable cached blocks"),
    Field("lru_live", np.int64, "R", 0, "blocks", "evictable blocks some request could still hit"),
    Field("clean_top", np.int64, "R", 0, "blocks", "unhashed free blocks on the clean stack"),
    Field("slot_top", np.int32, "R", 0, "count", "free block-table rows on the slot stack"),
    Field("in_pass", np.bool_, "R", False, "flag", "the rank takes part in its worker's pass"),
    Field("pass_start_ms", np.float64, "R", 0.0, "ms", "start of the rank's latest pass"),
    Field("deferred", np.bool_, "R", False, "flag", "the in-flight pass deferred prefills"),
    Field("preempted", np.bool_, "R", False, "flag", "the in-flight pass preempted a request"),
    Field("pass_prefill", np.int64, "R", 0, "tokens",
          "prompt tokens the rank's latest pass committed (taken back at a cut-off)"),
    Field("act_list", np.int32, "R,S", -1, "request index",
          "running requests that are not lazy, in running order"),
    Field("act_len", np.int32, "R", 0, "count", "entries of act_list"),
    Field("lazy_count", np.int64, "R", 0, "count", "lazy decoders"),
    Field("lazy_sum", np.int64, "R", 0, "tokens",
          "sum over lazy decoders of P + gen_base - lazy_base - 1 (their L at pass x is this + x)"),
    Field("pass_idx", np.int64, "R", 0, "count", "passes the rank took part in"),
    Field("last_end_ms", np.float64, "R", 0.0, "ms", "end of the rank's latest pass"),
    Field("cooldown", np.int64, "R", 0, "passes", "passes before decoders may turn lazy again"),
    Field("due_list", np.int32, "R,S", -1, "request index", "lazy requests with an event now"),
    Field("due_len", np.int32, "R", 0, "count", "entries of due_list"),
    Field("cal_head", np.int32, "R,H", -1, "request index",
          "event calendar: bucket (pass mod H) -> first lazy request"),
    Field("held_list", np.int32, "R,S", -1, "request index",
          "P/D prefill side: prompts completed in the latest pass, KV held (source held)"),
    Field("held_len", np.int32, "R", 0, "count", "entries of held_list"),
    Field("rej_head", np.int32, "R", -1, "request index",
          "requests the in-flight pass rejected (newest first while it schedules, in "
          "rejection order once settled; list through rej_next)"),
    Field("dest_pending", np.int32, "R", 0, "count",
          "P/D decode side: destinations routed to this rank and not yet reserved"),
)
# fmt: on

# one field per line: the table is read as a table
# fmt: off
BLOCK_FIELDS = (
    Field("ref", np.int32, "R*B", 0, "count", "live requests referencing the block"),
    Field("hash", np.uint64, "R*B", 0, "key",
          "0 = not cached; else its map key, or 1 for a cached block only its owner can hit"),
    Field("in_map", np.bool_, "R*B", False, "flag", "the block's key is in the hash map"),
    Field("scratch", np.int32, "R*B", 0, "count", "work space of the debug invariant checks"),
    Field("lru_prev", np.int32, "R*B", -1, "block", "LRU list link"),
    Field("lru_next", np.int32, "R*B", -1, "block", "LRU list link"),
    Field("clean_stack", np.int32, "R*B", -1, "block", "per-rank stacks of unhashed free blocks"),
    Field("map_keys", np.uint64, "M", 0, "key", "open-addressing map: key (0 = empty)"),
    Field("map_vals", np.int32, "M", -1, "block", "open-addressing map: oldest cached copy"),
    Field("dup_next", np.int32, "R*B", -1, "block", "next cached copy of the same content"),
    Field("slot_blocks", np.int32, "R*S,K", -1, "block", "block table, one row per slot"),
    Field("slot_nblk", np.int32, "R*S", 0, "blocks", "blocks held by the slot's request"),
    Field("slot_nhashed", np.int32, "R*S", 0, "blocks", "leading blocks already cached"),
    Field("slot_stack", np.int32, "R*S", -1, "slot", "per-rank stacks of free slots"),
)
# fmt: on

# one field per line: the table is read as a table
# fmt: off
WORKER_FIELDS = (
    Field("busy", np.bool_, "W", False, "flag", "a pass is in flight"),
    Field("pass_start_ms", np.float64, "W", 0.0, "ms", "start of the in-flight pass"),
    Field("pass_end_ms", np.float64, "W", 0.0, "ms", "end of the in-flight pass"),
    Field("step", np.int64, "W", 0, "count", "group pass counter (prefill_schedule_interval)"),
    Field("ready_ms", np.float64, "W", 0.0, "ms", "time the worker finishes starting up"),
    Field("busy_ms", np.float64, "W", 0.0, "ms", "sum of pass durations"),
    Field("num_passes", np.int64, "W", 0, "count", "passes run"),
    Field("rr_rank", np.int64, "W", 0, "count", "round-robin counter over the worker's ranks"),
    Field("tok_free", np.float64, "W,X", 0.0, "ms", "time each tokenizer thread frees"),
)
# fmt: on

# one field per line: the table is read as a table
# fmt: off
STATS_FIELDS = (
    Field("acc", np.float64, "2,5", 0.0, "ms | tokens/s",
          "ITL / per-user throughput: sum, Welford mean, Welford M2, min, max"),
    Field("cnt", np.int64, "2,2", 0, "count", "samples, samples in the zero bucket"),
    Field("run", np.float64, "3", 0.0, "ms | count",
          "pending run of equal ITL gaps not yet merged: gap value, repeat count; then the "
          "pending count of zero gaps (MTP burst tokens)"),
    Field("bins", np.int64, f"2,{SKETCH_BINS}", 0, "count", "DDSketch positive-key counts"),
    Field("counters", np.int64, f"{NUM_COUNTERS}", 0, "tokens | count",
          "committed_prefill_tokens, passes, preemptions, rejections, admissions, spawned, "
          "log length, lazy conversions, broken invariant (debug), requests tokenizing, turns "
          "released, next session (kernels/codes.py CNT_*)"),
)
# fmt: on

# one field per line: the table is read as a table
# fmt: off
LOG_FIELDS = (
    Field("req", np.int32, "A", -1, "request index", "admitted request"),
    Field("at_ms", np.float64, "A", 0.0, "ms", "pass start of the admission"),
    Field("reused", np.int64, "A", 0, "tokens", "prefix-cache hit of the admission"),
    Field("readmit", np.bool_, "A", False, "flag", "admission after a preemption"),
    Field("pool", np.int8, "A", 0, "Role", "admitting side: aggregated, prefill or decode"),
)
# fmt: on


RequestState = _state_type(
    "RequestState", REQUEST_FIELDS, "Per-request state (one array per REQUEST_FIELDS entry)."
)


RankState = _state_type(
    "RankState", RANK_FIELDS, "Per-scheduler-rank state (one array per RANK_FIELDS entry)."
)


BlockState = _state_type(
    "BlockState",
    BLOCK_FIELDS,
    "KV blocks, the prefix-cache map and slot block tables (BLOCK_FIELDS).",
)


WorkerState = _state_type("WorkerState", WORKER_FIELDS, "Per-worker pass state (WORKER_FIELDS).")


StatsState = _state_type(
    "StatsState", STATS_FIELDS, "Streamed gap statistics and run counters (STATS_FIELDS)."
)


AdmissionLog = _state_type(
    "AdmissionLog", LOG_FIELDS, "Admission history of a captured run (LOG_FIELDS)."
)


# P/D disaggregation (docs/rules.md 9): the handoff between the prefill pool and the decode pool.
# Shape symbols: N requests, RD decode ranks, WD decode workers, WP prefill workers, Q action-queue
# capacity. Request links are shared by the lists a request can be on one at a time: `dlink` by
# its decode rank's pending-destination FIFO and its decode worker's deferred activations,
# `plink` by its prefill worker's deferred releases.
# one field per line: the table is read as a table
# fmt: off
PD_FIELDS = (
    Field("held_ms", np.float64, "N", np.nan, "ms", "source held: prompt done on the prefill side"),
    Field("reserved_ms", np.float64, "N", np.nan, "ms", "decode-side KV reserved, transfer start"),
    Field("xfer_end_ms", np.float64, "N", np.nan, "ms", "transfer completion"),
    Field("activated_ms", np.float64, "N", np.nan, "ms", "put into the decode waiting queue"),
    Field("released_ms", np.float64, "N", np.nan, "ms", "prefill-side KV freed"),
    Field("xfer_tokens", np.int64, "N", 0, "tokens", "tokens the transfer carries"),
    Field("dlink", np.int32, "N", -1, "request index", "next in a decode-side FIFO"),
    Field("plink", np.int32, "N", -1, "request index", "next in a prefill-side FIFO"),
    Field("pend_head", np.int32, "RD", -1, "request index", "pending destinations (FIFO) head"),
    Field("pend_tail", np.int32, "RD", -1, "request index", "pending destinations tail"),
    Field("trt_need", np.int64, "RD", 0, "blocks",
          "TRT-LLM: blocks reserved-but-not-running destinations still need to reach completion"),
    Field("dact_head", np.int32, "RD", -1, "request index", "deferred activations head (per rank)"),
    Field("dact_tail", np.int32, "RD", -1, "request index", "deferred activations tail"),
    Field("drel_head", np.int32, "WP", -1, "request index", "deferred releases head"),
    Field("drel_tail", np.int32, "WP", -1, "request index", "deferred releases tail"),
    Field("xfer_list", np.int32, "N", -1, "request index", "transfers in flight, start order"),
    Field("act_kind", np.int8, "Q", 0, "PDAction", "queued handoff actions (FIFO ring)"),
    Field("act_req", np.int32, "Q", -1, "request index", "request of each queued action"),
    Field("reserve_seq", np.int64, "N", -1, "count",
          "order of the decode-side reservation (deferred activations are applied in it)"),
    Field("cap_gen", np.int64, "RD", 0, "count",
          "vLLM: capacity generation of the decode rank (a retirement or preemption there)"),
    Field("run_mark", np.int32, "RD", 0, "count", "running requests when the decode pass ended"),
    Field("tried_gen", np.int64, "N", -1, "count",
          "vLLM: capacity generation of the pending destination's last failed reservation"),
    Field("scalars", np.int64, "6", 0, "count",
          "prefill round robin, decode round robin, transfers in flight, queue head, queue tail,"
          " reservations made"),
)
# fmt: on


PDState = _state_type("PDState", PD_FIELDS, "The P/D handoff between the two pools (PD_FIELDS).")


class TransferParams(NamedTuple):
    """KV transfer of the P/D handoff (engine.kv_transfer, docs/rules.md 9.4)."""

    bytes_per_token: float  # bytes of one token's KV on one source rank
    bandwidth_gb_s: float  # 0: no delay (bandwidth null)
    full_prompt: bool  # timing_mode full_prompt: P tokens; else missing whole blocks


def allocate_pd(
    n_requests: int, decode_ranks: int, decode_workers: int, prefill_workers: int
) -> PDState:
    dims = {
        "N": n_requests,
        "RD": decode_ranks,
        "WD": decode_workers,
        "WP": prefill_workers,
        "Q": 5 * n_requests + 16,
    }
    return _alloc(PDState, PD_FIELDS, dims)


MTP_SHAPE_COLUMNS = 6  # mtp_step.SHAPE_PREFILLS .. SHAPE_NEED


class MtpState(NamedTuple):
    """Native MTP of one run (docs/rules.md 8): acceptance walk and per-rank random streams.

    Its type switches MTP on in the compiled loop (kernels/mtp_step.py: mtp_on reads the class
    attribute `mtp_on`); `NoMtp` switches it off.
    """

    thresholds: np.ndarray  # uint64[nextn] Bernoulli threshold floor(rate x 2^64) per draft
    always: np.ndarray  # bool[nextn] rate == 1: accepted without consuming a draw
    rng: np.ndarray  # uint32[R, rng.STATE_WORDS] ChaCha12 stream of each scheduler rank
    # int64[R, MTP_SHAPE_COLUMNS] the pass's batch sums (prefill set, decode set, burst blocks;
    # columns kernels/mtp_step.SHAPE_*), added up while scheduling so pricing needs no sweep
    shape: np.ndarray
    mtp_on = True  # a class attribute, not a field (no annotation)


class NoMtp(MtpState):
    """The `mtp` argument of a run without MTP (empty arrays; a distinct compiled type)."""

    mtp_on = False


def allocate_mtp(nextn: int, accepted: float | None, n_ranks: int) -> MtpState:
    """MTP state for nextn > 0 (streams seeded 42 + rank, rank = worker x D + dp_rank), else
    the NoMtp placeholder."""
    from aisim.kernels import rng

    if nextn <= 0:
        return NoMtp(
            np.zeros(0, np.uint64),
            np.zeros(0, np.bool_),
            np.zeros((0, rng.STATE_WORDS), np.uint32),
            np.zeros((0, MTP_SHAPE_COLUMNS), np.int64),
        )
    rates = acceptance_rates(nextn, float(accepted or 0.0))
    thresholds = np.zeros(nextn, np.uint64)
    always = np.zeros(nextn, np.bool_)
    for i, rate in enumerate(rates):
        thresholds[i], always[i] = rng.bernoulli_threshold(rate)
    streams = np.zeros((n_ranks, rng.STATE_WORDS), np.uint32)
    for r in range(n_ranks):
        streams[r] = rng.new_stream(42 + r)
    return MtpState(thresholds, always, streams, np.zeros((n_ranks, MTP_SHAPE_COLUMNS), np.int64))


def acceptance_rates(nextn: int, accepted: float) -> list[float]:
    """Conditional acceptance rate of each draft position: floor(x) ones, the fraction, zeros
    (1.5 with nextn 2 -> [1, 0.5]; 1.7 with nextn 3 -> [1, 0.7, 0])."""
    whole = int(accepted)
    rates = [1.0] * whole
    if whole < nextn:
        rates.append(accepted - whole)
    return (rates + [0.0] * nextn)[:nextn]


def _alloc(
    cls: type,
    fields: tuple[Field, ...],
    dims: dict[str, int],
    given: dict[str, np.ndarray] | None = None,
):
    """Allocate every field, except those `given` (read-only inputs the caller already holds
    with the declared dtype and shape: no second copy per request)."""
    arrays = []
    for f in fields:
        shape = tuple(_eval_dim(part, dims) for part in f.shape.split(","))
        if given and f.name in given:
            a = given[f.name]
            if a.dtype != f.dtype or a.shape != shape or not a.flags.c_contiguous:
                raise ValueError(
                    f"{cls.__name__}.{f.name}: expected C-contiguous {f.dtype}"
                    f"{shape}, got {a.dtype}{a.shape}"
                )
            arrays.append(a)
        elif f.fill == 0:
            arrays.append(np.zeros(shape, dtype=f.dtype))  # pages a run never touches stay free
        else:
            arrays.append(np.full(shape, f.fill, dtype=f.dtype))
    return cls(*arrays)


def _eval_dim(expr: str, dims: dict[str, int]) -> int:
    value = 1
    for factor in expr.split("*"):
        value *= dims[factor] if factor in dims else int(factor)
    return value


def shape_dims(
    n_requests: int,
    n_ranks: int,
    n_workers: int,
    max_running: int,
    blocks_per_rank: int,
    row_blocks: int,
    log_capacity: int,
    block_size: int,
    records: bool = False,
    tokenizer_threads: int = 0,
    sessions: bool = False,
) -> dict[str, int]:
    """The value of every shape symbol (module doc) for a run of these dimensions: what
    `allocate` allocates, and what the memory check before it counts."""
    return {
        "N": n_requests,
        "C": n_requests if records else 1,
        "T": n_requests if tokenizer_threads else 1,
        "Q": n_requests if sessions else 1,
        "X": max(1, tokenizer_threads),
        "R": n_ranks,
        "W": n_workers,
        "S": max_running,
        "B": blocks_per_rank,
        "K": row_blocks,
        "M": 1 << max(4, int(2 * n_ranks * blocks_per_rank).bit_length()),
        "A": log_capacity,
        # the calendar ring spans the longest gap between a lazy decoder's events (one block)
        "H": 1 << max(6, int(2 * block_size).bit_length()),
    }


def allocate(
    n_requests: int,
    n_ranks: int,
    n_workers: int,
    max_running: int,
    blocks_per_rank: int,
    row_blocks: int,
    log_capacity: int,
    block_size: int,
    requests: dict[str, np.ndarray] | None = None,
    records: bool = False,
    tokenizer_threads: int = 0,
    sessions: bool = False,
):
    """Allocate every buffer for one run and put the KV pools in their initial state.
    `requests` names RequestState fields taken as they are (the traffic's own arrays);
    `records` sizes the latency-attribution fields (shape C) for per-request records;
    `tokenizer_threads` per worker (0: no tokenizer) sizes the tokenizer fields (T, X);
    `sessions` the multi-turn fields (Q)."""
    dims = shape_dims(
        n_requests,
        n_ranks,
        n_workers,
        max_running,
        blocks_per_rank,
        row_blocks,
        log_capacity,
        block_size,
        records,
        tokenizer_threads,
        sessions,
    )
    req = _alloc(RequestState, REQUEST_FIELDS, dims, requests)
    ranks = _alloc(RankState, RANK_FIELDS, dims)
    blocks = _alloc(BlockState, BLOCK_FIELDS, dims)
    workers = _alloc(WorkerState, WORKER_FIELDS, dims)
    stats = _alloc(StatsState, STATS_FIELDS, dims)
    log = _alloc(AdmissionLog, LOG_FIELDS, dims)
    # Every block starts on its rank's clean stack, popped lowest id first.
    for r in range(n_ranks):
        base = r * blocks_per_rank
        blocks.clean_stack[base : base + blocks_per_rank] = np.arange(
            base + blocks_per_rank - 1, base - 1, -1, dtype=np.int32
        )
        sbase = r * max_running
        blocks.slot_stack[sbase : sbase + max_running] = np.arange(
            sbase + max_running - 1, sbase - 1, -1, dtype=np.int32
        )
    ranks.clean_top[:] = blocks_per_rank
    ranks.slot_top[:] = max_running
    stats.acc[:, 3] = np.inf
    stats.acc[:, 4] = -np.inf
    return req, ranks, blocks, workers, stats, log


class PrefixKeys(NamedTuple):
    """Content hashes of shareable leading KV blocks (read by kernels/kv_blocks.block_key)."""

    hashes: np.ndarray  # uint64[*] per request slice (Traffic.pfx_start): prefix content hashes
    block_src: np.ndarray  # int64[K] slice entry holding everything up to engine block j


def prefix_keys(
    pfx_hash: np.ndarray, src_tokens: int, block_size: int, row_blocks: int
) -> PrefixKeys:
    """One slice entry per engine block (src_tokens 0), or per src_tokens-token source block:
    engine block j then ends inside source block ((j + 1) x block_size - 1) // src_tokens."""
    j = np.arange(max(1, row_blocks), dtype=np.int64)
    src = j if src_tokens == 0 else ((j + 1) * block_size - 1) // src_tokens
    return PrefixKeys(np.ascontiguousarray(pfx_hash, dtype=np.uint64), src)


class TimingMemo(NamedTuple):
    """Op-level phase prices: a direct-mapped cache plus the run's energy accumulators.

    Every priced evaluation (cache hit or miss) adds its per-op rows to the accumulators, in
    pass order (aisim.timing.energy module doc: the accumulation contract).
    """

    keys: np.ndarray  # int64[M, 4] (phase 0 prefill / 1 decode, batch, isl or ctx, prefix); -1
    vals: np.ndarray  # float64[M] ms, phase total
    row_ms: np.ndarray  # float64[M, ops] per-op latency of the cached evaluation, ms
    row_energy: np.ndarray  # float64[M, ops] per-op energy, W*ms (0 = no evidence)
    row_covered: np.ndarray  # float64[M, ops] per-op latency with energy evidence, ms
    acc_ms: np.ndarray  # float64[ops] run sums over every evaluation, ms
    acc_energy: np.ndarray  # float64[ops] W*ms
    acc_covered: np.ndarray  # float64[ops] ms
    evals: np.ndarray  # int64[2] prefill / decode evaluations recorded


def allocate_memo(num_ops: int, slots: int = 1 << 12) -> TimingMemo:
    n = max(1, num_ops)
    return TimingMemo(
        np.full((slots, 4), -1, np.int64),
        np.zeros(slots),
        np.zeros((slots, n)),
        np.zeros((slots, n)),
        np.zeros((slots, n)),
        np.zeros(n),
        np.zeros(n),
        np.zeros(n),
        np.zeros(2, np.int64),
    )


def placeholder_plan():
    """An OpPlan-typed value for runs without op-level timing (one kernel specialization)."""
    from aisim.timing.plan_record import placeholder_plan as placeholder

    return placeholder()


# One row per rank per scheduler pass, written only when KernelParams.capture_passes is set
# (--capture-passes). Shape symbol P: row capacity; count[0] keeps counting past it so the
# caller can rerun once with exactly enough rows (the kernel never writes out of bounds).
# one field per line: the table is read as a table
# fmt: off
PASS_FIELDS = (
    Field("start_ms", np.float64, "P", 0.0, "ms", "pass start"),
    Field("end_ms", np.float64, "P", 0.0, "ms",
          "pass end (the worker's ranks run in lock-step: the slowest rank's duration)"),
    Field("rank", np.int32, "P", -1, "index", "scheduler rank = worker x D + dp_rank"),
    Field("worker", np.int32, "P", -1, "index", "worker (replica)"),
    Field("role", np.int8, "P", -1, "code", "kernels.codes.Role of the pool that ran the pass"),
    Field("num_prefill", np.int32, "P", 0, "count", "requests in the prefill set"),
    Field("num_decode", np.int32, "P", 0, "count", "requests in the decode set"),
    Field("tokens_scheduled", np.int64, "P", 0, "tokens", "tokens scheduled in the pass"),
    Field("prefill_tokens", np.int64, "P", 0, "tokens",
          "tokens scheduled for prefill-set requests (recomputation after preemption included)"),
    Field("sum_decode_context", np.int64, "P", 0, "tokens",
          "sum over the decode set of its context length L"),
    Field("kv_blocks_used", np.int64, "P", 0, "blocks", "blocks referenced by live requests"),
    Field("kv_blocks_cached", np.int64, "P", 0, "blocks",
          "free blocks still holding cached prefix content (evictable)"),
    Field("waiting", np.int32, "P", 0, "count", "waiting requests after scheduling"),
    Field("running", np.int32, "P", 0, "count", "running requests after scheduling"),
    Field("preemptions", np.int32, "P", 0, "count", "requests preempted in the pass"),
    Field("count", np.int64, "1", 0, "rows", "rows needed so far (may exceed capacity)"),
)
# fmt: on


PassLog = _state_type("PassLog", PASS_FIELDS, "Captured passes (PASS_FIELDS).")


def allocate_passlog(capacity: int) -> PassLog:
    """Pass-capture buffer of `capacity` rows (1 when capture is off: the kernels never write)."""
    return _alloc(PassLog, PASS_FIELDS, {"P": max(1, capacity)})
