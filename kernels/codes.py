"""Integer codes shared by the kernels and the Python side (one definition each)."""

from enum import IntEnum


class ReqStatus(IntEnum):
    """Lifecycle of one request; everything >= FINISHED is terminal."""

    NOT_ARRIVED = 0
    WAITING = 1  # in a rank's waiting queue (fresh or preempted)
    RUNNING = 2
    FINISHED = 3  # completed: reached its output length or max_model_len
    REJECTED = 4  # prompt too long for max_model_len or the KV pool
    FAILED = 5  # P/D: the decode pool could never hold the transferred prompt


class Backend(IntEnum):
    VLLM = 0
    TRTLLM = 1


class Role(IntEnum):
    """What a rank's pass does (docs/rules.md 9.1): aggregated, or one side of P/D."""

    AGGREGATED = 0
    PREFILL = 1  # prompt only: completed prompts keep their KV until the transfer releases it
    DECODE = 2  # activated prompts arrive materialised; no prefill time is charged


class PDAction(IntEnum):
    """Handoff commands of the P/D loop, executed FIFO at one instant (docs/rules.md 9.2)."""

    SUBMIT = 0  # a new request goes to a prefill rank
    RESERVE = 1  # a source-held request is routed to a decode rank's pending destinations
    START_TRANSFER = 2  # decode KV reserved: the transfer starts now
    ACTIVATE = 3  # transfer done: the decode rank takes the request (deferred while busy)
    RELEASE = 4  # activated: the prefill rank frees the request's KV (deferred while busy)


# P/D loop scalars (PDState.scalars)
PD_RR_PREFILL = 0
PD_RR_DECODE = 1
PD_XFERS = 2
PD_Q_HEAD = 3
PD_Q_TAIL = 4
PD_RESERVATIONS = 5


class TimingKind(IntEnum):
    FIXED = 0
    POLYNOMIAL = 1
    OP_LEVEL = 2  # priced from the op-time table (aisim.timing plan + kernels.optime_pass)


class LoadKind(IntEnum):
    CONCURRENCY = 0  # closed loop: a terminal request spawns the next one at that instant
    OPEN = 1  # arrival times known in advance (poisson, constant rate)


class RunResult(IntEnum):
    """What the event loop returns; anything but OK is turned into an error by the caller."""

    OK = 0
    STALLED = 1  # a worker can make no progress (effect-free zero-duration pass)
    TRT_PREEMPTION = 2  # TRT-LLM reservation failed to cover an allocation (internal error)
    LOG_FULL = 3  # the admission log needs a larger capacity; the caller reruns
    INVARIANT = 5  # debug mode: a state invariant broke (detail = rank * 100 + rule)


# Streamed-statistics float columns: sum, Welford mean, Welford M2, min, max.
ACC_SUM = 0
ACC_MEAN = 1
ACC_M2 = 2
ACC_MIN = 3
ACC_MAX = 4
# Streamed-statistics count columns: samples, samples in the zero bucket.
CNT_N = 0
CNT_ZERO = 1

# StatsState.counters columns
CNT_COMMITTED = 0
CNT_PASSES = 1
CNT_PREEMPTIONS = 2
CNT_REJECTIONS = 3
CNT_ADMISSIONS = 4
CNT_SPAWNED = 5
CNT_LOG = 6
CNT_LAZY = 7  # decoders turned lazy (pass compression engaged)
CNT_BROKEN = 8  # debug: rank * 100 + broken invariant rule (0 = none)
CNT_TOKENIZING = 9  # requests in the tokenizers (kernels/tokenizer.py: heap length)
CNT_RELEASING = 10  # session turns released, not arrived yet (kernels/sessions.py: heap length)
CNT_NEXT_SESSION = 11  # closed-loop sessions: first request of the next session to start
NUM_COUNTERS = 12

# DDSketch key range per sign (AISimulate keeps up to 32768 bins).
SKETCH_OFFSET = 16384
SKETCH_BINS = 32768


# schedule_rank status flags (a pass's outcome, or-ed over its phases)
SCHED_PROGRESS = 1  # the pass scheduled, admitted, rejected or preempted something
SCHED_TRT_PREEMPT = 2  # TRT-LLM would have to preempt: its reservation was wrong (a defect)
SCHED_LOG_FULL = 4  # the admission log is full: the run is repeated with more room
SCHED_ADMIT_PREEMPT = 8  # an admission preempted running requests (vLLM MTP, docs/rules.md 8.4)

# pool_pass.start_pass outcome flags (or-ed with the schedule_rank flags above)
PASS_STALLED = 1 << 8  # the pass could do nothing (no time, no progress)
PASS_STARTED = 1 << 9  # a pass started
