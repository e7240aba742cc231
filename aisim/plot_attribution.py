"""`aisim plot RUN_DIR --kind attribution`: where the requests' TTFT went, from the attribution
columns of requests.parquet (docs/attribution.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from aisim.errors import AisimError
from aisim.output.attribution import LABELS, TTFT_PARTS, tail_shares

_BINS = 400  # requests ranked by TTFT are drawn as this many rank bins at most
_COLORS = {
    "ttft_queued_ms": "#d62728",
    "ttft_prefill_ms": "#1f77b4",
    "ttft_interference_ms": "#ff7f0e",
    "ttft_preempted_ms": "#9467bd",
    "ttft_kv_transfer_ms": "#2ca02c",
    "ttft_handoff_wait_ms": "#8c564b",
    "ttft_first_decode_ms": "#17becf",
}


def read_parts(requests) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """TTFT and its parts of the completed requests of a requests.parquet table."""
    names = [name for name, _ in TTFT_PARTS]
    missing = [n for n in names if n not in requests.column_names]
    if missing:
        raise AisimError(
            "plot --kind attribution: requests.parquet has no latency attribution columns "
            "(written by aisim predict --capture-per-request since schema version 3)"
        )
    status = np.array(requests.column("terminal_status").to_pylist())
    ttft = requests.column("ttft_ms").to_numpy(zero_copy_only=False).astype(float)
    keep = (status == "completed") & ~np.isnan(ttft)
    if not keep.any():
        raise AisimError("plot --kind attribution: no completed request to draw")
    parts = {
        n: requests.column(n).to_numpy(zero_copy_only=False).astype(float)[keep] for n in names
    }
    return ttft[keep], parts


def plot_attribution(requests, out_dir: Path, fmts, helpers, where: str) -> list[Path]:
    """Two panels: each TTFT part's share of the p50 / p90 / p99 tails, and the parts of every
    request ranked by TTFT (rank bins of means past _BINS requests). `helpers`: aisim.plot's
    (save, pyplot, plain)."""
    save, pyplot, plain = helpers
    plt = pyplot()
    ttft, parts = read_parts(requests)
    shown = [n for n, _ in TTFT_PARTS if np.any(parts[n] != 0)] or ["ttft_queued_ms"]
    shares = tail_shares(parts, ttft)
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(10, 7.5), gridspec_kw={"height_ratios": [1, 2]}
    )
    tails = list(shares)
    left = np.zeros(len(tails))
    for name in shown:
        width = np.array([100 * shares[t][name] for t in tails])
        top.barh(tails, width, left=left, color=_COLORS[name], label=LABELS[name])
        for y, (x0, w) in enumerate(zip(left, width, strict=True)):
            if w >= 8:  # a label only where it fits inside its bar
                top.text(x0 + w / 2, y, f"{w:.0f} %", ha="center", va="center", fontsize=8)
        left += width
    top.set_xlim(0, 100)
    top.set_xlabel("share of the TTFT of the requests at or above the percentile (%)")
    top.invert_yaxis()
    top.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)

    order = np.argsort(ttft, kind="stable")
    rank = np.arange(1, len(order) + 1) / len(order) * 100
    series = [parts[n][order] for n in shown]
    if len(order) > _BINS:
        which = np.minimum((np.arange(len(order)) * _BINS) // len(order), _BINS - 1)
        count = np.bincount(which, minlength=_BINS)
        rank = np.bincount(which, weights=rank) / count
        series = [np.bincount(which, weights=s) / count for s in series]
    bottom.stackplot(
        rank, *series, colors=[_COLORS[n] for n in shown], labels=[LABELS[n] for n in shown]
    )
    bottom.set_xlim(0, 100)
    bottom.set_xlabel("requests ranked by TTFT (percentile)")
    bottom.set_ylabel("TTFT (ms)" + (", rank-bin means" if len(order) > _BINS else ""))
    bottom.grid(alpha=0.3)
    plain(bottom)
    fig.suptitle(
        f"Where TTFT went ({len(ttft):,} completed requests)" + (f"\n{where}" if where else ""),
        fontsize=11,
    )
    fig.tight_layout()
    paths = save(fig, out_dir, "attribution", fmts)
    plt.close(fig)
    return paths
