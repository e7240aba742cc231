"""The terminal table: the metrics AISimulate's AIPerf-style table shows, same rows and columns."""

from __future__ import annotations

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
