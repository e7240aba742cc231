"""`aisim plot` (optional extra `aisim-serving[plot]`): figures of a sweep or of one captured run.

From a sweep (sweep.parquet):
  pareto   output throughput per GPU vs output throughput per user, the Pareto frontier drawn;
  latency  TTFT, TPOT, ITL and end-to-end latency (mean, median, p99) and the output and
           request throughputs against the load column.
From a run with passes captured (passes.parquet):
  timeline batch composition (prefill / decode requests), KV blocks used and cached, and the
           waiting queue over simulated time.
From a recommend folder (candidates.parquet): pareto (the candidates' front, SLA-feasible ones
marked) and ranking (the recommended candidates' scores).
Long runs are binned in time (means per bin), so a figure stays small whatever the run length.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from aisim.errors import AisimError

_TIMELINE_BINS = 1500
_OUTSIDE = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "fontsize": 8}  # off the data


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise AisimError(
            "aisim plot needs matplotlib: pip install 'aisim-serving[plot]' (in a "
            "checkout: pip install -e '.[plot]')"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out_dir: Path, stem: str, fmts) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in fmts:
        path = out_dir / f"{stem}.{fmt}"
        # no timestamps in the files: the same data gives the same image bytes
        meta = {"Date": None} if fmt == "svg" else {"Software": None}
        fig.savefig(path, dpi=120, metadata=meta)
        paths.append(path)
    return paths


def _ok_rows(table) -> dict[str, np.ndarray]:
    rows = table.filter(np.array([s == "ok" for s in table.column("status").to_pylist()]))
    if rows.num_rows == 0:
        raise AisimError("plot: the sweep has no successful point to draw")
    return {name: rows.column(name).to_numpy(zero_copy_only=False) for name in rows.column_names}


def swept_columns(table) -> list[str]:
    names = table.column_names
    return names[names.index("point_id") + 1 : names.index("status")]


def pareto_front(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats on both x and y, by increasing x."""
    order = np.lexsort((-y, -x))  # x descending, then y descending
    keep, best_y = [], -np.inf
    for i in order:
        if y[i] > best_y:
            keep.append(i)
            best_y = y[i]
    return np.array(keep[::-1], dtype=np.int64)


def gpus(cols: dict) -> np.ndarray:
    """GPUs of each point: gpu_hours over the simulated duration."""
    return np.asarray(cols["gpu_hours"], float) * 3.6e6 / np.asarray(cols["duration_ms"], float)


def deployment(table) -> str:
    """The sweep's base deployment (model | GPU | backend | shape) from its metadata."""
    import json

    meta = (table.schema.metadata or {}).get(b"aisim")
    return json.loads(meta).get("deployment", "") if meta else ""


def _titled(fig, what: str, table) -> None:
    where = deployment(table)
    fig.suptitle(what + (f"\n{where}" if where else ""), fontsize=11)


def _plain(ax) -> None:
    """Axis numbers as they are: no offset or scientific notation (float noise on a flat series
    must not read like a trend)."""
    from matplotlib.ticker import ScalarFormatter

    for axis in (ax.yaxis,) if ax.get_xscale() == "log" else (ax.xaxis, ax.yaxis):
        fmt = ScalarFormatter(useOffset=False)
        fmt.set_scientific(False)
        axis.set_major_formatter(fmt)


def _short(column: str) -> str:
    return column.split("__")[-1]


def plot_pareto(table, out_dir: Path, fmts, stem: str = "pareto") -> list[Path]:
    plt = _pyplot()
    cols = _ok_rows(table)
    x = np.asarray(cols["mean_output_token_throughput_per_user"], float)
    y = np.asarray(cols["output_throughput_tok_s"], float) / gpus(cols)
    front = pareto_front(x, y)
    fig, ax = plt.subplots(figsize=(8, 5.5))
    ax.scatter(x, y, s=18, color="#999999", label="sweep points", zorder=2)
    ax.plot(x[front], y[front], "o-", color="#1f77b4", label="Pareto frontier", zorder=3)
    label_cols = swept_columns(table)
    mid = (x.min() + x.max()) / 2
    for i in front:
        text = ", ".join(f"{_short(c)}={cols[c][i]}" for c in label_cols)
        right_half = x[i] > mid  # labels there point left, so none runs off the axes
        ax.annotate(
            text,
            (x[i], y[i]),
            fontsize=7,
            xytext=(-6 if right_half else 6, 4),
            textcoords="offset points",
            ha="right" if right_half else "left",
        )
    ax.set_xlabel("output throughput per user (tokens/s/user)")
    ax.set_ylabel("output throughput per GPU (tokens/s/GPU)")
    ax.margins(x=0.08, y=0.1)
    ax.grid(alpha=0.3)
    _plain(ax)
    ax.legend(loc="best")
    _titled(fig, "Throughput per GPU vs per user", table)
    fig.tight_layout()
    paths = _save(fig, out_dir, stem, fmts)
    plt.close(fig)
    return paths


LATENCY_PANELS = (  # (summary metric, y label, statistics drawn)
    ("ttft_ms", "TTFT (ms)", ("mean", "median", "p99")),
    ("tpot_ms", "TPOT (ms)", ("mean", "median", "p99")),
    ("itl_ms", "ITL (ms)", ("mean", "median", "p99")),
    ("e2e_latency_ms", "end-to-end latency (ms)", ("mean", "median", "p99")),
    ("output_throughput_tok_s", "output throughput (tokens/s)", ("",)),
    ("request_throughput_rps", "request throughput (requests/s)", ("",)),
)
_STYLES = {"mean": "-", "median": "--", "p99": ":", "": "-"}
_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def plot_latency(
    table, out_dir: Path, fmts, x_column: str | None = None, stem: str = "latency"
) -> list[Path]:
    """Latency (mean, median, p99) and throughput against the load column, one colour and
    marker per combination of the other swept values."""
    from matplotlib.lines import Line2D

    plt = _pyplot()
    swept = swept_columns(table)
    x_column = x_column or (swept[0] if swept else None)
    if x_column is not None and "." in x_column:  # the config path itself
        x_column = x_column.replace(".", "__")
    if x_column not in table.column_names:
        raise AisimError(f"plot --x {x_column}: no such column in the sweep table")
    cols = _ok_rows(table)
    others = [c for c in swept if c != x_column]
    keys = [tuple(cols[c][i] for c in others) for i in range(len(cols[x_column]))]
    groups = sorted(set(keys), key=str)
    xs_all = np.asarray(cols[x_column], float)
    log_x = bool(np.all(xs_all > 0)) and xs_all.max() / max(xs_all.min(), 1e-300) >= 8
    fig, axes = plt.subplots(2, 3, figsize=(14, 7.5))
    for ax, (metric, label, stats) in zip(axes.flat, LATENCY_PANELS, strict=True):
        for g, key in enumerate(groups):
            idx = np.array([i for i, k in enumerate(keys) if k == key])
            order = np.argsort(xs_all[idx])
            for stat in stats:
                name = f"{stat}_{metric}" if stat else metric
                if name not in cols:
                    continue
                ys = np.asarray(cols[name][idx], float)[order]
                ax.plot(
                    xs_all[idx][order],
                    ys,
                    _STYLES[stat],
                    color=_COLORS[g % len(_COLORS)],
                    marker=_MARKERS[g % len(_MARKERS)] if stat in ("mean", "") else None,
                    markersize=4,
                    linewidth=1.6 if stat in ("mean", "") else 1.1,
                )
        if log_x:
            ax.set_xscale("log", base=2)
        ax.set_xlabel(_short(x_column))
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        _plain(ax)
        if log_x:
            from matplotlib.ticker import FixedLocator, ScalarFormatter

            ax.xaxis.set_major_locator(FixedLocator(sorted(set(xs_all.tolist()))))
            fmt = ScalarFormatter(useOffset=False)
            fmt.set_scientific(False)
            ax.xaxis.set_major_formatter(fmt)
            ax.xaxis.set_minor_locator(FixedLocator([]))
    handles = [
        Line2D([], [], color="black", linestyle=_STYLES[s], label=s) for s in ("mean", "median")
    ] + [Line2D([], [], color="black", linestyle=":", label="p99")]
    if others:
        handles += [
            Line2D(
                [],
                [],
                color=_COLORS[g % len(_COLORS)],
                marker=_MARKERS[g % len(_MARKERS)],
                label=", ".join(f"{_short(c)}={v}" for c, v in zip(others, key, strict=True)),
            )
            for g, key in enumerate(groups)
        ]
    # below the panels, so no legend covers data
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 5), fontsize=8)
    _titled(fig, f"Latency and throughput vs {_short(x_column)}", table)
    rows = 1 + (len(handles) - 1) // 5
    fig.tight_layout(rect=(0, 0.03 + 0.03 * rows, 1, 1))
    paths = _save(fig, out_dir, stem, fmts)
    plt.close(fig)
    return paths


def _binned(t: np.ndarray, values: dict[str, np.ndarray], bins: int):
    """Time-binned means (empty bins dropped)."""
    edges = np.linspace(t.min(), t.max() if t.max() > t.min() else t.min() + 1.0, bins + 1)
    which = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, bins - 1)
    count = np.bincount(which, minlength=bins)
    used = count > 0
    centers = ((edges[:-1] + edges[1:]) / 2)[used]
    return centers, {
        k: (np.bincount(which, weights=v.astype(float), minlength=bins)[used] / count[used])
        for k, v in values.items()
    }


def plot_timeline(
    passes, out_dir: Path, fmts, stem: str = "timeline", title: str | None = None
) -> list[Path]:
    plt = _pyplot()
    if passes.num_rows == 0:
        raise AisimError("plot: passes.parquet has no rows")
    col = {
        n: passes.column(n).to_numpy(zero_copy_only=False)
        for n in (
            "start_ms",
            "num_prefill",
            "num_decode",
            "kv_blocks_used",
            "kv_blocks_cached",
            "waiting",
            "running",
        )
    }
    t = col.pop("start_ms") / 1000.0
    if len(t) > _TIMELINE_BINS:
        t, col = _binned(t, col, _TIMELINE_BINS)
    fig, axes = plt.subplots(3, 1, figsize=(10, 7.5), sharex=True)
    axes[0].stackplot(
        t,
        col["num_decode"],
        col["num_prefill"],
        labels=("decode", "prefill"),
        colors=("#1f77b4", "#ff7f0e"),
        step="post",
    )
    axes[0].set_ylabel("requests in pass")
    axes[0].legend(**_OUTSIDE)
    axes[1].plot(t, col["kv_blocks_used"], label="used", drawstyle="steps-post")
    axes[1].plot(t, col["kv_blocks_cached"], label="cached (evictable)", drawstyle="steps-post")
    axes[1].set_ylabel("KV blocks per rank")
    axes[1].legend(**_OUTSIDE)
    axes[2].plot(t, col["waiting"], label="waiting", color="#d62728", drawstyle="steps-post")
    axes[2].plot(t, col["running"], label="running", color="#2ca02c", drawstyle="steps-post")
    axes[2].set_ylabel("requests")
    axes[2].set_xlabel("simulated time (s)")
    axes[2].legend(**_OUTSIDE)
    for ax in axes:
        ax.grid(alpha=0.3)
        _plain(ax)
    where = deployment(passes)
    fig.suptitle(
        "Scheduler timeline"
        + (f", {title} pool" if title else "")
        + (" (time-binned means)" if len(t) >= 2 and passes.num_rows > _TIMELINE_BINS else "")
        + (f"\n{where}" if where else "")
    )
    fig.tight_layout()
    paths = _save(fig, out_dir, stem, fmts)
    plt.close(fig)
    return paths


def plot_source(
    source: Path, kinds, out_dir: Path | None, fmts, x_column: str | None = None
) -> list[Path]:
    """The CLI entry: figure out what `source` holds and draw the asked (or default) kinds."""
    import pyarrow.parquet as pq

    folder = source if source.is_dir() else source.parent
    candidates = source if source.name == "candidates.parquet" else folder / "candidates.parquet"
    if candidates.is_file() and (source.is_dir() or source == candidates):
        return _recommendation(candidates, kinds, out_dir or folder, fmts)
    sweep = source if source.name == "sweep.parquet" else folder / "sweep.parquet"
    passes = source if source.name == "passes.parquet" else folder / "passes.parquet"
    out_dir = out_dir or folder
    has_sweep = sweep.is_file() and (source.is_dir() or source == sweep)
    has_passes = passes.is_file() and (source.is_dir() or source == passes)
    requests = source if source.name == "requests.parquet" else folder / "requests.parquet"
    has_requests = requests.is_file() and (source.is_dir() or source == requests)
    kinds = tuple(kinds) or (("pareto", "latency") if has_sweep else ()) + (
        ("timeline",) if has_passes else ()
    )
    if not kinds and has_requests:
        kinds = ("attribution",)
    if not kinds:
        raise AisimError(
            f"plot: {source} holds no sweep.parquet, passes.parquet or requests.parquet "
            "(run aisim sweep, or aisim predict --capture-passes / --capture-per-request)"
        )
    paths: list[Path] = []
    for kind in kinds:
        if kind == "attribution":
            paths += _attribution(requests, folder, out_dir, fmts)
        elif kind in ("pareto", "latency"):
            if not sweep.is_file():
                raise AisimError(f"plot --kind {kind}: no sweep.parquet in {folder}")
            table = pq.read_table(sweep)
            paths += (
                plot_pareto(table, out_dir, fmts)
                if kind == "pareto"
                else plot_latency(table, out_dir, fmts, x_column)
            )
        else:
            if not passes.is_file():
                raise AisimError(
                    f"plot --kind timeline: no passes.parquet in {folder} "
                    "(aisim predict --capture-passes)"
                )
            paths += timelines(pq.read_table(passes), out_dir, fmts)
    return paths


def _attribution(requests: Path, folder: Path, out_dir: Path, fmts) -> list[Path]:
    """A run folder's requests.parquet: where its requests' TTFT went."""
    import pyarrow.parquet as pq

    from aisim.plot_attribution import plot_attribution

    if not requests.is_file():
        raise AisimError(
            f"plot --kind attribution: no requests.parquet in {folder} "
            "(aisim predict --capture-per-request)"
        )
    table = pq.read_table(requests)
    return plot_attribution(table, out_dir, fmts, (_save, _pyplot, _plain), deployment(table))


def _recommendation(candidates: Path, kinds, out_dir: Path, fmts) -> list[Path]:
    """A recommend folder: its Pareto front and ranking (aisim.recommend.plot)."""
    import pyarrow.parquet as pq

    from aisim.recommend.plot import plot_front, plot_ranking

    table = pq.read_table(candidates)
    paths: list[Path] = []
    for kind in tuple(kinds) or ("pareto", "ranking"):
        if kind not in ("pareto", "ranking"):
            raise AisimError(f"plot --kind {kind}: a recommend folder draws pareto or ranking")
        draw = plot_front if kind == "pareto" else plot_ranking
        paths += draw(table, out_dir, fmts, _save, _pyplot)
    return paths


def timelines(passes, out_dir: Path, fmts) -> list[Path]:
    """One timeline per pool role: a disaggregated run's prefill and decode pools schedule
    different work, so their passes are drawn apart (timeline-prefill, timeline-decode)."""
    import pyarrow.compute as pc

    if "role" not in passes.column_names:
        return plot_timeline(passes, out_dir, fmts)
    roles = sorted(set(passes.column("role").to_pylist()))
    if len(roles) <= 1:
        return plot_timeline(passes, out_dir, fmts)
    paths: list[Path] = []
    for role in roles:
        rows = passes.filter(pc.equal(passes.column("role"), role))
        paths += plot_timeline(rows, out_dir, fmts, stem=f"timeline-{role}", title=role)
    return paths
