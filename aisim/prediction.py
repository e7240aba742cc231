"""`aisim predict`: config -> simulation -> prediction.json (and per-request records)."""

from __future__ import annotations

import gc
import hashlib
import json
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from aisim import __version__

_PROVENANCE = {
    "fixed": {
        "data_version": None,
        "data_version_unavailable_reason": "configured timing does not use performance data",
        "estimator": "fixed",
        "timing_source": "configured",
    },
    "polynomial": {
        "data_version": None,
        "data_version_unavailable_reason": "built-in timing does not use performance data",
        "estimator": "polynomial",
        "timing_source": "built_in",
    },
}


@dataclass
class Prediction:
    prediction: dict  # prediction.json without per_request (the writers stream the records)
    records: object  # aisim.output.records.RequestRecords when captured, else None
    config_sha256: str
    spec: object  # aisim.engine.deployment.RunSpec
    passes: object = None  # aisim.state.PassLog trimmed to its rows (capture_passes)
    deployment: str = ""  # model | GPU | backend | shapes (figure titles, parquet metadata)


def config_sha256(cfg_path: str, overrides: tuple[str, ...]) -> str:
    h = hashlib.sha256(Path(cfg_path).read_bytes())
    for o in overrides:
        h.update(b"\0" + o.encode())
    return h.hexdigest()


def run_prediction(
    config_path: str,
    overrides: tuple[str, ...] = (),
    capture: bool = False,
    capture_passes: bool = False,
    memos=None,
) -> Prediction:
    from aisim.config import load_config

    cfg = load_config(config_path, overrides)
    return predict_config(
        cfg, config_sha256(config_path, overrides), capture, capture_passes, memos
    )


def predict_config(
    cfg, digest: str, capture: bool = False, capture_passes: bool = False, memos=None
) -> Prediction:
    """Validated config -> Prediction. `memos` (a dict, optional) keeps one pass-time memo per
    op plan across calls in this process: a sweep's points that share a plan share prices."""
    from dataclasses import replace

    from aisim.output.contract import contract_problems
    from aisim.output.table import deployment_title

    with _collector_paused():
        pred = _run_prediction(cfg, digest, capture, capture_passes, memos)
    pred = replace(pred, deployment=deployment_title(cfg))
    problems = contract_problems(pred.prediction)
    if problems:
        # a field the output contract does not declare would be a new, undocumented output
        raise AssertionError(f"prediction.json breaks the output contract: {problems[0]}")
    return pred


@contextmanager
def _collector_paused():
    """No cyclic garbage collection while a prediction runs: a full collection walks the ~1 M
    objects numba and the loaded kernels leave on the heap (~50 ms), and one that happened to
    trigger mid-run showed up as a 50 ms swing in wall_time_ms between equal runs. The caller's
    collector setting is restored afterwards (no process-wide side effect)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _run_prediction(cfg, digest: str, capture: bool, capture_passes: bool, memos) -> Prediction:
    """predict_config for any run: one pool (aggregated) or two joined by the KV handoff."""
    from aisim.engine.bounds import rejected_at_admission
    from aisim.engine.deployment import resolve_run
    from aisim.engine.driver import load_engine, run_traffic, simulate
    from aisim.metrics import power_fields, summarize

    run = resolve_run(cfg)
    load_engine(run)  # like importing AISimulate's compiled engine: outside wall_time_ms
    if any(spec.timing == "op_level" for spec in run.pools):
        # imported here, outside wall_time_ms, like the engine itself
        import aisim.timing.energy  # the power report
        from aisim.timing.provider import plan_unless_unpriced
        from aisim.timing.provider import provenance as op_level_provenance
    if run.workload.trace_path is not None:
        import aisim.traffic_trace  # noqa: F401  (its import stays outside wall_time_ms)
    t0 = time.perf_counter()  # AISimulate's wall_time_ms spans validated config -> metrics
    traffics = run_traffic(run)

    def rejects_all():  # a request the first pool rejects reaches no pool's passes
        return bool(rejected_at_admission(run.pools[0], traffics[0].prompt_len).all())

    plans = []
    pool_memos = []
    for spec in run.pools:
        plan = memo = None
        if spec.timing == "op_level":
            where = f"{cfg.source_path}: engine.workers.{spec.role}"
            if memos is not None:
                plan, memo = _shared_plan_and_memo(memos, spec, where, rejects_all)
            else:
                plan = plan_unless_unpriced(spec, where, rejects_all)
        plans.append(plan)
        pool_memos.append(memo)
    result = simulate(
        run,
        traffics,
        capture=capture,
        capture_passes=capture_passes,
        plans=plans,
        memos=pool_memos,
    ).without_run_fields()
    prediction = dict(summarize(result, _sla(cfg)))
    prediction.update(power_fields())
    prediction["prediction_provenance"] = {
        spec.role: op_level_provenance(spec)
        if spec.timing == "op_level"
        else dict(_PROVENANCE[spec.timing])
        for spec in run.pools
    }
    prediction.update(kv_precision_field(run.pools))
    if all(plan is not None for plan in plans):
        power_w, coverage, diagnostics = _power_report(plans, [p.memo for p in result.pools])
        prediction["power_w"] = power_w
        prediction["power_coverage"] = coverage
        prediction["power_diagnostics"] = diagnostics
    return _finish(prediction, t0, result, digest, capture, run)


def _power_report(plans, pool_memos):
    """The energy report of an op-level run: each op's sums come from the pool whose phase it
    prices, the context ops from the first pool and the generation ops from the last (one pool
    prices both)."""
    from aisim.timing.energy import power_report

    first, last = plans[0], plans[-1]
    if not (first.op_names and last.op_names):
        # an op-less plan: every request was rejected at prefill, no pool priced a pass
        acc = _accumulators(pool_memos[0] if not first.op_names else pool_memos[-1])
        return power_report((), (), 0, acc)
    k = first.num_ctx_ops
    acc = _accumulators(pool_memos[0])
    acc_last = _accumulators(pool_memos[-1])
    acc.ms[k:] = acc_last.ms[k:]
    acc.energy_wms[k:] = acc_last.energy_wms[k:]
    acc.covered_ms[k:] = acc_last.covered_ms[k:]
    acc.decode_evals = acc_last.decode_evals
    sources = op_sources(first)[:k] + op_sources(last)[k:]
    return power_report(first.op_names, sources, k, acc)


def _finish(prediction: dict, t0: float, result, digest: str, capture: bool, spec) -> Prediction:
    """Close the timed span (wall_time_ms and the host rates) and wrap the run's outputs."""
    from aisim.output.records import RequestRecords

    wall_ms = (time.perf_counter() - t0) * 1000.0
    wall_s = max(wall_ms / 1000.0, 1e-9)
    prediction["wall_time_ms"] = wall_ms
    prediction["processed_tokens_per_s"] = prediction["processed_tokens"] / wall_s
    prediction["processed_output_tokens_per_s"] = prediction["total_output_tokens"] / wall_s
    records = RequestRecords(result, digest) if capture else None
    if records is not None:
        from aisim.output.attribution import summary_field

        prediction.update(summary_field(records.parts, result.requests))
    return Prediction(prediction, records, digest, spec, _trimmed(result.passes))


def _trimmed(passes):
    """A captured pass log cut to the rows the run wrote (None when not captured)."""
    if passes is None:
        return None
    rows = int(passes.count[0])
    return type(passes)(*(a[:rows] for a in passes))


def _shared_plan_and_memo(memos: dict, spec, where: str, rejects_all):
    """This process's op plan for the spec and the memo of its prices. Plans are reused for
    specs with the same plan identity (timing.provider.plan_identity: whatever their traffic or
    scheduler limits); memos are shared by every spec whose plan has the same arrays (equal
    plans, equal prices), e.g. all points of a concurrency or scheduler sweep. A run that
    prices no pass (provider.plan_unless_unpriced) gets the op-less plan, never shared: it
    depends on the run's traffic."""
    from aisim.state import allocate_memo
    from aisim.timing.plan_cache import plan_digest
    from aisim.timing.provider import plan_identity, plan_unless_unpriced

    spec_key = plan_identity(spec, where)
    plans = memos.setdefault("plans", {})
    if spec_key not in plans:
        plan = plan_unless_unpriced(spec, where, rejects_all)
        if not plan.op_names:
            return plan, None
        plans[spec_key] = (plan, plan_digest(plan.arrays))
    plan, plan_hash = plans[spec_key]
    shared = memos.setdefault("memos", {})
    # one memo per plan and role: a P/D run's two pools price through one plan but sum their
    # own phases (the power report takes the prefill pool's context ops, the decode pool's rest)
    key = (plan_hash, spec.role)
    if key not in shared:
        # larger than a single run's memo: a sweep visits many more pass shapes
        shared[key] = allocate_memo(len(plan.op_names), 1 << 14)
    return plan, shared[key]


def kv_precision_field(specs) -> dict:
    """AISimulate reports the KV dtype of every role whose pool the memory model sized
    (capacity {type: default}), and nothing when every capacity is fixed; the source says
    whether a kvcache_quant_mode set it, the checkpoint declared it, or the policy chose it."""

    def source(spec) -> str:
        if spec.kvcache_quant_mode:
            return "user_override"
        return "checkpoint" if spec.model.kv_cache_quant else "aisimulate_policy"

    roles = {
        spec.role: {"dtype": spec.kv_precision, "source": source(spec)}
        for spec in specs
        if spec.kv_precision is not None
    }
    return {"kv_cache_precision": roles} if roles else {}


def _sla(cfg):
    """evaluation.sla, or None: the goodput bounds the summary classifies requests by."""
    return cfg.evaluation.sla if cfg.evaluation is not None else None


def op_sources(plan):
    from aisim.timing.energy import op_sources as sources

    return sources(plan)


def _accumulators(memo):
    from aisim.timing.energy import Accumulators

    acc = Accumulators(len(memo.acc_ms))
    acc.ms[:] = memo.acc_ms
    acc.energy_wms[:] = memo.acc_energy
    acc.covered_ms[:] = memo.acc_covered
    acc.prefill_evals = int(memo.evals[0])
    acc.decode_evals = int(memo.evals[1])
    return acc


def provenance(pred: Prediction) -> dict:
    """Identity of a run for the parquet schema metadata (no host clock: same run, same bytes)."""
    return {
        "aisim_version": __version__,
        "config_sha256": pred.config_sha256,
        "optable_sha256": optable_sha256(pred.spec),
        "deployment": pred.deployment,
    }


def optable_sha256(run) -> str:
    """Hash of the op-time table manifest (which lists every table's sha256) of the run's
    hardware (of each op-level pool's, in name order when they differ); "" when the client
    pool's timing does not read the tables."""
    if run.client.timing != "op_level":
        return ""
    from aisim.timing.plan_cache import manifest_bytes

    hardware = sorted({r.hardware for r in run.pools if r.timing == "op_level"})
    return hashlib.sha256(b"".join(manifest_bytes(h) for h in hardware)).hexdigest()


def summary_json(pred: Prediction, digest: str) -> str:
    """The compact one-line summary printed by --format json."""
    out = {k: v for k, v in pred.prediction.items() if k != "per_request"}
    out["prediction_sha256"] = digest
    return json.dumps(out, sort_keys=True, separators=(",", ":"))
