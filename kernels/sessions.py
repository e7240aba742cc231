"""Multi-turn sessions: each turn arrives when its predecessor ends (docs/rules.md 10.5).

A session's turns are consecutive requests (`req.turn` counts from 0). Turn k + 1 arrives at
turn k's terminal time (completion or rejection) plus its think time `req.turn_delay_ms`; under
a concurrency load the count is of sessions, and a session's last terminal turn starts the next
session at once. Turns whose arrival is known wait in a min-heap over (arrival_ms, request
index) in `req.release_heap[:counters[CNT_RELEASING]]` (kernels/minheap.py); index order is
session order, then turn order, which is how AISimulate orders turns ready at one instant.

`start`, `on_terminal` and `pop` run once a run or once a request: out of line, so the event
loops and the many call sites of a terminal state do not each compile a copy.
"""

import numpy as np

from aisim.kernels import minheap
from aisim.kernels._jit import helper, kernel
from aisim.kernels.codes import CNT_NEXT_SESSION, CNT_RELEASING, LoadKind


@helper
def _release(req, stats, i):
    minheap.push(req.arrival_ms, req.release_heap, stats.counters[CNT_RELEASING], i)
    stats.counters[CNT_RELEASING] += 1


@helper
def _next_session(req, i):
    """First request of the session after the one request i belongs to (n: none)."""
    n = req.prompt_len.shape[0]
    i += 1
    while i < n and req.turn[i] != 0:
        i += 1
    return i


@helper
def has_next_turn(req, i):
    """Does request i's session go on after it?"""
    return i + 1 < req.turn.shape[0] and req.turn[i + 1] != 0


@kernel
def start(p, req, stats):
    """Release every session's first turn (open loop: at its own arrival time), or the first
    `concurrency` sessions at 0 (closed loop)."""
    n = req.prompt_len.shape[0]
    if p.load_kind == LoadKind.CONCURRENCY:
        i = 0
        for _ in range(p.concurrency):
            if i >= n:
                break
            req.arrival_ms[i] = 0.0
            _release(req, stats, i)
            i = _next_session(req, i)
        stats.counters[CNT_NEXT_SESSION] = i
    else:
        for i in range(n):
            if req.turn[i] == 0:
                _release(req, stats, i)


@kernel
def on_terminal(p, req, stats, i, t_ms):
    """Request i reached a terminal state at t_ms: its session's next turn arrives after its
    think time, or (closed loop) the next session starts now."""
    if has_next_turn(req, i):
        req.arrival_ms[i + 1] = t_ms + req.turn_delay_ms[i + 1]
        _release(req, stats, i + 1)
    elif p.load_kind == LoadKind.CONCURRENCY:
        k = stats.counters[CNT_NEXT_SESSION]
        if k < req.prompt_len.shape[0]:
            req.arrival_ms[k] = t_ms
            _release(req, stats, k)
            stats.counters[CNT_NEXT_SESSION] = _next_session(req, k)


@helper
def next_arrival(req, stats):
    """Arrival time of the next released turn (inf: none waiting)."""
    if stats.counters[CNT_RELEASING] == 0:
        return np.inf
    return req.arrival_ms[req.release_heap[0]]


@kernel
def pop(req, stats):
    """Take the next turn to arrive."""
    n = stats.counters[CNT_RELEASING]
    stats.counters[CNT_RELEASING] = n - 1
    return minheap.pop(req.arrival_ms, req.release_heap, n)
