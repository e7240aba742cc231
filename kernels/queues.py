"""Request queues and lifecycle on one rank: the waiting queue (FCFS, preempted requests at the
front), KV release, rejection (reported at the end of the pass that tried the admission) and the
closed-loop spawn of a replacement (or a session's next turn) when a request reaches a terminal
state."""

from aisim.kernels import kv_blocks as kv
from aisim.kernels import sessions
from aisim.kernels._jit import helper, kernel
from aisim.kernels.codes import (
    CNT_REJECTIONS,
    CNT_SPAWNED,
    LoadKind,
    ReqStatus,
)


@helper
def spawn_next(p, req, stats, i, t_ms):
    """Request i reached a terminal state at t_ms: its session's next turn is released
    (kernels/sessions.py), or, closed loop, the next request arrives now."""
    if p.sessions:
        sessions.on_terminal(p, req, stats, i, t_ms)
    elif p.load_kind == LoadKind.CONCURRENCY:
        k = stats.counters[CNT_SPAWNED]
        if k < req.prompt_len.shape[0]:
            req.arrival_ms[k] = t_ms
            stats.counters[CNT_SPAWNED] = k + 1


@helper
def push_waiting_back(req, ranks, r, i):
    req.wait_next[i] = -1
    t = ranks.wait_tail[r]
    if t >= 0:
        req.wait_next[t] = i
    else:
        ranks.wait_head[r] = i
    ranks.wait_tail[r] = i
    ranks.wait_len[r] += 1


@helper
def push_waiting_front(req, ranks, r, i):
    h = ranks.wait_head[r]
    req.wait_next[i] = h
    ranks.wait_head[r] = i
    if h < 0:
        ranks.wait_tail[r] = i
    ranks.wait_len[r] += 1


@helper
def insert_waiting_after(req, ranks, r, i, k):
    """Queue request i behind the first k waiting requests (at the front for k = 0)."""
    if k == 0:
        push_waiting_front(req, ranks, r, i)
        return
    prev = ranks.wait_head[r]
    for _ in range(k - 1):
        prev = req.wait_next[prev]
    req.wait_next[i] = req.wait_next[prev]
    req.wait_next[prev] = i
    if req.wait_next[i] < 0:
        ranks.wait_tail[r] = i
    ranks.wait_len[r] += 1


@helper
def pop_waiting(req, ranks, r):
    i = ranks.wait_head[r]
    n = req.wait_next[i]
    ranks.wait_head[r] = n
    if n < 0:
        ranks.wait_tail[r] = -1
    req.wait_next[i] = -1
    ranks.wait_len[r] -= 1
    return i


@helper
def free_request_kv(p, req, ranks, blocks, r, i):
    s = req.slot[i]
    kv.release_slot(ranks, blocks, r, s, p.num_blocks)
    top = ranks.slot_top[r]
    # rows per rank = run_list width (P/D sides hold more rows than max_seqs: held KV)
    blocks.slot_stack[r * ranks.run_list.shape[1] + top] = s
    ranks.slot_top[r] = top + 1
    req.slot[i] = -1


@kernel
def reject(p, req, ranks, stats, r, i, t_ms):
    """Reject request i at its admission attempt. It is reported (and, closed loop, replaced)
    when the pass that tried to admit it ends (see settle_rejections, spawn_rejected)."""
    req.status[i] = ReqStatus.REJECTED
    req.terminal_ms[i] = t_ms
    stats.counters[CNT_REJECTIONS] += 1
    req.rej_next[i] = ranks.rej_head[r]
    ranks.rej_head[r] = i


@helper
def settle_rejections(p, req, ranks, stats, r, end_ms):
    """At the start of rank r's pass: its rejections are reported at the pass end, in the order
    they were made (the list, newest first until now, is turned around for `spawn_rejected`)."""
    i = ranks.rej_head[r]
    if i < 0:
        return
    prev = -1
    while i >= 0:
        req.terminal_ms[i] = end_ms
        nxt = req.rej_next[i]
        req.rej_next[i] = prev
        prev = i
        i = nxt
    ranks.rej_head[r] = prev


@helper
def spawn_rejected(p, req, ranks, stats, r, t_ms):
    """At the end of rank r's pass: closed loop, each request it rejected brings in its
    replacement now, in rejection order. Spawning at the pass end, not when the pass starts,
    keeps replacements in the order of the instants they are made at, whatever the other
    workers do meanwhile (a zero-duration pass elsewhere can end first)."""
    i = ranks.rej_head[r]
    while i >= 0:
        spawn_next(p, req, stats, i, t_ms)
        nxt = req.rej_next[i]
        req.rej_next[i] = -1
        i = nxt
    ranks.rej_head[r] = -1
