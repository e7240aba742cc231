"""Native MTP speculative decoding inside a rank's pass (docs/rules.md 8.2-8.5).

Whether MTP is on is a property of the *type* of the `mtp` argument the event loop receives:
`MtpState` switches it on, `NoMtp` (same fields, empty arrays) off. `mtp_on(mtp)` is a
compile-time constant in each specialization, so a run without MTP executes none of the code
guarded by it (LLVM removes the dead branches) and pays nothing per request for the feature.

A drafting decoder of length L is scheduled for its one known token (so it still has
computed = L - 1 between passes) but is charged s = min(1 + nextn, budget left,
max_model_len - L) verification slots (vLLM). On TRT-LLM a request whose prompt completes
drafts in that same pass: it joins the decode set at L = P (priced, and walking all rates)
without a budget charge [observed].

After scheduling, the rank reserves the KV every request emitting at the pass end may fill
(the decode set, plus a request completing its first prompt computation), preempting the last
running request while the pool is short. At the pass end each decode-set member walks the
first s - 1 acceptance rates on its rank's ChaCha12 stream and emits 1 + accepted tokens,
clipped to the remaining output; it keeps only the reserved blocks its tokens fill.
"""

import numpy as np
from numba import types
from numba.extending import overload

from aisim.kernels import kv_blocks as kv
from aisim.kernels import rng
from aisim.kernels._jit import helper
from aisim.kernels.units import ceil_div


def mtp_on(mtp):
    """True when the run decodes with MTP (compile-time constant inside kernels): the state's
    class says so (aisim.state.MtpState, not its NoMtp placeholder)."""
    return bool(getattr(type(mtp), "mtp_on", False))


@overload(mtp_on, jit_options={"cache": True})
def _mtp_on_typed(mtp):
    on = isinstance(mtp, types.BaseNamedTuple) and bool(
        getattr(mtp.instance_class, "mtp_on", False)
    )
    return lambda mtp: on


@helper
def burst_tokens(mtp, r, slots):
    """Tokens a drafting decoder granted `slots` verification slots emits (before clipping).

    Walks the first slots - 1 conditional acceptance rates on rank r's stream and stops at the
    first rejection; a rate of 1 accepts without consuming a draw.
    """
    k = 1
    st = mtp.rng[r]
    last = slots - 2
    for i in range(last):
        if not rng.random_bool(st, mtp.thresholds[i], mtp.always[i]):
            return k
        k += 1
    if last >= 0:
        # the last draft ends the walk either way: adding its outcome as a number keeps a coin
        # flip out of the sweep's branches (at rate 0.5 one is mispredicted every other pass)
        k += np.int64(rng.random_bool(st, mtp.thresholds[last], mtp.always[last]))
    return k


@helper
def in_decode_set(req, q):
    """After scheduling: q has computed its whole known sequence and either drafts this pass
    (a decoder, or on TRT-LLM a request completing its prompt) or completes a recompute."""
    g = req.num_generated[q]
    return decode_member(
        req.draft_slots[q], g, req.sched_tokens[q], req.num_computed[q], req.prompt_len[q] + g
    )


@helper
def decode_member(draft_slots, g, n, computed, known):
    """in_decode_set from values: drafts granted, generated g, scheduled n, computed after
    scheduling and the known sequence length (prompt + g)."""
    return draft_slots > 0 or (g > 0 and n > 0 and computed == known)


# columns of MtpState.shape (one row per rank)
SHAPE_PREFILLS = 0  # prefill-set size
SHAPE_ISL = 1  # sum of the prefill set's prompt positions after the pass
SHAPE_PREFIX = 2  # ... and before it
SHAPE_DECODES = 3  # decode-set size
SHAPE_CTX = 4  # sum of the decode set's L
SHAPE_NEED = 5  # blocks the pass's bursts may fill beyond what their requests hold


@helper
def shape_reset(mtp, r):
    for i in range(SHAPE_NEED + 1):
        mtp.shape[r, i] = 0


@helper
def shape_add(p, req, ranks, blocks, mtp, r, q, sign):
    """Count request q, just scheduled on rank r, in the pass's batch sums (sign 1), or take it
    out again (sign -1: an admission preempted it after it was scheduled).

    Called in scheduling order (running list, then admissions), which is the running order a
    sweep after scheduling would see: a request scheduled earlier in the pass leaves it only
    through an admission's preemption, which takes its share out before freeing its blocks.
    """
    shape_add_known(
        p,
        req,
        ranks,
        blocks,
        mtp,
        r,
        q,
        req.computed_before[q],
        req.sched_tokens[q],
        req.prompt_len[q],
        req.num_generated[q],
        req.slot[q],
        sign,
    )


@helper
def shape_add_known(p, req, ranks, blocks, mtp, r, q, a, n, prompt, g, slot, sign):
    """`shape_add` with the values the scheduler has in hand: a = computed before the pass,
    n = tokens scheduled, g = generated so far (reloading them cost ~8 loads per request and
    pass: the compiler cannot tell that the stores in between hit other arrays)."""
    sh = mtp.shape
    if n > 0 and a < prompt:
        sh[r, SHAPE_PREFILLS] += sign
        sh[r, SHAPE_ISL] += sign * min(a + n, prompt)
        sh[r, SHAPE_PREFIX] += sign * a
    slots = req.draft_slots[q]
    length = prompt + g
    if burst_ready(slots, n, a + n, length):
        if decode_member(slots, g, n, a + n, length):
            sh[r, SHAPE_DECODES] += sign
            sh[r, SHAPE_CTX] += sign * length
        end = length + min(max_burst(slots), req.output_len[q] - g)
        held = blocks.slot_nblk[slot]
        if end > held * p.block_size:
            sh[r, SHAPE_NEED] += sign * (ceil_div(end, p.block_size) - held)


@helper
def burst_ready(draft_slots, n, computed, known):
    """After scheduling: the request emits at this pass end, so the burst reservation covers
    it. That is the decode set plus a request whose first prompt computation completes: it is
    not priced as a decode, but its first token is reserved (and it can be the victim)."""
    return draft_slots > 0 or (n > 0 and computed == known)


@helper
def max_burst(draft_slots):
    """Most tokens a request emitting this pass can emit: a drafter granted s verification
    slots at most s, a request completing its prompt or its recompute exactly one."""
    return max(draft_slots, 1)


@helper
def burst_need(p, req, ranks, blocks, r):
    """Blocks the pass's bursts may fill: each emitting request of length L may emit up to
    m = min(max_burst, remaining output) tokens and needs ceil((L + m) / bs) blocks."""
    bs = p.block_size
    act_list = ranks.act_list
    need = 0
    for k in range(ranks.act_len[r]):
        q = act_list[r, k]
        g = req.num_generated[q]
        known = req.prompt_len[q] + g
        if burst_ready(req.draft_slots[q], req.sched_tokens[q], req.num_computed[q], known):
            m = min(max_burst(req.draft_slots[q]), req.output_len[q] - g)
            target = ceil_div(known + m, bs)
            held = blocks.slot_nblk[req.slot[q]]
            if target > held:
                need += target - held
    return need


@helper
def reserve_bursts(ranks, blocks, r, need, num_blocks):
    """Set aside `need` blocks for the bursts; False when the pool (free plus evictable cached
    blocks) cannot cover them.

    The reservation covers every member's longest burst, but a member only keeps the blocks its
    actual burst fills (`grow_after_burst`); the rest return to the free pool at the pass end.
    Cached blocks the reservation had to evict stay evicted, so the eviction is done here, in
    full, before any token is drawn.
    """
    if need > kv.num_free(ranks, r):
        return False
    kv.evict_to_clean(ranks, blocks, r, need, num_blocks)
    return True


@helper
def grow_after_burst(p, req, ranks, blocks, pfx_hash, r, q, known, emitted):
    """After q emitted `emitted` tokens at known length `known`: its table covers the new
    length (taken from the burst reservation) and every block full of computed tokens, which
    now reach known + emitted - 1, is cached (the drafter finalises each accepted position)."""
    bs = p.block_size
    slot = req.slot[q]
    end = known + emitted
    # divisions are slow and a burst crosses a block boundary about once per bs / burst passes
    if end > blocks.slot_nblk[slot] * bs and emitted < req.output_len[q] - req.num_generated[q]:
        kv.grow_slot(ranks, blocks, r, slot, ceil_div(end, bs), p.num_blocks)
    if p.prefix_caching:
        done = known + emitted - 1
        if done >= (blocks.slot_nhashed[slot] + 1) * bs:
            kv.register_full_blocks(req, blocks, pfx_hash, q, r, slot, done, bs)


@helper
def drop_last_hit(hits, active):
    """vLLM with MTP uses one block less of every prefix-cache hit (the drafter needs the
    hidden states of the last matched block, so that block is recomputed). The hit blocks held
    by live requests are capped at the shorter hit rather than tested block by block: a copy
    held by a live request can follow an unreferenced copy in the chain (a recomputed block
    is a second copy of its hash, and the probe sees the oldest one)."""
    return hits - 1, min(active, hits - 1)
