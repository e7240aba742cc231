"""Where each request's latency went (docs/attribution.md): its TTFT and E2E split into parts
that add up to them, from the per-request times and the kernels' attribution fields
(`aisim/state.py`: alone_ms, lost_first_ms, lost_later_ms; kept when records are captured).

TTFT = tokenizing + queued + prefill + interference + preempted + kv_transfer + handoff_wait
       + first_decode
E2E  = TTFT + decode + decode_preempted
"""

from __future__ import annotations

import numpy as np

# (column, meaning); the first eight add up to the TTFT, all ten to the E2E latency
TTFT_PARTS = (
    ("ttft_tokenizing_ms", "engine.tokenization: arrival to its tokenization end (else 0)"),
    (
        "ttft_queued_ms",
        "tokenized (arrival without a tokenizer) to the start of its first pass (prefill pool "
        "in P/D)",
    ),
    (
        "ttft_prefill_ms",
        "passes that computed its prompt with no other request in the worker's pass",
    ),
    (
        "ttft_interference_ms",
        "the rest of its prompt's time: passes shared with other requests, and passes it waited "
        "through while admitted (budget spent by others, deferred prefills)",
    ),
    ("ttft_preempted_ms", "from a preemption before its first token to its next token"),
    ("ttft_kv_transfer_ms", "P/D: the KV transfer from the prefill to the decode pool"),
    (
        "ttft_handoff_wait_ms",
        "P/D: waiting for the decode-side reservation, for activation after the transfer, and "
        "for the first decode pass",
    ),
    ("ttft_first_decode_ms", "P/D: the decode pass that emits the first token"),
)
DECODE_PARTS = (
    ("decode_ms", "first to last token, less the time lost to preemptions after the first"),
    ("decode_preempted_ms", "from each preemption after its first token to its next token"),
)
PARTS = TTFT_PARTS + DECODE_PARTS
# the short names of the terminal verdict ("p99 TTFT: 71 % queued")
LABELS = {
    "ttft_tokenizing_ms": "tokenizing",
    "ttft_queued_ms": "queued",
    "ttft_prefill_ms": "prefill",
    "ttft_interference_ms": "interference",
    "ttft_preempted_ms": "preempted",
    "ttft_kv_transfer_ms": "KV transfer",
    "ttft_handoff_wait_ms": "handoff wait",
    "ttft_first_decode_ms": "first decode pass",
}
PERCENTILES = (50, 90, 99)


def request_parts(result) -> dict[str, np.ndarray] | None:
    """Every request's parts, arrays of N (NaN where a request has no first token), or None when
    the run kept no attribution (records not captured)."""
    first = result.pools[0].req
    if len(first.alone_ms) != len(first.prompt_len) or len(first.prompt_len) == 0:
        return None
    req = result.requests
    arrival = req.arrival_ms
    first_token = req.first_token_ms
    last_token = req.last_token_ms
    zero = np.zeros(len(arrival))
    if len(result.pools) == 1:
        prompt_done = first_token
        lost_first = first.lost_first_ms
        transfer = handoff = first_decode = zero
        lost_later = first.lost_later_ms
        admit = first.first_admit_ms
    else:
        rp, rd, pd = first, result.pools[-1].req, result.handoff
        admit = rp.first_admit_ms
        prompt_done = pd.held_ms
        lost_first = rp.lost_first_ms
        transfer = pd.xfer_end_ms - pd.reserved_ms
        handoff = (pd.reserved_ms - pd.held_ms) + (pd.activated_ms - pd.xfer_end_ms)
        handoff = handoff + (rd.first_admit_ms - pd.activated_ms)
        first_decode = first_token - rd.first_admit_ms - rd.lost_first_ms
        lost_first = lost_first + rd.lost_first_ms
        lost_later = rd.lost_later_ms
    alone = first.alone_ms
    own_lost = first.lost_first_ms
    # a request joins its rank's queue when tokenized (docs/rules.md 2.3)
    queued_from = first.tokenized_ms if result.pools[0].spec.tokenization[0] else arrival
    parts = {
        "ttft_tokenizing_ms": queued_from - arrival,
        "ttft_queued_ms": admit - queued_from,
        "ttft_prefill_ms": alone.copy(),
        "ttft_interference_ms": prompt_done - admit - alone - own_lost,
        "ttft_preempted_ms": lost_first.copy(),
        "ttft_kv_transfer_ms": transfer + zero,
        "ttft_handoff_wait_ms": handoff + zero,
        "ttft_first_decode_ms": first_decode + zero,
        "decode_ms": last_token - first_token - lost_later,
        "decode_preempted_ms": lost_later.copy(),
    }
    missing = np.isnan(first_token)
    for values in parts.values():
        values[missing] = np.nan
    return parts


def tail_shares(parts: dict[str, np.ndarray], ttft: np.ndarray) -> dict[str, dict[str, float]]:
    """For p50 / p90 / p99 of the TTFT: each TTFT part's share of the TTFT summed over the
    requests at or above that percentile (nearest rank), as a fraction. Empty without TTFTs."""
    ok = ~np.isnan(ttft)
    values = ttft[ok]
    if len(values) == 0:
        return {}
    ordered = np.sort(values)
    out = {}
    for pct in PERCENTILES:
        rank = max(1, int(np.ceil(pct / 100 * len(ordered))))
        threshold = ordered[rank - 1]
        tail = ok & (ttft >= threshold)
        total = float(ttft[tail].sum())
        out[f"p{pct}"] = {
            name: (float(parts[name][tail].sum()) / total if total > 0 else 0.0)
            for name, _ in TTFT_PARTS
        }
    return out


def verdict(shares: dict[str, dict[str, float]]) -> str | None:
    """One line naming the largest part of the p99 TTFT tail, e.g. "p99 TTFT: 71 % queued"."""
    tail = shares.get("p99")
    if not tail:
        return None
    name = max(tail, key=lambda k: (tail[k], k))
    return f"p99 TTFT: {100 * tail[name]:.0f} % {LABELS[name]}"


def summary_field(parts: dict[str, np.ndarray] | None, req) -> dict:
    """prediction.json's `latency_attribution` ({} when no attribution was kept): the TTFT
    tail shares of the completed requests and the verdict line."""
    if parts is None:
        return {}
    from aisim.kernels.codes import ReqStatus

    done = req.status == ReqStatus.FINISHED
    ttft = np.where(done, req.first_token_ms - req.arrival_ms, np.nan)
    shares = tail_shares(parts, ttft)
    return {"latency_attribution": {"ttft_tail_shares": shares, "verdict": verdict(shares)}}
