"""The tokenizer ahead of admission (docs/rules.md 2.3).

Each engine worker has `tok_threads` tokenizer threads. A request routed to the worker at its
arrival is tokenized first come, first served by the thread that frees first, in
base + per-token x prompt ms, and joins its rank's waiting queue when done. Requests finishing
at the same instant join in request order, so the set in flight is a min-heap over
(tokenized_ms, request index) in `req.tok_heap[:counters[CNT_TOKENIZING]]` (kernels/minheap.py).

A thread's start is known at the arrival (the threads serve in arrival order), so each request's
completion is fixed when it enters: the event loop only has to release the heap's top on time.
"""

import numpy as np

from aisim.kernels import minheap, queues
from aisim.kernels._jit import helper
from aisim.kernels.codes import CNT_TOKENIZING


@helper
def enter(p, req, workers, stats, w, i):
    """Request i, routed to worker w at its arrival, enters w's tokenizer."""
    free = workers.tok_free
    k = 0
    for j in range(1, free.shape[1]):
        if free[w, j] < free[w, k]:
            k = j
    start = max(req.arrival_ms[i], free[w, k])
    done = start + (p.tok_base_ms + float(req.prompt_len[i]) * p.tok_per_token_ms)
    free[w, k] = done
    req.tokenized_ms[i] = done
    minheap.push(req.tokenized_ms, req.tok_heap, stats.counters[CNT_TOKENIZING], i)
    stats.counters[CNT_TOKENIZING] += 1


@helper
def next_ready(req, stats):
    """Completion time of the next request to leave the tokenizer (inf: none inside)."""
    if stats.counters[CNT_TOKENIZING] == 0:
        return np.inf
    return req.tokenized_ms[req.tok_heap[0]]


@helper
def pop(req, stats):
    """Take the next request out of the tokenizer."""
    n = stats.counters[CNT_TOKENIZING]
    stats.counters[CNT_TOKENIZING] = n - 1
    return minheap.pop(req.tokenized_ms, req.tok_heap, n)


@helper
def release_done(req, ranks, stats, t):
    """Requests whose tokenization ends by t join their rank's waiting queue, in heap order.
    Returns whether any did."""
    moved = False
    while next_ready(req, stats) <= t:
        q = pop(req, stats)
        queues.push_waiting_back(req, ranks, req.rank[q], q)
        moved = True
    return moved
