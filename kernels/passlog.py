"""Pass capture (--capture-passes): one fixed-size row per rank per scheduler pass.

Called from the event loop only when KernelParams.capture_passes is set, right after a rank is
scheduled; runs without capture never reach it. The batch classification is the one
`pass_price.price_rank` prices, lazy decoders included (each is in the decode set with one token),
so capture works on the pass-compressed path and changes nothing in the simulation.
"""

from aisim.kernels._jit import helper


@helper
def record_rank(p, req, ranks, plog, r, w, t_ms, preempted):
    """Append rank r's freshly scheduled pass (end time filled by `close_pass`)."""
    row = plog.count[0]
    plog.count[0] = row + 1
    if row >= plog.start_ms.shape[0]:
        return  # full: the caller reruns with count[0] rows
    x = ranks.pass_idx[r]
    bs_d = ranks.lazy_count[r]
    sum_ctx = ranks.lazy_sum[r] + bs_d * x
    tokens = bs_d
    bs_p = 0
    new_prefill = 0
    for k in range(ranks.act_len[r]):
        q = ranks.act_list[r, k]
        n = req.sched_tokens[q]
        prompt = req.prompt_len[q]
        g = req.num_generated[q]
        if n == 0:
            if req.activated[q]:
                bs_d += 1
                sum_ctx += prompt + g
            continue
        tokens += n
        a = req.computed_before[q]
        b = a + n
        if a < prompt:
            bs_p += 1
            new_prefill += n  # as committed_prefill_tokens counts them
        if g > 0 and b == prompt + g:
            bs_d += 1
            sum_ctx += prompt + g
    plog.start_ms[row] = t_ms
    plog.end_ms[row] = t_ms
    plog.rank[row] = r
    plog.worker[row] = w
    plog.role[row] = p.role
    plog.num_prefill[row] = bs_p
    plog.num_decode[row] = bs_d
    plog.tokens_scheduled[row] = tokens
    plog.prefill_tokens[row] = new_prefill
    plog.sum_decode_context[row] = sum_ctx
    plog.kv_blocks_used[row] = ranks.num_referenced[r]
    plog.kv_blocks_cached[row] = ranks.lru_len[r]
    plog.waiting[row] = ranks.wait_len[r]
    plog.running[row] = ranks.run_len[r]
    plog.preemptions[row] = preempted


@helper
def close_pass(plog, first_row, end_ms):
    """Stamp the worker pass's end on the rows its ranks appended."""
    cap = plog.start_ms.shape[0]
    for row in range(first_row, min(plog.count[0], cap)):
        plog.end_ms[row] = end_ms
