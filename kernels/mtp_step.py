"""Native MTP speculative decoding inside a rank's pass (behaviour.md 8, 17.0, 17.1).

Whether MTP is on is a property of the *type* of the `mtp` argument the event loop receives:
`MtpState` switches it on, `NoMtp` (same fields, empty arrays) off. `mtp_on(mtp)` is a
compile-time constant in each specialization, so a run without MTP executes none of the code
guarded by it (LLVM removes the dead branches) and pays nothing per request for the feature.

A drafting decoder of length L is scheduled for its one known token (so it still has
computed = L - 1 between passes) but is charged s = min(1 + nextn, budget left) verification
slots. On TRT-LLM a request whose prompt completes drafts in that same pass: it joins the decode
set at L = P (priced, and walking all rates) without a budget charge [observed].

After scheduling, the rank reserves the KV its decode set's bursts may fill; at the pass end
each member walks the first s - 1 acceptance rates on its rank's ChaCha12 stream and emits
1 + accepted tokens, clipped to the remaining output.
"""

import numpy as np
from numba import types
from numba.extending import overload

from aisim.kernels import kv_blocks as kv
from aisim.kernels import rng
from aisim.kernels._jit import helper
from aisim.state import MtpState


def mtp_on(mtp):
    """True when the run decodes with MTP (compile-time constant inside kernels)."""
    return type(mtp) is MtpState


@overload(mtp_on, jit_options={"cache": True})
def _mtp_on_typed(mtp):
    on = isinstance(mtp, types.BaseNamedTuple) and mtp.instance_class is MtpState
    return lambda mtp: on


@helper
def ceil_div(a, b):
    return -((-a) // b)


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
    return decode_member(req.draft_slots[q], g, req.sched_tokens[q], req.num_computed[q],
                         req.prompt_len[q] + g)


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
SHAPE_NEED = 5  # blocks the decode set's bursts need beyond what its members hold
SHAPE_GROW = 6  # members that need blocks, listed in ranks.due_list[r] (idle under MTP)


@helper
def shape_reset(mtp, r):
    for i in range(SHAPE_GROW + 1):
        mtp.shape[r, i] = 0


@helper
def shape_add(p, req, ranks, blocks, mtp, r, q):
    """Count request q, just scheduled on rank r, in the pass's batch sums.

    Called in scheduling order (running list, then admissions), which is the running order a
    sweep after scheduling would see: a request scheduled earlier in the pass is never preempted
    later in it (victims come from the end of the running list), and its blocks only change at
    the burst reservation.
    """
    shape_add_known(p, req, ranks, blocks, mtp, r, q, req.computed_before[q], req.sched_tokens[q],
                    req.prompt_len[q], req.num_generated[q], req.slot[q])


@helper
def shape_add_known(p, req, ranks, blocks, mtp, r, q, a, n, prompt, g, slot):
    """`shape_add` with the values the scheduler has in hand: a = computed before the pass,
    n = tokens scheduled, g = generated so far (reloading them cost ~8 loads per request and
    pass: the compiler cannot tell that the stores in between hit other arrays)."""
    sh = mtp.shape
    if n > 0 and a < prompt:
        sh[r, SHAPE_PREFILLS] += 1
        sh[r, SHAPE_ISL] += min(a + n, prompt)
        sh[r, SHAPE_PREFIX] += a
    if decode_member(req.draft_slots[q], g, n, a + n, prompt + g):
        length = prompt + g
        sh[r, SHAPE_DECODES] += 1
        sh[r, SHAPE_CTX] += length
        end = length + min(1 + p.nextn, req.output_len[q] - g)
        held = blocks.slot_nblk[slot]
        if end > held * p.block_size:
            sh[r, SHAPE_NEED] += ceil_div(end, p.block_size) - held
            ranks.due_list[r, sh[r, SHAPE_GROW]] = q
            sh[r, SHAPE_GROW] += 1


@helper
def reserve_bursts(p, req, ranks, blocks, r, nextn):
    """Allocate every decode-set member's burst KV; returns the request to preempt, or -1.

    Each member of length L may emit up to m = min(1 + nextn, remaining output) tokens this
    pass and needs ceil((L + m) / bs) blocks. When the pool (free plus evictable cached blocks)
    cannot cover the whole set, nothing is allocated and the caller preempts the last running
    request and asks again.
    """
    bs = p.block_size
    act_list = ranks.act_list
    slot_nblk = blocks.slot_nblk
    need = 0
    for k in range(ranks.act_len[r]):
        q = act_list[r, k]
        if in_decode_set(req, q):
            g = req.num_generated[q]
            m = min(1 + nextn, req.output_len[q] - g)
            target = ceil_div(req.prompt_len[q] + g + m, bs)
            held = slot_nblk[req.slot[q]]
            if target > held:
                need += target - held
    if need == 0:
        return -1
    if need > kv.num_free(ranks, r):
        return ranks.run_list[r, ranks.run_len[r] - 1]
    for k in range(ranks.act_len[r]):
        q = act_list[r, k]
        if in_decode_set(req, q):
            g = req.num_generated[q]
            m = min(1 + nextn, req.output_len[q] - g)
            target = ceil_div(req.prompt_len[q] + g + m, bs)
            slot = req.slot[q]
            if target > slot_nblk[slot]:
                kv.grow_slot(ranks, blocks, r, slot, target, p.num_blocks)
    return -1


@helper
def drop_last_hit(req, blocks, pfx_hash, q, r, hits, active):
    """vLLM with MTP uses one block less of every prefix-cache hit (the drafter needs the
    hidden states of the last matched block, so that block is recomputed)."""
    b = kv.map_find(blocks, kv.block_key(req, pfx_hash, q, hits - 1, r))
    if blocks.ref[b] > 0:
        active -= 1
    return hits - 1, active

