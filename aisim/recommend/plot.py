"""`aisim plot DIR` on a recommend folder (candidates.parquet): the Pareto front of the simulated
candidates (throughput per GPU vs per user, SLA-feasible ones marked) and the ranking."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from aisim.errors import AisimError

TOP = 15


def _title(table, what: str) -> str:
    info = json.loads(table.schema.metadata[b"aisim"])
    engine = info.get("config", {}).get("engine", {})
    hardware = engine.get("hardware", "?")
    if isinstance(hardware, dict):  # a searched GPU: {choices: [...]}
        hardware = " / ".join(map(str, hardware.get("choices", [])))
    return f"{what}: {engine.get('model', '?')} on {hardware}"


def _label(row: dict) -> str:
    mode = row.get("deployment_mode")
    if mode == "agg":
        text = f"agg TP{row.get('tp')}"
        if (row.get("attention_dp") or 1) > 1:
            text += f" DP{row['attention_dp']}"
        if (row.get("moe_ep") or 1) > 1:
            text += f" EP{row['moe_ep']}"
        text += f" x{row.get('replicas')} seqs {row.get('agg_max_num_seqs')}"
    else:
        text = (
            f"P TP{row.get('prefill_tp')} x{row.get('prefill_replicas')} "
            f"mbt {row.get('prefill_max_num_batched_tokens')} "
            f"seqs {row.get('prefill_max_num_seqs')} / "
            f"D TP{row.get('decode_tp')} x{row.get('decode_replicas')} "
            f"seqs {row.get('decode_max_num_seqs')}"
        )
    load = row.get("concurrency", row.get("traffic_load"))
    return f"{row.get('hardware_sku')} {row.get('backend')} {text}, load {load}"


def _simulated(table) -> list[dict]:
    rows = [r for r in table.to_pylist() if r.get("gpu_hours") is not None]
    if not rows:
        raise AisimError("plot: the recommendation has no simulated candidate to draw")
    return rows


def plot_front(table, out_dir: Path, fmts, save, pyplot) -> list[Path]:
    from aisim.plot import pareto_front

    plt = pyplot()
    rows = _simulated(table)
    per_gpu = np.array(
        [r["output_throughput_tok_s"] * r["duration_ms"] / (r["gpu_hours"] * 3.6e6) for r in rows]
    )
    per_user = np.array([r["mean_output_token_throughput_per_user"] for r in rows], float)
    ok = np.array([r["status"] == "feasible" for r in rows])
    fig, ax = plt.subplots(figsize=(8, 5.5))
    ax.ticklabel_format(useOffset=False, style="plain")
    if (~ok).any():
        ax.scatter(
            per_user[~ok],
            per_gpu[~ok],
            s=16,
            marker="x",
            color="#c44e52",
            label="fails the SLA / a gate",
        )
    ax.scatter(per_user[ok], per_gpu[ok], s=16, color="#8c8c8c", label="feasible")
    if ok.any():
        idx = np.flatnonzero(ok)
        front = idx[pareto_front(per_user[idx], per_gpu[idx])]
        ax.plot(per_user[front], per_gpu[front], "o-", color="#1f77b4", label="Pareto front")
        # the front's ends and a few points between: every label would overlap
        step = max(1, len(front) // 5)
        middle = (per_user.min() + per_user.max()) / 2
        for n, i in enumerate(front):
            if n % step == 0 or n == len(front) - 1:
                right = per_user[i] > middle  # labels on the right half point left
                ax.annotate(
                    _label(rows[i]),
                    (per_user[i], per_gpu[i]),
                    fontsize=6,
                    xytext=(-5 if right else 5, 3 if n % 2 else -8),
                    textcoords="offset points",
                    ha="right" if right else "left",
                )
    ax.set_xlabel("output throughput per user (tokens/s/user)")
    ax.set_ylabel("output throughput per GPU (tokens/s/GPU)")
    ax.set_title(_title(table, "Candidates"))
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8, framealpha=0.9)
    fig.tight_layout()
    paths = save(fig, out_dir, "recommend-pareto", fmts)
    plt.close(fig)
    return paths


def plot_ranking(table, out_dir: Path, fmts, save, pyplot) -> list[Path]:
    plt = pyplot()
    ranked = sorted(
        (r for r in table.to_pylist() if r["rank"] is not None), key=lambda r: r["rank"]
    )
    if not ranked:
        raise AisimError("plot --kind ranking: no feasible candidate was recommended")
    top = ranked[:TOP][::-1]
    target = json.loads(table.schema.metadata[b"aisim"]).get("config", {})
    target = (target.get("optimization") or {}).get("target", "throughput")
    fig, ax = plt.subplots(figsize=(11, 0.38 * len(top) + 1.6))
    ax.ticklabel_format(axis="x", useOffset=False, style="plain")
    y = np.arange(len(top))
    scores = [r["score"] for r in top]
    ax.barh(y, scores, color="#4c72b0")
    for k, v in enumerate(scores):
        ax.annotate(
            f"{v:,.4g}", (v, k), fontsize=7, xytext=(3, 0), textcoords="offset points", va="center"
        )
    ax.set_xlim(0, max(scores) * 1.12 if max(scores) > 0 else None)
    ax.set_yticks(y, [f"#{r['rank']} {_label(r)} ({r['used_gpus']} GPUs)" for r in top], fontsize=7)
    ax.set_xlabel(f"score ({target}; higher is better)")
    ax.set_title(_title(table, f"Top {len(top)} of {len(ranked)} recommended"))
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    paths = save(fig, out_dir, "recommend-ranking", fmts)
    plt.close(fig)
    return paths
