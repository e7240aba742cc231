"""A prediction as the result file of `vllm bench serve --save-result` (docs/vllm-bench.md).

Field names, units and definitions follow vLLM's benchmark client (vllm/benchmarks/serve.py):
per-request times in seconds, summary latencies in ms, statistics over successful requests with
numpy's mean, population std and linearly interpolated percentiles. aisim's own summary uses
AISimulate's nearest-rank percentiles instead (docs/rules.md 11.3), so the statistics here are
recomputed from the per-request records, never copied from prediction.json. Where aisim cannot
give vLLM's exact value (ITL percentiles, the per-second token peak, per-chunk arrays) the
docs page says what is given instead, or why the field is left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from aisim.errors import AisimError
from aisim.kernels.codes import (
    ACC_M2,
    ACC_MAX,
    ACC_MIN,
    ACC_SUM,
    CNT_N,
    CNT_ZERO,
    SKETCH_OFFSET,
    ReqStatus,
)
from aisim.metrics import LOG_GAMMA as _LOG_GAMMA  # noqa: F401  (tests build sketch keys)
from aisim.metrics import SKETCH_ALPHA, sketch_value  # noqa: F401

# vLLM's --percentile-metrics default for generative models, and every metric aisim can give
DEFAULT_METRICS = ("ttft", "tpot", "itl")
METRICS = ("ttft", "tpot", "itl", "e2el")
# headings and short names of vLLM's printout, in its section order
_SECTIONS = {
    "ttft": ("TTFT", "Time to First Token"),
    "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
    "itl": ("ITL", "Inter-token Latency"),
    "e2el": ("E2EL", "End-to-end Latency"),
}
BACKEND = "aisim"  # no HTTP endpoint took part: a value no measured file carries
# the record fields a result reads (requests.jsonl keys and requests.parquet columns alike)
RECORD_FIELDS = (
    "arrival_time_ms",
    "terminal_time_ms",
    "ttft_ms",
    "e2e_latency_ms",
    "input_length",
    "output_length",
    "terminal_status",
    "admission_count",
)


@dataclass(frozen=True)
class PerRequest:
    """The terminal requests of a run in record order (arrival, then creation), which is the
    order vLLM's client dispatches and lists them in. Times in ms; NaN where a request has no
    token."""

    arrival_ms: np.ndarray
    terminal_ms: np.ndarray
    ttft_ms: np.ndarray
    e2e_ms: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    completed: np.ndarray  # bool: vLLM's `success`
    status: tuple[str, ...]  # completed | rejected | failed

    @classmethod
    def from_records(cls, records) -> PerRequest:
        """From aisim.output.records.RequestRecords: the arrays, not the (costly) dicts."""
        req, idx = records.req, records.order
        arrival = req.arrival_ms[idx]
        status = req.status[idx]
        # the records' and the summary's rule for a completed request (docs/rules.md 11.1)
        done = (status == ReqStatus.FINISHED) & (req.num_admissions[idx] > 0)
        names = {int(ReqStatus.FINISHED): "completed", int(ReqStatus.REJECTED): "rejected"}
        return cls(
            arrival_ms=arrival,
            terminal_ms=req.terminal_ms[idx],
            ttft_ms=req.first_token_ms[idx] - arrival,
            e2e_ms=req.last_token_ms[idx] - arrival,
            input_len=req.prompt_len[idx].astype(np.int64),
            output_len=req.num_generated[idx].astype(np.int64),
            completed=done,
            status=tuple(names.get(s, "failed") for s in status.tolist()),
        )

    @classmethod
    def from_columns(cls, cols: dict) -> PerRequest:
        """From the RECORD_FIELDS columns of requests.jsonl / requests.parquet (lists)."""

        def floats(name):
            return np.array([np.nan if v is None else v for v in cols[name]], dtype=np.float64)

        status = tuple(cols["terminal_status"])
        done = np.array(status, dtype=object) == "completed"
        done &= np.asarray(cols["admission_count"], dtype=np.int64) > 0
        return cls(
            arrival_ms=floats("arrival_time_ms"),
            terminal_ms=floats("terminal_time_ms"),
            ttft_ms=floats("ttft_ms"),
            e2e_ms=floats("e2e_latency_ms"),
            input_len=np.asarray(cols["input_length"], dtype=np.int64),
            output_len=np.asarray(cols["output_length"], dtype=np.int64),
            completed=done.astype(bool),
            status=status,
        )

    def __len__(self) -> int:
        return len(self.arrival_ms)

    def duration_s(self) -> float:
        """vLLM's benchmark duration: from the start until the last request answered, whether
        it succeeded or not (arrivals count from 0 ms; floored at 1 ns like aisim's divisor)."""
        last = float(self.terminal_ms.max()) if len(self) else 0.0
        return max(last / 1000.0, 1e-9)

    def samples(self) -> dict[str, np.ndarray]:
        """Per-request TTFT, TPOT and E2EL samples (ms) of the successful requests."""
        ok = self.completed & ~np.isnan(self.ttft_ms)
        ttft, e2e, n = self.ttft_ms[ok], self.e2e_ms[ok], self.output_len[ok]
        many = n > 1
        # vLLM: (latency - ttft) / (output_len - 1), only for outputs of 2+ tokens
        tpot = (e2e[many] - ttft[many]) / (n[many] - 1)
        return {"ttft": ttft, "tpot": tpot, "e2el": e2e}

    def peak_concurrency(self) -> int:
        """Most successful requests in flight at once, over half-open [arrival, arrival + e2e)
        intervals: an end and a start at the same instant do not overlap (vLLM's sweep)."""
        ok = self.completed & ~np.isnan(self.e2e_ms)
        start = self.arrival_ms[ok]
        times = np.concatenate([start, start + self.e2e_ms[ok]])
        deltas = np.concatenate([np.ones(len(start), np.int64), -np.ones(len(start), np.int64)])
        order = np.lexsort((deltas, times))  # by time, ends (-1) first on a tie
        running = np.cumsum(deltas[order])
        return int(max(0, running.max())) if len(running) else 0

    def goodput_count(
        self, ttft: float | None = None, tpot: float | None = None, e2el: float | None = None
    ) -> int:
        """Successful requests within every given bound (ms), inclusively, as vLLM's
        `--goodput ttft:X tpot:Y e2el:Z` counts them: a 1-token output has TPOT 0."""
        ok = self.completed & ~np.isnan(self.ttft_ms)
        t, e, n = self.ttft_ms[ok], self.e2e_ms[ok], self.output_len[ok]
        good = np.ones(len(t), dtype=bool)
        if ttft is not None:
            good &= t <= ttft
        if tpot is not None:
            per_token = np.where(n > 1, (e - t) / np.maximum(n - 1, 1), 0.0)
            good &= per_token <= tpot
        if e2el is not None:
            good &= e <= e2el
        return int(np.count_nonzero(good))


@dataclass(frozen=True)
class ItlStats:
    """The run's streamed inter-token gaps (kernels/tokstats.py, row 0: ms) read as vLLM's
    chunk gaps: a zero gap is a token stamped at the same instant as the one before it (an MTP
    burst, which vLLM's client receives as one chunk), so zero gaps are left out."""

    total: float  # sum of every gap, ms (zero gaps add nothing)
    m2: float  # Welford M2 over every gap, zeros included
    n_all: int
    zeros: int
    min_all: float
    max_all: float
    bins: np.ndarray  # DDSketch key counts of the positive gaps

    @classmethod
    def from_stats(cls, stats) -> ItlStats:
        return cls(
            total=float(stats.acc[0, ACC_SUM]),
            m2=float(stats.acc[0, ACC_M2]),
            n_all=int(stats.cnt[0, CNT_N]),
            zeros=int(stats.cnt[0, CNT_ZERO]),
            min_all=float(stats.acc[0, ACC_MIN]),
            max_all=float(stats.acc[0, ACC_MAX]),
            bins=np.asarray(stats.bins[0]),
        )

    @property
    def n(self) -> int:
        """Gaps between chunks: the positive gaps."""
        return self.n_all - self.zeros

    def mean(self) -> float:
        return self.total / self.n if self.n else 0.0

    def std(self) -> float:
        """Population std of the positive gaps from the all-gap moments: taking z zeros out of
        n_all gaps of sum S lowers M2 by S^2 z / (n n_all)."""
        n = self.n
        if n == 0:
            return 0.0
        m2 = self.m2
        if self.zeros:
            m2 -= self.total * self.total * self.zeros / (n * self.n_all)
        return math.sqrt(max(0.0, m2 / n))

    def percentile(self, p: float) -> float:
        """np.percentile's linear interpolation between the two order statistics around rank
        (n - 1) p / 100, each read as its sketch bucket's value (within alpha of the gap, so
        the interpolation is too) and kept within the exact [min, max] of the positive gaps."""
        n = self.n
        if n == 0:
            return 0.0
        # numpy's own arithmetic (quantile p / 100, its two-sided lerp), so that gaps the
        # sketch holds exactly give np.percentile's value to the bit
        rank = (n - 1) * (p / 100.0)
        lo = min(math.floor(rank), n - 1)
        t = rank - lo
        a, b = self._order_stat(lo), self._order_stat(min(lo + 1, n - 1))
        return b - (b - a) * (1.0 - t) if t >= 0.5 else a + (b - a) * t

    def _order_stat(self, k: int) -> float:
        nz = np.nonzero(self.bins)[0]
        cum = np.cumsum(self.bins[nz])
        key = int(nz[int(np.searchsorted(cum, k, side="right"))]) - SKETCH_OFFSET
        value = sketch_value(key)
        # the exact min is the positive minimum only when no gap was zero
        low = self.min_all if self.zeros == 0 else 0.0
        return min(max(value, low), self.max_all)


def p_word(p: float) -> str:
    """vLLM's key suffix of a percentile: 99 -> "99", 99.9 -> "99.9"."""
    return str(int(p)) if int(p) == p else str(p)


def stats_ms(values: np.ndarray, percentiles) -> dict[str, float]:
    """mean, median, std and percentiles as vLLM forms them (0.0 for an empty sample)."""
    v = values if len(values) else np.zeros(1)
    out = {
        "mean": float(np.mean(v)),
        "median": float(np.median(v)),
        "std": float(np.std(v)),
    }
    for p in percentiles:
        out[f"p{p_word(p)}"] = float(np.percentile(v, p))
    return out


def itl_stats_ms(itl: ItlStats, percentiles) -> dict[str, float]:
    out = {"mean": itl.mean(), "median": itl.percentile(50.0), "std": itl.std()}
    for p in percentiles:
        out[f"p{p_word(p)}"] = itl.percentile(float(p))
    return out


def _check_metrics(metrics) -> tuple[str, ...]:
    metrics = tuple(metrics)
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise AisimError(f"percentile metric {unknown[0]!r}: aisim gives {', '.join(METRICS)}")
    return metrics


def _traffic_fields(pred) -> dict:
    """The setup keys vLLM writes ahead of the results: how the load maps to its flags."""
    w = pred.spec.workload
    model = pred.spec.client.model.model_id
    rate: float | str = "inf"  # vLLM writes an unlimited --request-rate as the string "inf"
    burstiness = 1.0  # vLLM's default; it has no effect at an unlimited rate
    if w.load == "poisson":
        rate = w.rate_per_s
    elif w.load == "constant_rate":
        # vLLM's constant gaps: burstiness inf (json.dump writes it as Infinity, as vLLM's does)
        rate, burstiness = w.rate_per_s, float("inf")
    return {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": BACKEND,
        "backend": BACKEND,
        "label": None,
        "model_id": model,
        "tokenizer_id": model,
        "num_prompts": int(pred.prediction["num_requests"]),
        "request_rate": rate,
        "burstiness": burstiness,
        "max_concurrency": w.concurrency if w.closed_loop else None,
    }


def result(pred, *, detailed: bool, percentiles=(99,), metrics=DEFAULT_METRICS) -> dict:
    """The dict `vllm bench serve --save-result` writes, for an aisim.prediction.Prediction
    run with per-request capture; `detailed` adds the per-request arrays --save-detailed keeps
    (`itls` left out: docs/vllm-bench.md). `metrics` is vLLM's --percentile-metrics (ttft,
    tpot, itl, e2el) and `percentiles` its --metric-percentiles."""
    metrics = _check_metrics(metrics)
    if pred.records is None:
        raise AisimError(
            "the vLLM bench result needs the per-request records: run the prediction with "
            "per-request capture (--capture-per-request)"
        )
    reqs = PerRequest.from_records(pred.records)
    itl = ItlStats.from_stats(pred.records.result.stats)
    closed = pred.spec.workload.closed_loop
    out = _traffic_fields(pred)
    out.update(summary_fields(pred.prediction, reqs, detailed=detailed, closed_loop=closed))
    out.update(latency_fields(reqs, itl, percentiles, metrics))
    return out


def summary_fields(prediction: dict, reqs: PerRequest, *, detailed: bool, closed_loop: bool):
    """duration .. rtfx in vLLM's key order, from the records (goodput: prediction.json's count
    of requests within evaluation.sla, which is vLLM's rule with ttft_ms -> ttft,
    itl_ms -> tpot and e2e_ms -> e2el)."""
    ok = reqs.completed
    dur = reqs.duration_s()
    completed = int(np.count_nonzero(ok))
    total_in = int(reqs.input_len[ok].sum())
    total_out = int(reqs.output_len[ok].sum())
    good = prediction.get("goodput_completed_requests")
    out: dict = {
        "duration": dur,
        "completed": completed,
        "failed": len(reqs) - completed,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": completed / dur,
        "request_goodput": None if good is None else good / dur,
        "output_throughput": total_out / dur,
        "total_token_throughput": (total_in + total_out) / dur,
    }
    # a request that failed has vLLM's defaults: no tokens, zero times, an error text
    zero = np.zeros(len(reqs))
    ttfts = np.where(ok, np.nan_to_num(reqs.ttft_ms), zero) / 1000.0
    latencies = np.where(ok, np.nan_to_num(reqs.e2e_ms), zero) / 1000.0
    if detailed:
        out["input_lens"] = reqs.input_len.tolist()
        out["output_lens"] = np.where(ok, reqs.output_len, 0).tolist()
        out["ttfts"] = ttfts.tolist()
    out["latencies"] = latencies.tolist()
    if detailed:
        out["start_times"] = (reqs.arrival_ms / 1000.0).tolist()
    # vLLM queues a closed loop's requests at its concurrency limit from the start: the wait is
    # the time until the request was sent, aisim's arrival; an open loop never waits
    out["queue_times"] = (reqs.arrival_ms / 1000.0 if closed_loop else zero).tolist()
    if detailed:
        out["generated_texts"] = [""] * len(reqs)  # aisim generates no text
        out["errors"] = ["" if s == "completed" else f"aisim: request {s}" for s in reqs.status]
    out["max_concurrent_requests"] = reqs.peak_concurrency()
    out["rtfx"] = 0.0  # no audio input
    return out


def latency_fields(reqs: PerRequest, itl: ItlStats | None, percentiles, metrics) -> dict:
    """mean_/median_/std_/pXX_ keys of each selected metric, in vLLM's order. `itl` None takes
    the ITL from nowhere: the caller fills it (aisim.compare reads prediction.json's)."""
    samples = reqs.samples()
    out: dict = {}
    for m in METRICS:
        if m not in metrics:
            continue
        if m == "itl":
            if itl is None:
                continue
            st = itl_stats_ms(itl, percentiles)
        else:
            st = stats_ms(samples[m], percentiles)
        for key, value in st.items():
            out[f"{key}_{m}_ms"] = value
    return out


def render(res: dict) -> str:
    """vLLM's "Serving Benchmark Result" block for the fields `res` holds."""
    lines = ["{:=^50}".format(" Serving Benchmark Result ")]

    def row(label: str, value, fmt: str = "") -> None:
        lines.append(f"{label:<40} {format(value, fmt):<10}")

    row("Successful requests:", res["completed"])
    row("Failed requests:", res["failed"])
    if res.get("max_concurrency") is not None:
        row("Maximum request concurrency:", res["max_concurrency"])
    rate = res.get("request_rate", "inf")
    if rate != "inf" and rate != float("inf"):
        row("Request rate configured (RPS):", rate, ".2f")
    row("Benchmark duration (s):", res["duration"], ".2f")
    row("Total input tokens:", res["total_input_tokens"])
    row("Total generated tokens:", res["total_output_tokens"])
    row("Request throughput (req/s):", res["request_throughput"], ".2f")
    if res.get("request_goodput") is not None:
        row("Request goodput (req/s):", res["request_goodput"], ".2f")
    row("Output token throughput (tok/s):", res["output_throughput"], ".2f")
    if "max_output_tokens_per_s" in res:
        row("Peak output token throughput (tok/s):", res["max_output_tokens_per_s"], ".2f")
    if "max_concurrent_requests" in res:
        row("Peak concurrent requests:", float(res["max_concurrent_requests"]), ".2f")
    row("Total token throughput (tok/s):", res["total_token_throughput"], ".2f")
    for m, (name, heading) in _SECTIONS.items():
        if f"mean_{m}_ms" not in res:
            continue
        lines.append(f"{heading:-^50}")
        row(f"Mean {name} (ms):", res[f"mean_{m}_ms"], ".2f")
        row(f"Median {name} (ms):", res[f"median_{m}_ms"], ".2f")
        suffix = f"_{m}_ms"
        for key, value in res.items():
            word = key[1 : -len(suffix)] if key.endswith(suffix) else ""
            if key.startswith("p") and word and is_number(word):
                row(f"P{word} {name} (ms):", value, ".2f")
    lines.append("=" * 50)
    return "\n".join(lines)


def is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
