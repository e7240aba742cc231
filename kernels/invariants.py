"""Per-pass invariant checks of a rank's state, run inside the event loop in debug mode.

Tests run every random case with `KernelParams.check_invariants` on, so the kernel's own state is
checked after every pass it schedules and every pass end (the plain-Python reference checks its
own state independently). Returns 0 when everything holds, else the number of the broken rule.
"""

from aisim.kernels._jit import kernel

OK = 0
BLOCKS_NOT_CONSERVED = 1  # free + referenced != pool size
REF_COUNT_DRIFT = 2  # a block's ref count differs from the requests holding it
BLOCK_TWICE_IN_ROW = 3  # one request holds the same block twice
LRU_BROKEN = 4  # LRU list length, links or members wrong
MAP_BROKEN = 5  # a map entry points to a block that does not carry its key
TOO_MANY_RUNNING = 6  # running > max_sequences
BUDGET_EXCEEDED = 7  # scheduled tokens > max_batched_tokens
TOKENS_BEYOND_KNOWN = 8  # a request computed more tokens than it knows
BLOCKS_SHORT = 9  # an exact running request holds fewer blocks than its computed tokens need
LAZY_COUNT_DRIFT = 10  # lazy_count differs from the lazy requests in the running list


@kernel
def check_rank(p, req, ranks, blocks, r, scheduled_tokens):
    nb = p.num_blocks
    bs = p.block_size
    base = r * nb
    if ranks.run_len[r] > p.max_seqs:
        return TOO_MANY_RUNNING
    if scheduled_tokens > p.max_tokens:
        return BUDGET_EXCEEDED
    count = blocks.scratch
    for b in range(base, base + nb):
        count[b] = 0
    n_lazy = 0
    for k in range(ranks.run_len[r]):
        q = ranks.run_list[r, k]
        s = req.slot[q]
        n = blocks.slot_nblk[s]
        for j in range(n):
            b = blocks.slot_blocks[s, j]
            for jj in range(j):
                if blocks.slot_blocks[s, jj] == b:
                    return BLOCK_TWICE_IN_ROW
            count[b] += 1
        if req.lazy[q]:
            n_lazy += 1
        else:
            known = req.prompt_len[q] + req.num_generated[q]
            if req.num_computed[q] > known:
                return TOKENS_BEYOND_KNOWN
            if n * bs < req.num_computed[q]:
                return BLOCKS_SHORT
    if n_lazy != ranks.lazy_count[r]:
        return LAZY_COUNT_DRIFT
    referenced = 0
    for b in range(base, base + nb):
        if blocks.ref[b] != count[b]:
            return REF_COUNT_DRIFT
        if blocks.ref[b] > 0:
            referenced += 1
    if referenced != ranks.num_referenced[r]:
        return REF_COUNT_DRIFT
    if referenced + ranks.clean_top[r] + ranks.lru_len[r] != nb:
        return BLOCKS_NOT_CONSERVED
    n = 0
    live = 0
    b = ranks.lru_head[r]
    prev = -1
    while b >= 0:
        if blocks.ref[b] != 0 or blocks.hash[b] == 0 or blocks.lru_prev[b] != prev:
            return LRU_BROKEN
        if blocks.in_map[b]:
            live += 1
        n += 1
        if n > nb:
            return LRU_BROKEN
        prev = b
        b = blocks.lru_next[b]
    if n != ranks.lru_len[r] or prev != ranks.lru_tail[r] or live != ranks.lru_live[r]:
        return LRU_BROKEN
    keys = blocks.map_keys
    for m in range(keys.shape[0]):
        if keys[m] != 0:
            b = blocks.map_vals[m]
            if b >= base and b < base + nb:
                n_copies = 0
                while b >= 0:
                    if blocks.hash[b] != keys[m] or not blocks.in_map[b]:
                        return MAP_BROKEN
                    n_copies += 1
                    if n_copies > nb:
                        return MAP_BROKEN
                    b = blocks.dup_next[b]
    return OK
