"""Scheduling the running set of one rank (the first phase of a pass, docs/rules.md 4.2): each
running request in list order takes min(remaining known tokens, budget); a failed block
allocation preempts the LAST running request (vLLM, LIFO, possibly itself); TRT-LLM never
preempts (its admission reserved to completion). Lazy decoders act only when an event of theirs
is due (kernels/lazy.py)."""

import numpy as np

from aisim.kernels import backend_rules as rules
from aisim.kernels import kv_blocks as kv
from aisim.kernels import lazy, mtp_step, queues
from aisim.kernels._jit import helper, kernel
from aisim.kernels.codes import (
    CNT_COMMITTED,
    CNT_PREEMPTIONS,
    SCHED_PROGRESS,
    SCHED_TRT_PREEMPT,
    ReqStatus,
)
from aisim.kernels.mtp_step import mtp_on
from aisim.kernels.units import ceil_div


@helper
def trt_outstanding(p, req, blocks, ranks, r):
    """Blocks running requests will still need to reach completion (TRT-LLM reservation)."""
    total = 0
    for k in range(ranks.run_len[r]):
        q = ranks.run_list[r, k]
        full = ceil_div(req.prompt_len[q] + req.output_len[q], p.block_size)
        total += full - blocks.slot_nblk[req.slot[q]]
    return total


@kernel
def preempt_last(p, req, ranks, blocks, stats, pfx_hash, r):
    """Evict the last running request: free its KV, recompute later from the queue front."""
    n = ranks.run_len[r] - 1
    v = ranks.run_list[r, n]
    ranks.run_list[r, n] = -1
    ranks.run_len[r] = n
    # preemption only happens in exact passes, where every running request is active
    a = ranks.act_len[r] - 1
    if a >= 0 and ranks.act_list[r, a] == v:
        ranks.act_list[r, a] = -1
        ranks.act_len[r] = a
    if p.prefix_caching:
        kv.publish_owner_blocks(req, blocks, v, r, req.slot[v])
    queues.free_request_kv(p, req, ranks, blocks, r, v)
    if p.capture and np.isnan(req.preempt_at_ms[v]):
        # time lost runs from the first preemption to the next token (docs/attribution.md)
        req.preempt_at_ms[v] = ranks.pass_start_ms[r]
    req.num_computed[v] = 0
    req.sched_tokens[v] = 0
    req.drafting[v] = False
    req.draft_slots[v] = 0
    req.status[v] = ReqStatus.WAITING
    queues.push_waiting_front(req, ranks, r, v)
    stats.counters[CNT_PREEMPTIONS] += 1
    return v


@helper
def preempt_scheduled_last(p, req, ranks, blocks, stats, pfx_hash, mtp, r):
    """vLLM MTP admission: preempt the last running request although this pass already
    scheduled it. Its part of the pass is undone first (its batch-shape share, its committed
    prompt tokens); the budget it frees goes unused, as admission ends after the request that
    needed the room (docs/rules.md 8.4)."""
    v = ranks.run_list[r, ranks.run_len[r] - 1]
    if req.computed_before[v] < req.prompt_len[v]:
        stats.counters[CNT_COMMITTED] -= req.sched_tokens[v]
    mtp_step.shape_add(p, req, ranks, blocks, mtp, r, v, -1)
    preempt_last(p, req, ranks, blocks, stats, pfx_hash, r)


@helper
def schedule_running(p, req, ranks, blocks, stats, pfx_hash, r, budget, defer, x, mtp):
    """Running requests in list order. Returns (budget left, flags, preempted).

    Active requests are scheduled one by one; lazy ones (all scheduled in full, guaranteed by
    lazy.fits_in_full) only act when due, merged in running order so KV operations keep the
    exact order of the per-request algorithm.
    """
    # Arrays are bound to locals once: reading a NamedTuple field inside the loop costs an
    # atomic reference-count pair per access.
    bs = p.block_size
    act_list = ranks.act_list
    prompt_len = req.prompt_len
    num_computed = req.num_computed
    num_generated = req.num_generated
    slots = req.slot
    slot_nblk = blocks.slot_nblk
    slot_nhashed = blocks.slot_nhashed
    sched_tokens = req.sched_tokens
    computed_before = req.computed_before
    seq = req.seq
    flags = 0
    committed = 0
    preempted = False
    n_due = ranks.due_len[r]
    d = 0
    if ranks.lazy_count[r] > 0:
        budget -= ranks.lazy_count[r]
        flags |= SCHED_PROGRESS
    i = 0
    while i < ranks.act_len[r]:
        if budget == 0:
            break
        q = kv.index(act_list[r, i])
        while d < n_due and seq[ranks.due_list[r, d]] < seq[q]:
            run_due_event(p, req, ranks, blocks, pfx_hash, r, x, ranks.due_list[r, d])
            d += 1
        prompt = prompt_len[q]
        c = num_computed[q]
        if defer and c < prompt:
            i += 1
            continue
        g = num_generated[q]
        n = min(prompt + g - c, budget)
        charge = n
        if mtp_on(mtp):
            if req.drafting[q]:
                if rules.budgets_draft_slots(p):
                    # vLLM charges 1 + nextn verification slots (fewer if the budget or the
                    # context limit runs out, and then walks fewer rates) for the known token
                    charge = min(1 + p.nextn, budget, p.max_model_len - prompt - g)
                    req.draft_slots[q] = charge
                else:
                    req.draft_slots[q] = 1 + p.nextn  # TRT-LLM: drafts are not budgeted
            elif rules.drafts_from_prefill_pass(p) and c + n == prompt and g == 0:
                req.draft_slots[q] = 1 + p.nextn  # TRT-LLM drafts from the prefill pass on
        slot = kv.index(slots[q])
        # divisions are slow and a decode crosses a block boundary once per block_size steps
        if c + n > slot_nblk[slot] * bs:
            target = ceil_div(c + n, bs)
            need = target - slot_nblk[slot]
            self_preempted = False
            while need > kv.num_free(ranks, r):
                if not rules.preempts_when_full(p):
                    stats.counters[CNT_COMMITTED] += committed
                    return budget, flags | SCHED_TRT_PREEMPT, preempted
                v = preempt_last(p, req, ranks, blocks, stats, pfx_hash, r)
                preempted = True
                flags |= SCHED_PROGRESS
                if v == q:
                    self_preempted = True
                    break
            if self_preempted:
                break
            kv.grow_slot(ranks, blocks, r, slot, target, p.num_blocks)
        computed_before[q] = c
        sched_tokens[q] = n
        num_computed[q] = c + n
        if p.prefix_caching and c + n >= (slot_nhashed[slot] + 1) * bs:
            kv.register_full_blocks(req, blocks, pfx_hash, q, r, slot, c + n, bs)
        if c < prompt:
            committed += n
        budget -= charge
        flags |= SCHED_PROGRESS
        if mtp_on(mtp):
            mtp_step.shape_add_known(p, req, ranks, blocks, mtp, r, q, c, n, prompt, g, slot, 1)
        i += 1
    while d < n_due:
        run_due_event(p, req, ranks, blocks, pfx_hash, r, x, ranks.due_list[r, d])
        d += 1
    stats.counters[CNT_COMMITTED] += committed
    return budget, flags, preempted


@kernel
def run_due_event(p, req, ranks, blocks, pfx_hash, r, x, q):
    """A lazy request's block boundary / full block / completion at rank pass x."""
    bs = p.block_size
    slot = req.slot[q]
    after = lazy.due_position(req, ranks, r, x, q) + 1
    if after > blocks.slot_nblk[slot] * bs:
        kv.grow_slot(ranks, blocks, r, slot, blocks.slot_nblk[slot] + 1, p.num_blocks)
    if p.prefix_caching and after >= (blocks.slot_nhashed[slot] + 1) * bs:
        kv.register_full_blocks(req, blocks, pfx_hash, q, r, slot, after, bs)
    if x - req.lazy_base[q] == req.output_len[q] - req.gen_base[q]:
        req.finishing[q] = True  # emits its last token at this pass end
    else:
        lazy.cal_insert(req, ranks, r, q, lazy.next_event(p, req, blocks, q))


@helper
def has_decoder(req, ranks, r):
    if ranks.lazy_count[r] > 0:
        return True
    for k in range(ranks.act_len[r]):
        q = ranks.act_list[r, k]
        if req.num_computed[q] >= req.prompt_len[q]:
            return True
    return False
