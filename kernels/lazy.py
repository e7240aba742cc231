"""Lazy decoders: the pass-compressed fast path (docs/rules.md 1.5).

A running request that is plainly decoding does the same thing in every pass of its rank: it is
scheduled for one token, adds its L to the decode context, emits one token at the pass end (with
the same gap as every other such request) and needs KV only when it crosses a block boundary.
Such a request is made *lazy*: its counts stay frozen at a base pass and advance implicitly, its
contribution to the pass price is kept as a rank-level sum, and the only passes in which it is
touched are the ones where something happens to it (a block boundary, a block becoming full and
cacheable, or completion), found through a per-rank event calendar (a ring of pass buckets).

A pass may use this shortcut only when the exact vLLM pass would schedule every running
request in full without preemption: the token budget covers every want and the free blocks cover
every allocation. Otherwise the rank is *flushed* (every lazy request made exact again) and the
pass runs the exact per-request algorithm; so results are identical by construction, which the
kernel-vs-reference tests check.

Counts of a lazy request q at rank pass x (its base is b = lazy_base, g0 = gen_base):
  scheduled in pass x with computed_before = P + g0 - 1 + (x - b - 1) and L = P + g0 + (x - b - 1);
  after the end of pass x it has generated g0 + (x - b) tokens.
"""

from aisim.kernels._jit import helper, kernel

COOLDOWN_PASSES = 8  # after a flush, decoders stay exact for a while (KV pressure thrashes)


@helper
def cal_insert(req, ranks, r, q, x):
    mask = ranks.cal_head.shape[1] - 1
    bucket = x & mask
    head = ranks.cal_head[r, bucket]
    req.ev_prev[q] = -1
    req.ev_next[q] = head
    if head >= 0:
        req.ev_prev[head] = q
    ranks.cal_head[r, bucket] = q
    req.ev_pass[q] = x


@helper
def cal_remove(req, ranks, r, q):
    mask = ranks.cal_head.shape[1] - 1
    prv = req.ev_prev[q]
    nxt = req.ev_next[q]
    if prv >= 0:
        req.ev_next[prv] = nxt
    else:
        ranks.cal_head[r, req.ev_pass[q] & mask] = nxt
    if nxt >= 0:
        req.ev_prev[nxt] = prv
    req.ev_prev[q] = -1
    req.ev_next[q] = -1
    req.ev_pass[q] = -1


@helper
def next_event(p, req, blocks, q):
    """First rank pass after the base at which q allocates, fills a block, or completes."""
    b = req.lazy_base[q]
    c0 = req.prompt_len[q] + req.gen_base[q] - 1
    slot = req.slot[q]
    bs = p.block_size
    x = b + req.output_len[q] - req.gen_base[q]
    x_alloc = b + 1 + blocks.slot_nblk[slot] * bs - c0
    if x_alloc < x:
        x = x_alloc
    if p.prefix_caching:
        x_fill = b + (blocks.slot_nhashed[slot] + 1) * bs - c0
        if x_fill < x:
            x = x_fill
    return x


@kernel
def make_lazy(p, req, ranks, blocks, r, q, x):
    """At the end of rank pass x, freeze q's counts and schedule its next event."""
    g = req.num_generated[q]
    req.lazy[q] = True
    req.lazy_base[q] = x
    req.gen_base[q] = g
    ranks.lazy_count[r] += 1
    ranks.lazy_sum[r] += req.prompt_len[q] + g - x - 1
    cal_insert(req, ranks, r, q, next_event(p, req, blocks, q))


@helper
def materialize(req, ranks, r, q, passes_done, last_ms):
    """Make q exact again after `passes_done` implicit passes since its base."""
    g0 = req.gen_base[q]
    b = req.lazy_base[q]
    g = g0 + passes_done
    req.num_generated[q] = g
    req.num_computed[q] = req.prompt_len[q] + g - 1
    req.last_token_ms[q] = last_ms
    req.lazy[q] = False
    ranks.lazy_count[r] -= 1
    ranks.lazy_sum[r] -= req.prompt_len[q] + g0 - b - 1


@kernel
def flush(req, ranks, r, x):
    """Before rank pass x: every lazy request exact again; act_list = the whole running list."""
    last_ms = ranks.last_end_ms[r]
    for k in range(ranks.due_len[r]):
        q = ranks.due_list[r, k]
        materialize(req, ranks, r, q, x - 1 - req.lazy_base[q], last_ms)
    ranks.due_len[r] = 0
    n = ranks.run_len[r]
    for k in range(n):
        q = ranks.run_list[r, k]
        if req.lazy[q]:
            cal_remove(req, ranks, r, q)
            materialize(req, ranks, r, q, x - 1 - req.lazy_base[q], last_ms)
        ranks.act_list[r, k] = q
    ranks.act_len[r] = n


@helper
def pop_due(req, ranks, r, x):
    """Move the lazy requests with an event at pass x to due_list, sorted by running order."""
    mask = ranks.cal_head.shape[1] - 1
    q = ranks.cal_head[r, x & mask]
    n = 0
    while q >= 0:
        nxt = req.ev_next[q]
        if req.ev_pass[q] == x:
            cal_remove(req, ranks, r, q)
            # insertion sort by running order (seq); due lists are short
            k = n
            while k > 0 and req.seq[ranks.due_list[r, k - 1]] > req.seq[q]:
                ranks.due_list[r, k] = ranks.due_list[r, k - 1]
                k -= 1
            ranks.due_list[r, k] = q
            n += 1
        q = nxt
    ranks.due_len[r] = n


@helper
def fits_in_full(p, req, ranks, blocks, r, x, budget, defer):
    """Would the exact pass schedule every running request in full, with no preemption?"""
    bs = p.block_size
    want = ranks.lazy_count[r]
    need = 0
    for k in range(ranks.due_len[r]):
        q = ranks.due_list[r, k]
        c = req.prompt_len[q] + req.gen_base[q] - 1 + (x - req.lazy_base[q] - 1)
        if c + 1 > blocks.slot_nblk[req.slot[q]] * bs:
            need += 1
    for k in range(ranks.act_len[r]):
        q = ranks.act_list[r, k]
        c = req.num_computed[q]
        prompt = req.prompt_len[q]
        if defer and c < prompt:
            continue
        n = prompt + req.num_generated[q] - c
        want += n
        held = blocks.slot_nblk[req.slot[q]]
        if c + n > held * bs:
            need += (c + n + bs - 1) // bs - held
    return want <= budget and need <= ranks.clean_top[r] + ranks.lru_len[r], want


@helper
def due_position(req, ranks, r, x, q):
    """computed_before of lazy q in pass x."""
    return req.prompt_len[q] + req.gen_base[q] - 1 + (x - req.lazy_base[q] - 1)
