"""A min-heap of request indices ordered by (time, index), stored in a request-indexed array.

The tokenizer (requests leaving it) and multi-turn sessions (turns waiting to arrive) each keep
one: `keys` is the request time the heap orders by, `heap[:n]` the indices, `n` its length,
held by the caller. Equal times leave in request order, which is the order AISimulate gives
events of one instant (docs/rules.md 2.3, 10.5).
"""

from aisim.kernels._jit import helper


@helper
def _before(keys, a, b):
    """Heap order: a leaves before b."""
    ka = keys[a]
    kb = keys[b]
    return ka < kb or (ka == kb and a < b)


@helper
def push(keys, heap, n, i):
    """Add request i to heap[:n] (the caller counts it: the length becomes n + 1)."""
    while n > 0:
        parent = (n - 1) >> 1
        if not _before(keys, i, heap[parent]):
            break
        heap[n] = heap[parent]
        n = parent
    heap[n] = i


@helper
def pop(keys, heap, n):
    """Remove and return the top of heap[:n] (n > 0; the length becomes n - 1)."""
    top = heap[0]
    n -= 1
    if n > 0:
        last = heap[n]
        k = 0
        while True:
            c = 2 * k + 1
            if c >= n:
                break
            if c + 1 < n and _before(keys, heap[c + 1], heap[c]):
                c += 1
            if not _before(keys, heap[c], last):
                break
            heap[k] = heap[c]
            k = c
        heap[k] = last
    return top
