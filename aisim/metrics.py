"""Per-request arrays and streamed gap statistics -> AISimulate's summary (docs/rules.md 11).

One-sample-per-request distributions (TTFT, TTST, TPOT, E2E) are exact: left-to-right float sums,
population std, nearest-rank percentiles `sorted[round((n-1) p / 100)]`. Per-gap distributions
(ITL, per-user throughput) report exact mean/std/min/max from the streamed Welford sums and
percentiles from the DDSketch key counts.
"""

from __future__ import annotations

import math

import numpy as np

from aisim.kernels.codes import (
    ACC_M2,
    ACC_MAX,
    ACC_MIN,
    ACC_SUM,
    CNT_COMMITTED,
    CNT_N,
    CNT_ZERO,
    SKETCH_OFFSET,
    ReqStatus,
)

PERCENTILES = (("median", 50), ("p75", 75), ("p90", 90), ("p95", 95), ("p99", 99))
SKETCH_ALPHA = 0.001  # the DDSketch of kernels/tokstats.py: a sketched value is within 0.1 %
_GAMMA = 1.0 + 2.0 * SKETCH_ALPHA / (1.0 - SKETCH_ALPHA)
LOG_GAMMA = math.log1p(2.0 * SKETCH_ALPHA / (1.0 - SKETCH_ALPHA))
STAT_KEYS = ("mean", "min", "max", "std", "median", "p75", "p90", "p95", "p99")
STAT_NAMES = (
    "ttft_ms",
    "ttst_ms",
    "tpot_ms",
    "e2e_latency_ms",
    "itl_ms",
    "output_token_throughput_per_user",
)


def _round_half_away(x: float) -> int:
    """Rust's f64::round (ties away from zero), as AISimulate's percentile ranks use."""
    return math.floor(x + 0.5)


def _exact_stats(name: str, values: np.ndarray) -> dict:
    """Stats of a fresh sample array (reordered in place: one copy of a 10 M sample is enough)."""
    n = len(values)
    out: dict = {}
    if n == 0:
        for key in STAT_KEYS:
            out[f"{key}_{name}"] = 0.0
        return out
    # cumsum accumulates left to right (np.sum is pairwise): AISimulate's mean to the bit
    mean = float(np.cumsum(values)[-1]) / n
    dev = values - mean
    dev *= dev
    std = math.sqrt(max(0.0, float(np.mean(dev))))
    del dev
    # only these order statistics are reported: a multi-kth partition is ~2x faster than a sort,
    # and leaving min / max to the (vectorized) reductions takes two selections out of it
    out[f"mean_{name}"] = mean
    out[f"min_{name}"] = float(values.min())
    out[f"max_{name}"] = float(values.max())
    ranks = [_round_half_away((n - 1) * pct / 100.0) for _, pct in PERCENTILES]
    values.partition(sorted(set(ranks)))
    out[f"std_{name}"] = std
    for (key, _), rank in zip(PERCENTILES, ranks, strict=True):
        out[f"{key}_{name}"] = float(values[rank])
    return out


def sketch_value(key: int) -> float:
    """The value a DDSketch key stands for (the middle of its bucket)."""
    return math.exp(key * LOG_GAMMA) * (2.0 / (1.0 + _GAMMA))


def _sketch_stats(name: str, acc: np.ndarray, cnt: np.ndarray, bins: np.ndarray) -> dict:
    n = int(cnt[CNT_N])
    out: dict = {}
    if n == 0:
        for key in STAT_KEYS:
            out[f"{key}_{name}"] = 0.0
        return out
    out[f"mean_{name}"] = float(acc[ACC_SUM]) / n
    out[f"min_{name}"] = float(acc[ACC_MIN])
    out[f"max_{name}"] = float(acc[ACC_MAX])
    out[f"std_{name}"] = math.sqrt(max(0.0, float(acc[ACC_M2]) / n))
    zero = int(cnt[CNT_ZERO])
    nz = np.nonzero(bins)[0]
    cum = np.cumsum(bins[nz])
    span = n - 1
    for key, pct in PERCENTILES:
        if n == 1:
            out[f"{key}_{name}"] = float(acc[ACC_MIN])
            continue
        rank = _round_half_away(span * pct / 100.0)
        q = 1.0 if rank >= span else (rank + 0.5) / span
        pos = int(q * (n - 1))
        if pos < zero:
            out[f"{key}_{name}"] = 0.0
            continue
        idx = int(np.searchsorted(cum, pos - zero, side="right"))
        out[f"{key}_{name}"] = sketch_value(int(nz[idx]) - SKETCH_OFFSET)
    return out


def request_samples(req, completed):
    """(name, samples) of TTFT / TTST / TPOT / E2E over completed requests in request order,
    one distribution at a time, so a summary holds one sample array at once.
    `completed`: request indices, or slice(None) when every request completed (no copies)."""
    ntok = req.num_generated[completed]
    has1 = ntok >= 1
    has2 = ntok >= 2
    all1, all2 = bool(has1.all()), bool(has2.all())
    arrival = req.arrival_ms[completed]
    first = req.first_token_ms[completed]
    last = req.last_token_ms[completed]
    ttft = first - arrival
    yield "ttft_ms", ttft if all1 else ttft[has1]
    del ttft
    ttst = req.second_token_ms[completed] - first
    yield "ttst_ms", ttst if all2 else ttst[has2]
    del ttst
    if all2:
        tpot = last - first
        tpot /= ntok - 1
    else:
        tpot = (last[has2] - first[has2]) / (ntok[has2] - 1)
    yield "tpot_ms", tpot
    del tpot
    e2e = last - arrival
    yield "e2e_latency_ms", e2e if all1 else e2e[has1]


GOODPUT_KEYS = (
    "goodput_completed_requests",
    "goodput_request_throughput_rps",
    "goodput_output_throughput_tok_s",
)


def sla_is_set(sla) -> bool:
    """AISimulate reports goodput only when at least one SLA bound is given (`sla: {}` is none)."""
    return sla is not None and any(
        getattr(sla, key) is not None for key in ("ttft_ms", "itl_ms", "e2e_ms")
    )


def goodput_fields(req, completed, duration_s: float, sla) -> dict:
    """The goodput_* fields over the completed requests (docs/rules.md 11.6).

    A request is good when every given bound holds, inclusively: TTFT <= ttft_ms, E2E <= e2e_ms,
    and its mean inter-token latency (E2E - TTFT) / (output tokens - 1) <= itl_ms, the ITL bound
    not applying to 1-token outputs. The mean is formed from the two latencies, not from
    last - first token time: the two differ in the last bit and AISimulate classifies by the
    former (oracle runs with the bound set to exactly one of the two values). Output tokens are
    the tokens generated (a context-limited output counts its truncated length); rejected and
    unfinished requests are never good. Rates divide by the run's duration like the other
    throughputs."""
    arrival = req.arrival_ms[completed]
    ttft = np.maximum(req.first_token_ms[completed] - arrival, 0.0)
    e2e = np.maximum(req.last_token_ms[completed] - arrival, 0.0)
    ntok = req.num_generated[completed]
    good = np.ones(len(ntok), dtype=np.bool_)
    if sla.e2e_ms is not None:
        good &= e2e <= sla.e2e_ms
    if sla.ttft_ms is not None:
        good &= ttft <= sla.ttft_ms
    if sla.itl_ms is not None:
        gaps = np.maximum(ntok - 1, 1).astype(np.float64)
        mean_itl = (e2e - ttft) / gaps
        good &= (ntok <= 1) | (mean_itl <= sla.itl_ms)
    n_good = int(np.count_nonzero(good))
    good_tokens = int(ntok[good].sum())
    return {
        "goodput_completed_requests": n_good,
        "goodput_request_throughput_rps": n_good / duration_s,
        "goodput_output_throughput_tok_s": good_tokens / duration_s,
    }


def summarize(result, sla=None) -> dict:
    """The deterministic prediction.json fields of a run (aggregated or P/D), read through its
    pools (result.pools) and its request view (result.requests); `sla` (the config's
    evaluation.sla, or None) adds the goodput fields.

    Latency statistics come from the tokens the client sees (in P/D the decode pool's: TTFT =
    first decode token - arrival). Every pool is billed until the run's last processed event.
    """
    pools = result.pools
    req = result.requests
    stats = result.stats
    status = req.status
    done = (status == ReqStatus.FINISHED) & (req.num_admissions > 0)
    n_done = int(np.count_nonzero(done))
    # every request completed (the usual case): views instead of index copies
    completed = slice(None) if n_done == len(status) else np.nonzero(done)[0]
    del done
    arrived = int(np.count_nonzero(status != ReqStatus.NOT_ARRIVED))
    out: dict = {"num_requests": arrived, "completed_requests": n_done}
    total_in = int(req.prompt_len[completed].sum())
    total_out = int(req.num_generated[completed].sum())
    duration_ms = float(req.terminal_ms[completed].max()) if n_done else 0.0
    duration_s = max(duration_ms / 1000.0, 1e-9)
    out["total_input_tokens"] = total_in
    out["total_output_tokens"] = total_out
    out["processed_tokens"] = total_in + total_out
    out["committed_prefill_tokens"] = int(stats.counters[CNT_COMMITTED])
    if result.traffic.workload.max_time_ms != float("inf"):
        # passes still in flight at the cut-off: the kernels counted their prompt tokens when
        # scheduled, AISimulate counts them when the pass ends, which these never do
        out["committed_prefill_tokens"] -= sum(
            _open_pass_prefill(pool.ranks) for pool in pools if pool.role != "decode"
        )
    reused_max = int(req.reused_max[completed].sum())
    reused_first = int(req.reused_first[completed].sum())
    out["prefix_cache_reused_ratio"] = reused_max / total_in if total_in else 0.0
    out["first_admission_prefix_cache_reused_ratio"] = reused_first / total_in if total_in else 0.0
    out["kv_eviction_policy"] = "lru"
    # unfloored, unlike the throughputs' divisor: a run that ends at 0 ms bills 0 s
    other_ms = result.side_events_end_ms
    clock_s = _billed_clock_ms(req, [pool.ranks for pool in pools], other_ms) / 1000.0
    billed = {"prefill": (0, 0.0), "decode": (0, 0.0)}
    for pool in pools:
        # the aggregated pool reports under the decode fields (AISimulate's convention)
        billed["prefill" if pool.role == "prefill" else "decode"] = (
            pool.spec.gpus_per_worker,
            pool.spec.replicas * clock_s,
        )
    (pg, prefill_s), (dg, decode_s) = billed["prefill"], billed["decode"]
    out["prefill_gpus_per_worker"] = pg
    out["decode_gpus_per_worker"] = dg
    out["prefill_worker_seconds"] = prefill_s
    out["decode_worker_seconds"] = decode_s
    out["gpu_hours"] = (prefill_s * pg + decode_s * dg) / 3600.0
    if n_done == 0:
        for key in (
            "duration_ms",
            "request_throughput_rps",
            "input_throughput_tok_s",
            "output_throughput_tok_s",
            "total_throughput_tok_s",
        ):
            out[key] = None
        for name in STAT_NAMES:
            for key in STAT_KEYS:
                out[f"{key}_{name}"] = None
        out["num_ttft_samples"] = out["num_e2e_latency_samples"] = out["num_tpot_samples"] = 0
        if sla_is_set(sla):
            # no duration to divide by: the rates are null like the other throughputs
            out.update(dict.fromkeys(GOODPUT_KEYS[1:]), goodput_completed_requests=0)
        out["duration_ms"] = 0.0
        out["prediction_status"] = "invalid"
        out["stop_reason"] = "no_completed_requests"
        out["diagnostic"] = (
            "No requests completed; serving latency and throughput are unavailable. Check KV "
            "capacity against request lengths, context limits, and traffic stop limits."
        )
        return out
    out["duration_ms"] = duration_ms
    out["request_throughput_rps"] = n_done / duration_s
    out["input_throughput_tok_s"] = total_in / duration_s
    out["output_throughput_tok_s"] = total_out / duration_s
    out["total_throughput_tok_s"] = (total_in + total_out) / duration_s
    if sla_is_set(sla):
        out.update(goodput_fields(req, completed, duration_s, sla))
    ntok = req.num_generated[completed]
    with_first = int(np.count_nonzero(ntok >= 1))
    out["num_ttft_samples"] = with_first
    out["num_e2e_latency_samples"] = with_first
    out["num_tpot_samples"] = int(np.count_nonzero(ntok >= 2))
    del ntok
    for name, values in request_samples(req, completed):
        out.update(_exact_stats(name, values))
        del values
    out.update(_sketch_stats("itl_ms", stats.acc[0], stats.cnt[0], stats.bins[0]))
    out.update(
        _sketch_stats("output_token_throughput_per_user", stats.acc[1], stats.cnt[1], stats.bins[1])
    )
    return out


def _billed_clock_ms(req, rank_states, other_events_ms: float = 0.0) -> float:
    """Virtual time of a run's last processed event (a pass end of any rank, an arrival, a
    rejection, or another event such as a transfer or tokenization end): workers are billed
    until then, not until the last completion (a rejection after it, or a cut-off, extends the
    bill)."""
    arrived = req.status != ReqStatus.NOT_ARRIVED
    last_arrival = float(req.arrival_ms[arrived].max()) if arrived.any() else 0.0
    rejected = req.status >= ReqStatus.REJECTED  # rejected or failed
    last_rejection = float(req.terminal_ms[rejected].max()) if rejected.any() else 0.0
    last_end = max(float(ranks.last_end_ms.max()) for ranks in rank_states if ranks is not None)
    return max(last_end, last_arrival, last_rejection, other_events_ms)


def _open_pass_prefill(ranks) -> int:
    """Prompt tokens committed by a pool's passes still in flight at the cut-off (the kernels
    keep each rank's count of its latest pass: a request a burst reservation preempted after
    scheduling left the running list but its chunk stays counted)."""
    return int(ranks.pass_prefill[ranks.in_pass].sum())


def power_fields() -> dict:
    """Energy fields of a run without an energy provider (fixed / polynomial timing)."""
    from aisim.timing.energy import unsupported_report

    power_w, coverage, diagnostics = unsupported_report()
    return {"power_w": power_w, "power_coverage": coverage, "power_diagnostics": diagnostics}
