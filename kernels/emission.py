"""The end of a rank's pass: every request whose known sequence is computed emits its token (MTP:
its burst), all stamped at the pass end; completions retire in running order, steady decoders
turn lazy."""

import numpy as np

from aisim.kernels import kv_blocks as kv
from aisim.kernels import lazy, mtp_step, queues, sessions
from aisim.kernels._jit import helper, kernel
from aisim.kernels.codes import (
    CNT_LAZY,
    ReqStatus,
    Role,
)
from aisim.kernels.mtp_step import mtp_on
from aisim.kernels.tokstats import record_gap


@helper
def emit_rank(p, req, ranks, blocks, stats, pfx_hash, r, t_ms, mtp, solo):
    """Pass end on rank r: every request whose known sequence is computed emits one token (MTP:
    a drafting decoder emits its burst, every token stamped now).

    Completions are retired in running order (closed-loop replacements and KV release order
    depend on it); steady decoders with two or more tokens turn lazy. Captured runs also
    attribute the pass to its requests (`solo`: the worker's pass had one request;
    docs/attribution.md).
    """
    x = ranks.pass_idx[r]
    act_list = ranks.act_list
    sched_tokens = req.sched_tokens
    num_generated = req.num_generated
    num_computed = req.num_computed
    prompt_len = req.prompt_len
    output_len = req.output_len
    first_token = req.first_token_ms
    second_token = req.second_token_ms
    last_token = req.last_token_ms
    gap_run = stats.run
    n_lazy = ranks.lazy_count[r]
    if n_lazy > 0:
        record_gap(stats, t_ms - ranks.last_end_ms[r], n_lazy)
    any_done = False
    for k in range(ranks.due_len[r]):
        q = ranks.due_list[r, k]
        if req.finishing[q]:
            lazy.materialize(req, ranks, r, q, x - req.lazy_base[q], t_ms)
            any_done = True
    ranks.due_len[r] = 0
    may_turn_lazy = not mtp_on(mtp) and p.lazy_decode and ranks.cooldown[r] == 0
    kept = 0
    n_act = ranks.act_len[r]
    for k in range(n_act):
        q = kv.index(act_list[r, k])
        n = sched_tokens[q]
        sched_tokens[q] = 0
        g = num_generated[q]
        if p.capture:
            attribute(req, q, n, g, t_ms - ranks.pass_start_ms[r], solo)
        activated = req.activated[q]
        if activated:
            req.activated[q] = False
            n = 1
        known = prompt_len[q] + g
        if n > 0 and num_computed[q] == known:
            out_len = output_len[q]
            quiet = req.no_stats[q]
            burst = 1
            if mtp_on(mtp):
                s = req.draft_slots[q]
                if s > 0:
                    req.draft_slots[q] = 0
                    burst = min(mtp_step.burst_tokens(mtp, r, s), out_len - g)
                    # computed stays one short of the known length between passes
                    num_computed[q] = known + burst - 1
                if not activated:  # its tokens fill blocks the burst reservation set aside
                    mtp_step.grow_after_burst(p, req, ranks, blocks, pfx_hash, r, q, known, burst)
                req.drafting[q] = True
            if p.capture and not np.isnan(req.preempt_at_ms[q]):
                recovered(req, q, g, t_ms)
            if g == 0:
                first_token[q] = t_ms
            else:
                gap = t_ms - last_token[q]
                if quiet:
                    pass
                elif gap_run[1] > 0.0 and gap == gap_run[0]:
                    gap_run[1] += 1.0
                else:
                    record_gap(stats, gap, 1)
                if g == 1:
                    second_token[q] = t_ms
            if mtp_on(mtp):
                if burst > 1:
                    if not quiet:
                        gap_run[2] += burst - 1  # a burst's tokens share one timestamp: ITL 0
                    if g == 0:
                        second_token[q] = t_ms
            last_token[q] = t_ms
            g += burst
            num_generated[q] = g
            if g >= out_len:
                req.finishing[q] = True
                any_done = True
                continue
            if g >= 2 and may_turn_lazy and not quiet:  # lazy gaps are all counted
                lazy.make_lazy(p, req, ranks, blocks, r, q, x)
                stats.counters[CNT_LAZY] += 1
                continue
        act_list[r, kept] = q
        kept += 1
    for k in range(kept, n_act):
        act_list[r, k] = -1
    ranks.act_len[r] = kept
    if any_done:
        retire_finished(p, req, ranks, blocks, stats, r, t_ms)
    ranks.last_end_ms[r] = t_ms
    if ranks.cooldown[r] > 0:
        ranks.cooldown[r] -= 1


@helper
def attribute(req, q, n, g, pass_ms, solo):
    """A pass that computed part of q's prompt for the first time, alone in its worker's pass:
    its whole duration is q's own prefill time."""
    if solo and n > 0 and g == 0 and req.computed_before[q] < req.prompt_len[q]:
        if np.isnan(req.preempt_at_ms[q]):
            req.alone_ms[q] += pass_ms


@helper
def recovered(req, q, g, t_ms):
    """q emits its first token since a preemption: the time since then was lost to it."""
    lost = t_ms - req.preempt_at_ms[q]
    if g == 0:
        req.lost_first_ms[q] += lost
    else:
        req.lost_later_ms[q] += lost
    req.preempt_at_ms[q] = np.nan


@kernel
def _publish(req, blocks, q, r):
    """`kv.publish_owner_blocks` out of line: once a session turn (rare beside the per-pass
    code it sits in, which it would otherwise grow)."""
    kv.publish_owner_blocks(req, blocks, q, r, req.slot[q])


@helper
def retire_finished(p, req, ranks, blocks, stats, r, t_ms):
    """Drop finishing requests from the running list, in running order."""
    run_list = ranks.run_list
    kept = 0
    n_run = ranks.run_len[r]
    for k in range(n_run):
        q = kv.index(run_list[r, k])
        if req.finishing[q]:
            req.finishing[q] = False
            if p.role == Role.PREFILL:
                # P/D source held: the prompt is done but its KV stays until the transfer
                # releases it; the P/D loop routes it to a decode rank
                req.status[q] = ReqStatus.FINISHED
                req.terminal_ms[q] = t_ms
                ranks.held_list[r, ranks.held_len[r]] = q
                ranks.held_len[r] += 1
                continue
            if p.sessions and p.prefix_caching and sessions.has_next_turn(req, q):
                _publish(req, blocks, q, r)  # the next turn extends this conversation
            queues.free_request_kv(p, req, ranks, blocks, r, q)
            req.status[q] = ReqStatus.FINISHED
            req.terminal_ms[q] = t_ms
            queues.spawn_next(p, req, stats, q, t_ms)
            continue
        run_list[r, kept] = q
        kept += 1
    for k in range(kept, n_run):
        run_list[r, k] = -1
    ranks.run_len[r] = kept
