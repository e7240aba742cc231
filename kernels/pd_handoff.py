"""The P/D handoff's per-request steps (docs/rules.md 9.3-9.5): the handoff action queue, the
decode-side destination reservation and its retries, activation, source release, and the
FIFOs that defer activations and releases while a worker's pass runs. kernels/loop_pd.py
drives them."""

from aisim.kernels import backend_rules as rules
from aisim.kernels import kv_blocks as kv
from aisim.kernels import pool_pass, queues, running
from aisim.kernels._jit import helper, kernel
from aisim.kernels.codes import PD_Q_TAIL, PD_RESERVATIONS, PDAction, ReqStatus
from aisim.kernels.units import ceil_div


@helper
def enqueue(pd, kind, q):
    cap = pd.act_kind.shape[0]
    tail = pd.scalars[PD_Q_TAIL]
    pd.act_kind[tail % cap] = kind
    pd.act_req[tail % cap] = q
    pd.scalars[PD_Q_TAIL] = tail + 1


@helper
def fifo_push(link, heads, tails, k, q):
    link[q] = -1
    t = tails[k]
    if t >= 0:
        link[t] = q
    else:
        heads[k] = q
    tails[k] = q


@helper
def fifo_pop(link, heads, tails, k):
    q = heads[k]
    nxt = link[q]
    heads[k] = nxt
    if nxt < 0:
        tails[k] = -1
    link[q] = -1
    return q


@helper
def _queue_by_reservation(pd, req, ranks, r, q):
    """Put activated q in decode rank r's waiting queue, before the first entry reserved after
    it, a recompute included (observed on both backends: a request reserved earlier but
    transferred later is still admitted first; a recompute stays ahead only of requests
    reserved after it). The queue is not sorted (recomputes return to its front), so the scan
    starts at the head; it runs once per activation, not per pass."""
    prev = -1
    nxt = ranks.wait_head[r]
    while nxt >= 0 and pd.reserve_seq[nxt] < pd.reserve_seq[q]:
        prev = nxt
        nxt = req.wait_next[nxt]
    if nxt < 0:
        queues.push_waiting_back(req, ranks, r, q)
        return
    req.wait_next[q] = nxt
    if prev >= 0:
        req.wait_next[prev] = q
    else:
        ranks.wait_head[r] = q
    ranks.wait_len[r] += 1


@helper
def _activated_outstanding(p, req, ranks, blocks, r):
    """TRT-LLM: blocks activated-but-not-yet-running destinations still need to complete."""
    total = 0
    q = ranks.wait_head[r]
    while q >= 0:
        if req.num_admissions[q] == 0:
            full = ceil_div(req.prompt_len[q] + req.output_len[q], p.block_size)
            total += full - blocks.slot_nblk[req.slot[q]]
        q = req.wait_next[q]
    return total


@helper
def _try_reserve(pd, p, req, ranks, blocks, pfx_hash, r, t_ms):
    """One retry on decode rank r (`retry` checks first that one is pending and a running slot
    is free): reserve KV for the head pending destination if it fits.

    vLLM: the prompt's blocks (less active prefix hits) must fit in the free blocks. A
    destination that did not fit is tried again only once the rank's capacity generation has
    moved on (a request retired or was preempted there), whatever prefix blocks other
    destinations have materialised meanwhile; every try probes the prefix afresh. TRT-LLM
    reserves to completion: ceil((P + O) / bs) must fit beside what running and reserved
    requests still need; it takes only the prompt blocks and no prefix credit (docs/rules.md 9.3).
    """
    q = pd.pend_head[r]
    bs = p.block_size
    prompt = req.prompt_len[q]
    prompt_blocks = ceil_div(prompt, bs)
    hits = 0
    if rules.reserves_to_completion(p):
        full = ceil_div(prompt + req.output_len[q], bs)
        avail = (
            kv.num_free(ranks, r)
            - running.trt_outstanding(p, req, blocks, ranks, r)
            - pd.trt_need[r]
            - _activated_outstanding(p, req, ranks, blocks, r)
        )
        if full > avail:
            return
    else:
        if pd.tried_gen[q] == pd.cap_gen[r]:
            return  # tried and failed at this capacity generation
        # the destination computes no prompt token: a fully cached block-aligned prompt needs
        # no transfer at all (observed, tests/golden/pd-dest-full-hit)
        hits, active = kv.probe_prefix(
            req, blocks, pfx_hash, q, r, prompt, bs, p.prefix_caching, True
        )
        if prompt_blocks - active > kv.num_free(ranks, r):
            pd.tried_gen[q] = pd.cap_gen[r]
            return
    fifo_pop(pd.dlink, pd.pend_head, pd.pend_tail, r)
    ranks.dest_pending[r] -= 1
    top = ranks.slot_top[r] - 1
    slot = blocks.slot_stack[r * ranks.run_list.shape[1] + top]
    ranks.slot_top[r] = top
    req.slot[q] = slot
    kv.attach_hits(req, ranks, blocks, pfx_hash, q, r, slot, hits)
    kv.grow_slot(ranks, blocks, r, slot, prompt_blocks, p.num_blocks)
    if rules.reserves_to_completion(p):
        pd.trt_need[r] += ceil_div(prompt + req.output_len[q], bs) - prompt_blocks
    # observed: a destination-side hit shortens the transfer but is not reported as reuse
    pd.reserved_ms[q] = t_ms
    pd.reserve_seq[q] = pd.scalars[PD_RESERVATIONS]
    pd.scalars[PD_RESERVATIONS] += 1
    pd.xfer_tokens[q] = (prompt_blocks - hits) * bs
    enqueue(pd, PDAction.START_TRANSFER, q)


@helper
def apply_activation(pd, p, req, ranks, blocks, pfx_hash, q, t_ms):
    r = req.rank[q]
    pd.activated_ms[q] = t_ms
    if p.prefix_caching:
        # the transferred blocks become hittable once the request is activated (observed:
        # destinations reserved at the same instant do not hit each other's prompt blocks)
        kv.register_full_blocks(
            req, blocks, pfx_hash, q, r, req.slot[q], req.prompt_len[q], p.block_size
        )
    req.status[q] = ReqStatus.WAITING
    _queue_by_reservation(pd, req, ranks, r, q)
    if rules.reserves_to_completion(p):
        # from now on its remaining need is counted through the running list once admitted
        pd.trt_need[r] -= ceil_div(req.prompt_len[q] + req.output_len[q], p.block_size) - ceil_div(
            req.prompt_len[q], p.block_size
        )
    retry(pd, p, req, ranks, blocks, pfx_hash, r, t_ms)
    # the source is released once the destination holds the request (observed: a release
    # never precedes its activation, even on an idle prefill worker)
    enqueue(pd, PDAction.RELEASE, q)


@helper
def apply_release(pd, p, req, ranks, blocks, q, t_ms):
    queues.free_request_kv(p, req, ranks, blocks, req.rank[q], q)
    if req.status[q] != ReqStatus.FAILED:  # a failed handoff reports no release
        pd.released_ms[q] = t_ms


@helper
def never_fits(p, req, q):
    """Whether decode pool p could never hold request q's handoff, even empty (observed:
    vLLM needs the prompt's blocks, TRT-LLM the prompt's and the first token's), or its
    prompt reaches the pool's own context limit (a decode-only context_length)."""
    tokens = rules.handoff_tokens(p, req.prompt_len[q])
    return ceil_div(tokens, p.block_size) > p.num_blocks or req.prompt_len[q] >= p.max_model_len


@kernel
def finish_pass_unit(p, req, ranks, blocks, workers, stats, pfx_hash, mtp, w, t_ms):
    pool_pass.finish_pass(p, req, ranks, blocks, workers, stats, pfx_hash, mtp, w, t_ms)


@kernel
def _try_reserve_unit(pd, p, req, ranks, blocks, pfx_hash, r, t_ms):
    """Out of line: its four call sites would each inline the prefix probe and block growth."""
    _try_reserve(pd, p, req, ranks, blocks, pfx_hash, r, t_ms)


@helper
def retry(pd, p, req, ranks, blocks, pfx_hash, r, t_ms):
    """A reservation retry on decode rank r; most pass ends have nothing pending, and the
    out-of-line call copies every array descriptor of its arguments."""
    if ranks.dest_pending[r] > 0 and ranks.run_len[r] < p.max_seqs:
        _try_reserve_unit(pd, p, req, ranks, blocks, pfx_hash, r, t_ms)


@helper
def retry_stalled(pd, p, req, ranks, blocks, pfx_hash, w, t_ms):
    """A decode pass that could do nothing (its recomputes wait behind pending destinations):
    AISimulate runs it with zero duration and its end retries a reservation on each rank, then
    a new pass starts at once (observed: tests/golden/pd-decode-preempt-c12-b30 reserves five
    destinations in one instant). When nothing is reserved the worker stays idle until a
    transfer or activation changes its state; if nothing ever does, the run ends stuck and
    the caller reports it (AISimulate: "effect-free zero-duration pass"). Returns how many
    destinations were reserved."""
    before = 0
    after = 0
    for d in range(p.dp_size):
        r = w * p.dp_size + d
        before += ranks.dest_pending[r]
        retry(pd, p, req, ranks, blocks, pfx_hash, r, t_ms)
        after += ranks.dest_pending[r]
    return before - after
