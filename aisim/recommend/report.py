"""What `aisim recommend` prints: a summary line, then the best candidates as a table (or,
with --format json, one JSON array of the recommendations)."""

from __future__ import annotations

import json
from pathlib import Path

from aisim.recommend.ledger import counts

SHOWN = 10


def _shape(config: dict, prefix: str) -> str:
    tp, dp = config.get(f"{prefix}tp"), config.get(f"{prefix}attention_dp")
    ep, r = config.get(f"{prefix}moe_ep"), config.get(f"{prefix}replicas")
    text = f"TP{tp}"
    if dp and dp > 1:
        text += f" DP{dp}"
    if ep and ep > 1:
        text += f" EP{ep}"
    return text + f" x{r}"


def _deployment(config: dict) -> str:
    if config["deployment_mode"] == "agg":
        limits = f"mbt {config['agg_max_num_batched_tokens']} seqs {config['agg_max_num_seqs']}"
        return f"agg {_shape(config, '')} {limits}"
    return (
        f"P {_shape(config, 'prefill_')} mbt {config['prefill_max_num_batched_tokens']} "
        f"seqs {config['prefill_max_num_seqs']} / "
        f"D {_shape(config, 'decode_')} mbt {config['decode_max_num_batched_tokens']} "
        f"seqs {config['decode_max_num_seqs']}"
    )


def _num(v, fmt: str = ",.1f") -> str:
    return "-" if v is None else format(v, fmt)


def render(outcome, out_dir: Path) -> str:
    spec = outcome.spec
    c = counts(outcome.entries)
    ranked = outcome.ranked
    gated = _gated(outcome)
    lines = [
        f"aisim recommend: {c['feasible']} feasible of {c['evaluated'] - pruned(outcome)} "
        f"simulated, {gated} failed a gate, {pruned(outcome)} pruned before simulation, "
        f"{c['timed_out']} timed out, {c['failed']} failed, {c['unsupported']} unsupported",
        f"search: {outcome.search}",
    ]
    if not ranked:
        lines.append(
            "NO feasible candidate (check the SLA, max_candidate_gpus and the reasons in "
            f"{out_dir / 'recommendation.csv'})"
        )
        return "\n".join(lines)
    best = ranked[0]
    if spec.target == "pareto":
        lines.append(f"pareto front: {len(ranked)} non-dominated candidate(s)")
    else:
        lines.append(
            f"best {spec.target}: {best['score']:.4g} ({out_dir / 'recommendations' / '0001.yaml'})"
        )
    header = [
        "rank",
        "score",
        "GPUs",
        "GPU / backend",
        "deployment",
        "load",
        "TTFT ms",
        "TPOT ms",
        "tok/s/GPU",
        "tok/s/user",
    ]
    rows = []
    for k, e in enumerate(ranked[:SHOWN], start=1):
        m = e["metrics"]
        cfg = e["config"]
        load = cfg.get("concurrency", cfg.get("traffic_load"))
        if "concurrency" in cfg and "traffic_load" in cfg:
            load = f"{cfg['traffic_load']} -> c{cfg['concurrency']}"
        from aisim.recommend.score import objective

        rows.append(
            [
                str(k),
                f"{e['score']:.4g}",
                str(e["used_gpus"]),
                f"{cfg['hardware_sku']} {cfg['backend']} {cfg['backend_version']}",
                _deployment(cfg),
                str(load),
                _num(m.get("mean_ttft_ms")),
                _num(m.get("mean_tpot_ms"), ",.2f"),
                _num(objective("throughput_per_gpu", m, e["used_gpus"])),
                _num(m.get("mean_output_token_throughput_per_user")),
            ]
        )
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    left = {3, 4}
    for row in [header, *rows]:
        cells = [
            v.ljust(w) if i in left else v.rjust(w)
            for i, (v, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    if outcome.folded:
        lines.append(
            f"folded {outcome.folded} scheduler-limit variant(s) with the same predicted metrics "
            "as a ranked one (all are in recommendation.json / .csv)"
        )
    if len(ranked) > SHOWN:
        lines.append(f"... {len(ranked) - SHOWN} more in {out_dir / 'recommendation.csv'}")
    lines.append(f"saved: {out_dir / 'recommendation.json'}")
    return "\n".join(lines)


def pruned(outcome) -> int:
    """Candidates judged without simulation (KV capacity, model split, materialisation)."""
    return sum(1 for e in outcome.entries if e["status"] == "infeasible" and e["metrics"] is None)


def _gated(outcome) -> int:
    """Infeasible candidates that were simulated (an SLA or goodput gate failed)."""
    return sum(
        1 for e in outcome.entries if e["status"] == "infeasible" and e["metrics"] is not None
    )


def as_json(outcome, out_dir: Path) -> str:
    rows = []
    for k, e in enumerate(outcome.ranked, start=1):
        m = e["metrics"] or {}
        rows.append(
            {
                "rank": k,
                "config_path": str(out_dir / "recommendations" / f"{k:04d}.yaml"),
                "score": e["score"],
                "objectives": e["objectives"],
                "used_gpus": e["used_gpus"],
                "power_w": m.get("power_w"),
                "power_coverage": m.get("power_coverage"),
            }
        )
    return json.dumps(rows, sort_keys=True, separators=(",", ":"))
