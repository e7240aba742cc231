"""The recommend ledger: one record per candidate, the ranking, and the files
(recommendation.json / .csv in AISimulate's layout, recommendations/NNNN.yaml,
candidates.parquet). Every file is deterministic: host times are left out."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from pathlib import Path

import yaml

from aisim.recommend import score as sc
from aisim.recommend.space import BRANCH

SCHEMA_VERSION = "1.1"
CSV_COLUMNS = (
    "schema_version",
    "candidate_id",
    "status",
    "reason_category",
    "reason",
    "used_gpus",
    "score",
    "power_w",
    "power_coverage",
    "power_source",
    "config_json",
    "prediction_config_json",
    "metrics_json",
    "objectives_json",
    "provenance_json",
    "is_top_n",
    "is_pareto",
)
STATUSES = ("feasible", "infeasible", "unsupported", "timed_out", "failed")
ROLE_PREFIX = {"aggregated": "agg", "prefill": "prefill", "decode": "decode"}
SHORT_KNOB = {
    "tensor": "tp",
    "pipeline": "pp",
    "attention_data": "attention_dp",
    "moe_tensor": "moe_tp",
    "moe_expert": "moe_ep",
    "replicas": "replicas",
}


def write_candidate_config(out_dir: Path, cid: str, raw: dict) -> Path:
    from aisim.output.write import write_file_atomically

    path = out_dir / "candidates" / f"{cid}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = dump_yaml(raw)
    if not path.exists() or path.read_text() != text:
        write_file_atomically(path, text.encode(), "--output-dir")
    return path


def dump_yaml(raw: dict) -> str:
    """Block-style YAML in the mapping's order (libyaml's emitter when PyYAML has it: the same
    text, ~10x faster)."""
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump(raw, Dumper=dumper, sort_keys=False, default_flow_style=False)


def config_digest(path: Path) -> str:
    """sha256 of the candidate's config file, as `aisim predict -c` of it computes it."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def point_id(path: Path) -> str:
    """The simulation's identity: its predict config's text (a resumed run reuses it only
    when the candidate's config is byte-identical)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def flat_config(spec, cand, details: dict | None) -> dict:
    """The candidate's searched values, flat (AISimulate's `config` keys where it has them)."""
    out = {
        "deployment_mode": BRANCH[cand.mode],
        "backend": cand.backend,
        "backend_version": cand.backend_version,
        "model_name": spec.engine_fixed["model"],
        "hardware_sku": cand.hardware,
        "gpu_budget": spec.max_gpus,
        "context_length": spec.context_length,
        "used_gpus": cand.used_gpus if cand.roles else None,
    }
    one_role = len(cand.roles) == 1
    for role, choice in cand.roles:
        prefix = "" if one_role else f"{ROLE_PREFIX[role]}_"
        for knob, value in choice.shape:
            out[prefix + SHORT_KNOB[knob]] = value
        p = ROLE_PREFIX[role]
        out[f"{p}_max_num_batched_tokens"] = choice.max_batched_tokens
        out[f"{p}_max_num_seqs"] = choice.max_sequences
        out[f"{p}_block_size"] = choice.block_size
        out[f"{p}_gpu_memory_utilization"] = choice.memory_fraction
    if spec.load_type == "kv_capacity_fraction":
        out["traffic_load"] = cand.load
        out.update(details or {})
    elif spec.load_type == "concurrency":
        out["concurrency"] = cand.load
    else:
        out["traffic_load"] = cand.load
    return out


def _metrics(prediction: dict) -> dict:
    from aisim.output.contract import HOST_FIELDS

    return {k: v for k, v in sorted(prediction.items()) if k not in HOST_FIELDS}


def entry(spec, cid: str, cand, record: dict | None, details: dict | None, raw=None) -> dict:
    """The ledger record of one candidate (simulated when `record` is given)."""
    status, category, reason = cand.status, cand.reason_category, cand.reason
    metrics = None
    value = objs = None
    if record is not None:
        if record["status"] == "ok":
            metrics = _metrics(record["prediction"])
            gate = sc.infeasibility(spec, metrics, cand.used_gpus)
            if gate is None:
                status, category, reason = "feasible", None, None
                value = sc.score(spec.target, metrics, cand.used_gpus)
                objs = sc.objectives(spec.target, metrics, cand.used_gpus)
            else:
                status, (category, reason) = "infeasible", gate
        elif record["status"] == "timed_out":
            status, category, reason = "timed_out", "runtime_timeout", record["error"]
        else:
            status, category, reason = (
                "failed",
                "replay_runtime",
                f"replay failed: {record['error']}",
            )
    if status == "pending":  # unreachable: every pending candidate is simulated or dropped
        raise AssertionError(cid)
    provenance = {
        "model": spec.engine_fixed["model"],
        "hardware": cand.hardware,
        "backend": cand.backend,
        "backend_version": cand.backend_version,
        "objective": spec.target,
        "sla": dict(spec.sla) or None,
        "prediction_provenance": (metrics or {}).get("prediction_provenance"),
    }
    return {
        "candidate_id": cid,
        "status": status,
        "reason_category": category,
        "reason": reason,
        "used_gpus": cand.used_gpus if cand.roles else None,
        "score": value,
        "objectives": objs,
        "config": flat_config(spec, cand, details),
        "prediction_config": raw,
        "metrics": metrics,
        "provenance": provenance,
    }


def counts(entries: list[dict]) -> dict:
    out = dict.fromkeys(STATUSES, 0)
    for e in entries:
        out[e["status"]] += 1
    out["evaluated"] = out["feasible"] + out["infeasible"] + out["timed_out"] + out["failed"]
    return out


def rank_and_write(outcome, out_dir: Path) -> None:
    from aisim.output.write import write_file_atomically

    spec = outcome.spec
    feasible = [e for e in outcome.entries if e["status"] == "feasible"]
    ranked, outcome.folded = fold_scheduler_variants(sc.rank(spec.target, feasible))
    outcome.ranked = ranked
    top = [e["candidate_id"] for e in ranked]
    front = {e["candidate_id"] for e in ranked} if spec.target == "pareto" else set()
    doc = {
        "schema_version": SCHEMA_VERSION,
        "candidate_retention": "all",
        "counts": counts(outcome.entries),
        "views": {
            "top_n": [] if spec.target == "pareto" else top,
            "pareto_front": top if spec.target == "pareto" else [],
        },
        "candidates": outcome.entries,
        "provenance": {
            "implementation": "aisim",
            "implementation_version": _version(),
            "search_strategy": outcome.search,
            "candidates_in_space": outcome.total,
            "input_fingerprint": "sha256:"
            + hashlib.sha256(_canonical(spec.raw).encode()).hexdigest(),
            "config": spec.raw,
        },
    }
    text = json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False)
    write_file_atomically(out_dir / "recommendation.json", (text + "\n").encode(), "--output-dir")
    write_file_atomically(
        out_dir / "recommendation.csv",
        _csv(outcome.entries, set(top), front).encode(),
        "--output-dir",
    )
    _write_recommendations(out_dir, ranked)
    from aisim.output.write import table_bytes
    from aisim.recommend.table import candidates_table

    table = candidates_table(outcome.entries, top, front, doc["provenance"])
    write_file_atomically(out_dir / "candidates.parquet", table_bytes(table), "--output-dir")


SCHEDULER_KEYS = ("_max_num_batched_tokens", "_max_num_seqs")


def fold_scheduler_variants(ranked: list[dict]) -> tuple[list[dict], int]:
    """Keep the best-ranked of candidates that differ only in scheduler limits and predict
    exactly the same metrics (the limits never bound the run): the others stay in the ledger
    but are not recommended again. Returns (kept, folded count)."""
    kept, seen = [], set()
    for e in ranked:
        rest = {k: v for k, v in e["config"].items() if not k.endswith(SCHEDULER_KEYS)}
        key = (_canonical(rest), _canonical(e["metrics"]))
        if key in seen:
            continue
        seen.add(key)
        kept.append(e)
    return kept, len(ranked) - len(kept)


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False, default=str)


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    return str(value)


def _csv(entries: list[dict], top: set, front: set) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for e in entries:
        metrics = e["metrics"] or {}
        w.writerow(
            [
                SCHEMA_VERSION,
                e["candidate_id"],
                e["status"],
                _cell(e["reason_category"]),
                _cell(e["reason"]),
                _cell(e["used_gpus"]),
                _cell(e["score"]),
                _cell(metrics.get("power_w")),
                _cell(metrics.get("power_coverage")),
                "modeled" if metrics else "",
                _canonical(e["config"]),
                _canonical(e["prediction_config"]),
                _canonical(e["metrics"]),
                _canonical(e["objectives"]),
                _canonical(e["provenance"]),
                str(e["candidate_id"] in top),
                str(e["candidate_id"] in front),
            ]
        )
    return buf.getvalue()


def _write_recommendations(out_dir: Path, ranked: list[dict]) -> None:
    """recommendations/NNNN.yaml in rank order, swapped in whole (never half a set)."""
    import shutil
    import tempfile

    final = out_dir / "recommendations"
    if not ranked:
        shutil.rmtree(final, ignore_errors=True)
        return
    tmp = Path(tempfile.mkdtemp(prefix=".recommendations-", dir=out_dir))
    for k, e in enumerate(ranked, start=1):
        text = dump_yaml(e["prediction_config"])
        (tmp / f"{k:04d}.yaml").write_text(text)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)


def _version() -> str:
    from aisim import __version__

    return __version__
