"""Admission of waiting requests on one rank (the second phase of a pass, docs/rules.md 4.3):
FCFS with head-of-line blocking. vLLM admits when the whole known sequence fits in the blocks
not referenced by live requests; TRT-LLM (GUARANTEED_NO_EVICT) when the request's to-completion
footprint fits beside the to-completion needs of the running requests. A P/D decode rank admits
activated requests, whose KV the handoff already placed."""

from aisim.kernels import backend_rules as rules
from aisim.kernels import kv_blocks as kv
from aisim.kernels import mtp_step, queues, running
from aisim.kernels._jit import helper
from aisim.kernels.codes import (
    CNT_ADMISSIONS,
    CNT_COMMITTED,
    CNT_LOG,
    SCHED_ADMIT_PREEMPT,
    SCHED_LOG_FULL,
    SCHED_PROGRESS,
    ReqStatus,
    Role,
)
from aisim.kernels.mtp_step import mtp_on
from aisim.kernels.units import ceil_div


@helper
def admit_waiting(p, req, ranks, blocks, stats, log, pfx_hash, r, t_ms, budget, defer, mtp):
    """FCFS admission with head-of-line blocking. Returns (budget left, flags)."""
    bs = p.block_size
    nb = p.num_blocks
    flags = 0
    outstanding = -1  # TRT-LLM reservation, summed over running only when a head is tested
    if ranks.dest_pending[r] > 0 and rules.activated_pass_blocked_recomputes(p):
        return budget, admit_activated_only(p, req, ranks, stats, log, r, t_ms, budget)
    while ranks.wait_len[r] > 0 and ranks.run_len[r] < p.max_seqs:
        q = ranks.wait_head[r]
        prompt = req.prompt_len[q]
        known = prompt + req.num_generated[q]
        fresh = req.num_admissions[q] == 0
        if fresh and p.role == Role.DECODE:
            # P/D activation: KV already reserved and materialised; no budget, no prefill
            flags |= SCHED_PROGRESS | admit_activated(p, req, ranks, stats, log, r, q, t_ms)
            if budget == 0:
                # it needs no budget, but one admitted with none left ends the admission
                # (observed: behind a recompute chunk that spends the budget, one activated
                # request joins per pass), like a TRT-LLM full hit below
                break
            continue
        too_big = prompt >= p.max_model_len
        if fresh and not too_big:
            too_big = rules.never_admissible(p, prompt, req.output_len[q])
        if too_big:
            queues.pop_waiting(req, ranks, r)
            queues.reject(p, req, ranks, stats, r, q, t_ms)
            flags |= SCHED_PROGRESS
            continue
        popped = False
        hits, active = kv.probe_prefix(
            req, blocks, pfx_hash, q, r, known, bs, p.prefix_caching, rules.reuses_whole_prompt(p)
        )
        if mtp_on(mtp):
            if rules.mtp_recomputes_last_hit(p) and hits > 0:
                hits, active = mtp_step.drop_last_hit(hits, active)
        if rules.reserves_to_completion(p):
            need = ceil_div(prompt + req.output_len[q], bs) - active
            if outstanding < 0:
                outstanding = running.trt_outstanding(p, req, blocks, ranks, r)
            avail = nb - ranks.num_referenced[r] - outstanding
        else:
            need = ceil_div(known, bs) - active
            avail = nb - ranks.num_referenced[r]
        if need > avail:
            break
        hit_tokens = hits * bs
        remaining = known - hit_tokens
        n = min(remaining, budget)
        # TRT-LLM: a fully cached prompt needs no budget; it joins this pass's decode set
        # (context L = P) and emits its first token at the pass end
        if n == 0 and remaining > 0:
            break
        if rules.holds_back_prompt(p, prompt - min(hit_tokens, prompt), budget):
            break
        if defer and remaining > 1:
            break
        if mtp_on(mtp) and rules.mtp_recomputes_last_hit(p) and hits > 0:
            # the test above counts live hits through the capped drop_last_hit estimate; the
            # allocation takes the hits' actual copies. When they do not fit, running requests
            # are preempted from the tail until they do, and admission ends after this one
            tokens = hit_tokens + n
            if not _hits_fit(p, req, ranks, blocks, pfx_hash, q, r, hits, tokens):
                # q leaves the queue before its victims rejoin it at the front
                queues.pop_waiting(req, ranks, r)
                popped = True
                victims = 0
                while not _hits_fit(p, req, ranks, blocks, pfx_hash, q, r, hits, tokens):
                    if ranks.run_len[r] == 0:
                        popped = False
                        break
                    running.preempt_scheduled_last(p, req, ranks, blocks, stats, pfx_hash, mtp, r)
                    victims += 1
                    flags |= SCHED_PROGRESS | SCHED_ADMIT_PREEMPT
                if not popped:
                    queues.insert_waiting_after(req, ranks, r, q, victims)
                    break
        if not popped:
            queues.pop_waiting(req, ranks, r)
        top = ranks.slot_top[r] - 1
        slot = blocks.slot_stack[r * ranks.run_list.shape[1] + top]
        ranks.slot_top[r] = top
        req.slot[q] = slot
        ranks.run_list[r, ranks.run_len[r]] = q
        ranks.run_len[r] += 1
        ranks.act_list[r, ranks.act_len[r]] = q
        ranks.act_len[r] += 1
        req.seq[q] = stats.counters[CNT_ADMISSIONS]
        req.status[q] = ReqStatus.RUNNING
        kv.attach_hits(req, ranks, blocks, pfx_hash, q, r, slot, hits)
        kv.grow_slot(ranks, blocks, r, slot, ceil_div(hit_tokens + n, bs), nb)
        req.computed_before[q] = hit_tokens
        req.sched_tokens[q] = n
        req.num_computed[q] = hit_tokens + n
        req.activated[q] = remaining == 0
        if mtp_on(mtp):
            if rules.drafts_from_prefill_pass(p) and remaining == n and req.num_generated[q] == 0:
                req.draft_slots[q] = 1 + p.nextn  # TRT-LLM drafts from the prefill pass on
            mtp_step.shape_add(p, req, ranks, blocks, mtp, r, q, 1)
        if p.prefix_caching:
            kv.register_full_blocks(req, blocks, pfx_hash, q, r, slot, hit_tokens + n, bs)
        if hit_tokens < prompt:
            stats.counters[CNT_COMMITTED] += n
        if fresh:
            req.first_admit_ms[q] = t_ms
            req.reused_first[q] = hit_tokens
        if hit_tokens > req.reused_max[q]:
            req.reused_max[q] = hit_tokens
        req.num_admissions[q] += 1
        stats.counters[CNT_ADMISSIONS] += 1
        flags |= log_admission(p, log, stats, q, t_ms, hit_tokens, not fresh)
        if rules.reserves_to_completion(p):
            if outstanding >= 0:
                outstanding += ceil_div(prompt + req.output_len[q], bs) - blocks.slot_nblk[slot]
        budget -= n
        flags |= SCHED_PROGRESS
        if flags & SCHED_ADMIT_PREEMPT:
            break
        if budget == 0 and n == 0:
            # TRT-LLM: a fully cached prompt is admitted even with no budget left, and then
            # admission stops. An admission that spends the budget on tokens does not stop it:
            # the next head is still rejected if it can never run, and admitted if it is fully
            # cached (observed); any other head finds no budget and waits.
            break
    return budget, flags


@helper
def _hits_fit(p, req, ranks, blocks, pfx_hash, q, r, hits, tokens):
    """vLLM MTP: whether q's table of `tokens` tokens, led by its `hits` cached blocks, can be
    allocated: the hits held by live requests are shared, the others (an unreferenced copy can
    lead the chain of a hash whose newer copy is live) come from the free blocks."""
    held = 0
    for j in range(hits):
        b = kv.cached_copy(blocks, kv.block_key(req, pfx_hash, q, j, r))
        if blocks.ref[b] > 0:
            held += 1
    return ceil_div(tokens, p.block_size) - held <= kv.num_free(ranks, r)


@helper
def log_admission(p, log, stats, q, t_ms, reused, readmit):
    """One admission-log row (captured runs). A full log keeps counting and flags the run, which
    is then repeated with more room (aisim/engine/driver.py). Returns flags."""
    if not p.capture:
        return 0
    k = stats.counters[CNT_LOG]
    stats.counters[CNT_LOG] = k + 1
    if k >= log.req.shape[0]:
        return SCHED_LOG_FULL
    log.req[k] = q
    log.at_ms[k] = t_ms
    log.reused[k] = reused
    log.readmit[k] = readmit
    log.pool[k] = p.role
    return 0


@helper
def admit_activated(p, req, ranks, stats, log, r, q, t_ms):
    """Decode side of P/D: an activated request joins the running list with its prompt computed.

    It is in this pass's decode set with L = P and emits its first token at the pass end
    (docs/rules.md 9.6); its blocks were taken at reservation. Returns flags.
    """
    queues.pop_waiting(req, ranks, r)
    ranks.run_list[r, ranks.run_len[r]] = q
    ranks.run_len[r] += 1
    ranks.act_list[r, ranks.act_len[r]] = q
    ranks.act_len[r] += 1
    req.seq[q] = stats.counters[CNT_ADMISSIONS]
    req.status[q] = ReqStatus.RUNNING
    prompt = req.prompt_len[q]
    req.computed_before[q] = prompt
    req.sched_tokens[q] = 0
    req.num_computed[q] = prompt
    req.activated[q] = True
    req.first_admit_ms[q] = t_ms
    req.num_admissions[q] += 1
    stats.counters[CNT_ADMISSIONS] += 1
    return log_admission(p, log, stats, q, t_ms, req.reused_first[q], False)


@helper
def admit_activated_only(p, req, ranks, stats, log, r, t_ms, budget):
    """P/D vLLM decode rank with destinations still waiting for a reservation: recomputes after
    preemption stay queued (not admitted, even when they would fit) and the activated requests
    behind them, whose KV is held already, are admitted in queue order. Observed on AISimulate
    (tests/golden/pd-decode-kv-pressure-preempt*): without a pending destination the queue is
    the usual head-of-line FCFS, with one an activated request passes blocked recomputes.
    Returns flags."""
    flags = 0
    prev = -1
    q = ranks.wait_head[r]
    while q >= 0 and ranks.run_len[r] < p.max_seqs:
        nxt = req.wait_next[q]
        if req.num_admissions[q] > 0:
            prev = q
        else:
            if prev >= 0:
                # unlink from the middle and put it at the head, where admit_activated pops
                req.wait_next[prev] = nxt
                if nxt < 0:
                    ranks.wait_tail[r] = prev
                ranks.wait_len[r] -= 1
                queues.push_waiting_front(req, ranks, r, q)
            flags |= SCHED_PROGRESS | admit_activated(p, req, ranks, stats, log, r, q, t_ms)
            if budget == 0:
                break  # as in admit_waiting
        q = nxt
    return flags
