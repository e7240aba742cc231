"""The terminal tables. `render_summary` (the default): what a vLLM user reads first, in
`vllm bench serve`'s order (TTFT, TPOT, ITL, E2E as mean / median / p90 / p99, then the
throughputs), fitting an 80-column terminal. `render_table` (`--format aiperf`): AISimulate's
AIPerf-style table, same rows and columns."""

from __future__ import annotations

LATENCY_ROWS = (
    ("TTFT", "ttft_ms"),
    ("TPOT", "tpot_ms"),
    ("ITL", "itl_ms"),
    ("E2E", "e2e_latency_ms"),
)
LATENCY_STATS = ("mean", "median", "p90", "p99")
THROUGHPUT_ROWS = (
    ("Request throughput (req/s)", "request_throughput_rps", "{:,.2f}"),
    ("Output token throughput (tok/s)", "output_throughput_tok_s", "{:,.2f}"),
    ("Total token throughput (tok/s)", "total_throughput_tok_s", "{:,.2f}"),
    ("Goodput (req/s)", "goodput_request_throughput_rps", "{:,.2f}"),
    ("Goodput output throughput (tok/s)", "goodput_output_throughput_tok_s", "{:,.2f}"),
    ("Successful requests", "completed_requests", "{:,d}"),
    ("Requests meeting the SLA", "goodput_completed_requests", "{:,d}"),
    ("Total input tokens", "total_input_tokens", "{:,d}"),
    ("Total generated tokens", "total_output_tokens", "{:,d}"),
    ("Duration (s)", "duration_ms", "{:,.2f}"),
    ("GPU hours", "gpu_hours", "{:,.4f}"),
    ("Active power per GPU (W)", "power_w", "{:,.1f}"),
)


def deployment_title(cfg) -> str:
    """model | GPU | backend version | mode with each role's parallel shape."""
    eng = cfg.engine
    backend = eng.backend + (f" {eng.backend_version}" if eng.backend_version else "")
    roles = [r for r in ("aggregated", "prefill", "decode") if r in (eng.workers or {})]
    shapes = []
    for role in roles:
        p = eng.workers[role].parallelism
        shape = f"TP{p.tensor}"
        for tag, n in (("PP", p.pipeline), ("DP", p.attention_data), ("EP", p.moe_expert)):
            if n and n > 1:
                shape += f" {tag}{n}"
        shape += f" x{p.replicas}"
        shapes.append(shape if role == "aggregated" else f"{role} {shape}")
    return f"{eng.model} | {eng.hardware} | {backend} | {eng.mode} {', '.join(shapes)}"


def render_summary(pred: dict, title: str = "") -> str:
    """The default terminal summary (at most 80 columns for one-line titles)."""
    head = ["ms", *LATENCY_STATS]
    rows = [
        [label, *(_ms(pred.get(f"{stat}_{key}")) for stat in LATENCY_STATS)]
        for label, key in LATENCY_ROWS
    ]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    widths[1:] = [max(w, 9) for w in widths[1:]]

    def line(cells: list[str]) -> str:
        rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([cells[0].ljust(widths[0]), *rest])

    out = [f"aisim | {title}" if title else "aisim", line(head)]
    out.append("-" * len(out[-1]))
    out += [line(r) for r in rows]
    out.append("")
    shown = [
        (label, key, form) for label, key, form in THROUGHPUT_ROWS if pred.get(key) is not None
    ]
    pad = max(len(label) for label, _, _ in shown) + 2
    for label, key, form in shown:
        value = pred[key] / 1000.0 if key == "duration_ms" else pred[key]
        out.append(f"{label + ':':<{pad}}{form.format(value)}")
    if pred.get("power_w") is None:
        out.append(f"{'Active power per GPU (W):':<{pad}}unavailable (op-level timing reports it)")
    verdict = (pred.get("latency_attribution") or {}).get("verdict")
    if verdict:
        out.append(f"{'Where TTFT went:':<{pad}}{verdict}")
    for role, prov in sorted((pred.get("prediction_provenance") or {}).items()):
        out.append(
            f"Timing ({role}): {prov.get('estimator')}, {prov.get('timing_source')}"
            + (f", data {prov['data_version']}" if prov.get("data_version") else "")
        )
    return "\n".join(out)


def _ms(v) -> str:
    return "N/A" if v is None else f"{float(v):,.2f}"


ROWS = (
    ("Time to First Token (ms)", "ttft_ms", True),
    ("Time to Second Token (ms)", "ttst_ms", True),
    ("Request Latency (ms)", "e2e_latency_ms", True),
    ("Inter Token Latency (ms)", "itl_ms", True),
    (
        "Output Token Throughput Per User (tokens/sec/user)",
        "output_token_throughput_per_user",
        True,
    ),
    ("Output Token Throughput (tokens/sec)", "output_throughput_tok_s", False),
    ("Request Throughput (requests/sec)", "request_throughput_rps", False),
    ("Request Count (requests)", "completed_requests", False),
)
# evaluation.sla runs only: AISimulate's table leaves goodput out, but it is the figure an SLA
# study reads first, so aisim shows it under the request count (prediction.json has it too)
GOODPUT_ROWS = (
    ("Goodput Request Throughput (requests/sec)", "goodput_request_throughput_rps", False),
    ("Goodput Output Throughput (tokens/sec)", "goodput_output_throughput_tok_s", False),
    ("Goodput Request Count (requests)", "goodput_completed_requests", False),
)
COLUMNS = ("avg", "min", "max", "p99", "p90", "p75", "std")
_STAT_KEYS = ("mean", "min", "max", "p99", "p90", "p75", "std")


def _num(v) -> str:
    return "N/A" if v is None else f"{float(v):,.2f}"


def render_table(pred: dict, role: str = "aggregated") -> str:
    rows = []
    shown = ROWS + GOODPUT_ROWS if "goodput_completed_requests" in pred else ROWS
    for label, key, dist in shown:
        if dist:
            cells = [_num(pred.get(f"{s}_{key}")) for s in _STAT_KEYS]
        else:
            cells = [_num(pred.get(key))] + ["N/A"] * 6
        rows.append([label, *cells])
    unavailable = "unavailable (energy provider or topology unsupported)"
    rows.append(["Active Power per GPU (W) [power_w]", unavailable] + ["N/A"] * 6)
    rows.append(["Power Data Coverage (%) [power_coverage]", unavailable] + ["N/A"] * 6)
    header = ["Metric", *COLUMNS]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        rest = zip(cells[1:], widths[1:], strict=True)
        parts = [cells[0].ljust(widths[0])] + [c.rjust(w) for c, w in rest]
        return "┃ " + " ┃ ".join(parts) + " ┃"

    bar = "━╋━".join("━" * w for w in widths)
    out = [
        "aisim | LLM Metrics",
        "┏━" + "━┳━".join("━" * w for w in widths) + "━┓",
        line(header),
        "┡━" + bar.replace("╋", "╇") + "━┩",
    ]
    out += [line(r) for r in rows]
    out.append("└━" + "━┴━".join("━" * w for w in widths) + "━┘")
    by_role = pred.get("prediction_provenance", {})
    out.append(f"Wall Time (ms): {pred.get('wall_time_ms', 0.0):.2f}")
    out.append(f"Prefix Cache Reused Ratio: {pred.get('prefix_cache_reused_ratio') or 0.0:.2f}")
    out.append(
        "First Admission Prefix Cache Reused Ratio: "
        f"{pred.get('first_admission_prefix_cache_reused_ratio') or 0.0:.2f}"
    )
    # a disaggregated run has one provenance per role (prefill, decode)
    for name in [role] if role in by_role else sorted(by_role):
        prov = by_role[name]
        dv = prov.get("data_version") or (
            f"unavailable ({prov.get('data_version_unavailable_reason', '')})"
        )
        out.append(
            f"Timing ({name}): estimator={prov.get('estimator')}; "
            f"source={prov.get('timing_source')}; data_version={dv}"
        )
    return "\n".join(out)
