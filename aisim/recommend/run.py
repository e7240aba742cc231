"""`aisim recommend`: enumerate, prune, simulate in parallel, score, rank and write.

Output folder (docs/recommend.md, "Outputs"):
    recommendation.json, recommendation.csv   every candidate (AISimulate's ledger layout)
    recommendations/0001.yaml ...             the feasible candidates' predict configs, best first
    candidates.parquet                        one row per candidate: swept values, verdict, summary
    candidates/<candidate_id>.yaml            the predict config each simulated candidate ran
    points/<point_id>.json                    each finished simulation (the resume marker)

An interrupted run keeps its finished simulations; rerunning the same command resumes.
"""

from __future__ import annotations

import random
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from aisim.errors import AisimError, ConfigError
from aisim.recommend.space import Candidate, Space
from aisim.recommend.spec import RecommendSpec

DEFAULT_TIMEOUT_S = 600.0  # a candidate's simulation is stopped after this (local executor)
RESULT_NAMES = ("recommendation.json", "recommendation.csv", "candidates.parquet")
RESULT_FOLDERS = ("recommendations", "candidates", "points")


@dataclass
class Outcome:
    spec: RecommendSpec
    search: str  # how the space was searched (the terminal and the provenance say it)
    total: int  # candidates in the space
    entries: list[dict] = field(default_factory=list)  # candidate records, candidate order
    ranked: list[dict] = field(default_factory=list)
    folded: int = 0  # feasible scheduler-limit variants with the same metrics as a ranked one


def prepare_folder(out_dir: Path, overwrite: bool) -> None:
    """Refuse to mix with an earlier finished run unless --overwrite (which clears aisim's
    recommend outputs, and only those); a folder with only points/ resumes."""
    if out_dir.exists() and not out_dir.is_dir():
        raise AisimError(f"--output-dir: {out_dir} exists and is not a directory")
    done = [n for n in RESULT_NAMES if (out_dir / n).exists()]
    if done and not overwrite:
        raise AisimError(
            f"--output-dir: {out_dir} already holds {', '.join(done)}; pass --overwrite to "
            "replace them"
        )
    if overwrite:
        for name in RESULT_NAMES:
            (out_dir / name).unlink(missing_ok=True)
        for name in RESULT_FOLDERS:
            shutil.rmtree(out_dir / name, ignore_errors=True)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AisimError(f"--output-dir: cannot create {out_dir}: {exc.strerror}") from None


def choose(spec: RecommendSpec, pending: list[Candidate], search: str) -> tuple[list, str]:
    """The candidates to simulate and the search's description. `exhaustive` takes all;
    `optimizer` follows the YAML's optimizer block: a seeded random sample of max_trials."""
    if search == "exhaustive":
        return pending, f"exhaustive: every one of {len(pending)} candidates"
    opt = spec.optimizer
    if opt.algorithm != "random":
        raise ConfigError(
            f"{spec.source}: optimizer.algorithm: aisim has no Bayesian optimizer; use "
            "algorithm: random with --search optimizer, or --search exhaustive (the default)"
        )
    if opt.max_trials >= len(pending):
        return pending, f"random, max_trials {opt.max_trials} covers all {len(pending)} candidates"
    rng = random.Random(opt.seed)
    picked = sorted(rng.sample(range(len(pending)), opt.max_trials))
    return [pending[i] for i in picked], (
        f"random sample of {opt.max_trials} of {len(pending)} candidates (seed {opt.seed})"
    )


def recommend(
    spec: RecommendSpec,
    out_dir: Path,
    *,
    overwrite: bool = False,
    jobs: int = 1,
    executor: str = "local",
    ray_address: str | None = None,
    budget_s: float | None = None,
    search: str = "exhaustive",
    progress=None,
) -> Outcome:
    """Run the whole recommendation; returns the outcome after writing the folder."""
    from aisim.recommend import ledger
    from aisim.recommend.materialize import concrete
    from aisim.sweeps.run import RunLimits, execute

    timeout = spec.optimizer.candidate_timeout_seconds
    if executor == "ray" and timeout is not None:
        raise ConfigError(
            f"{spec.source}: optimizer.candidate_timeout_seconds: stopping a candidate needs "
            "--executor local (Ray tasks run to completion); remove it to run on Ray"
        )
    if executor == "ray" and budget_s is not None:
        raise ConfigError("--budget-s: needs --executor local (Ray tasks run to completion)")
    space = Space(spec)
    cands = space.candidates()
    pending = [c for c in cands if c.status == "pending"]
    _refuse_unpriceable(spec, cands)
    if not pending:
        raise ConfigError(
            f"{spec.source}: no candidate can run: every parallel shape within "
            f"max_candidate_gpus={spec.max_gpus} is pruned (first: {cands[0].reason}); raise "
            "optimization.constraints.max_candidate_gpus or lower engine.context_length"
        )
    chosen, how = choose(spec, pending, search)
    if budget_s is not None:
        order = list(range(len(chosen)))
        random.Random(spec.optimizer.seed).shuffle(order)
        chosen = [chosen[i] for i in order]
        how += f", in seeded random order within --budget-s {budget_s:g}"
    prepare_folder(out_dir, overwrite)
    outcome = Outcome(spec, how, len(cands))
    records: dict[str, dict] = {}
    chosen_ids = {id(c) for c in chosen}
    tasks, task_cands = [], {}
    numbered = []
    for cand in cands:
        if cand.status == "pending" and id(cand) not in chosen_ids:
            continue  # outside the sample: neither simulated nor recorded
        numbered.append(cand)
    for number, cand in enumerate(numbered, start=1):
        cid = f"candidate-{number:06d}"
        if cand.status != "pending":
            outcome.entries.append(ledger.entry(spec, cid, cand, None, None))
            continue
        raw, category, reason, details = concrete(spec, cand, space)
        if raw is None:
            done = replace(cand, status="infeasible", reason_category=category, reason=reason)
            outcome.entries.append(ledger.entry(spec, cid, done, None, details))
            continue
        path = ledger.write_candidate_config(out_dir, cid, raw)
        pid = ledger.point_id(path)
        task_cands[pid] = (cid, cand, raw, details)
        tasks.append(
            {
                "base": str(path),
                "base_overrides": [],
                "overrides": [],
                "point_id": pid,
                "index": number,
                "capture_requests": False,
                "config": raw,
                "config_sha256": ledger.config_digest(path),
                "cost": _cost(raw),
            }
        )
        outcome.entries.append({"candidate_id": cid, "_pid": pid})
    # resume: simulations finished by an earlier, interrupted run of the same command
    from aisim.sweeps.run import _finished

    skipped = 0
    todo = []
    for t in tasks:
        done = _finished(out_dir, t["point_id"])
        if done is not None:
            records[t["point_id"]] = done
            skipped += 1
        else:
            todo.append(t)
    if budget_s is None:
        todo.sort(key=lambda t: -t["cost"])  # the longest first: the cores stay busy to the end
    if progress is not None:
        progress.attach(spec, task_cands)
    limits = RunLimits(
        deadline=None if budget_s is None else time.monotonic() + budget_s,
        timeout_s=DEFAULT_TIMEOUT_S if timeout is None else timeout,
    )
    execute(
        todo,
        out_dir,
        records,
        skipped,
        len(tasks),
        jobs,
        executor,
        ray_address,
        progress,
        limits=None if executor == "ray" else limits,
        longest_first=False,
        on_record=None if progress is None else progress.observe,
    )
    entries = []
    for e in outcome.entries:
        if "_pid" not in e:
            entries.append(e)
            continue
        rec = records.get(e["_pid"])
        if rec is None:
            continue  # the budget ran out before it started: not evaluated
        cid, cand, raw, details = task_cands[e["_pid"]]
        entries.append(ledger.entry(spec, cid, cand, rec, details, raw))
    outcome.entries = entries
    ledger.rank_and_write(outcome, out_dir)
    return outcome


def _cost(raw: dict) -> float:
    """A rough relative run time (passes grow with requests over concurrency per replica)."""
    traffic = raw["traffic"]
    n = float((traffic.get("stop") or {}).get("requests") or 1)
    conc = (traffic.get("load") or {}).get("concurrency")
    return n / max(1.0, float(conc)) if conc else n / 64.0


def _refuse_unpriceable(spec: RecommendSpec, cands: list[Candidate]) -> None:
    """A fixed field no candidate of a mode and backend can run with (every shape fails the
    same predict validation) is a config error, not a pruned space."""
    groups: dict[tuple, list[Candidate]] = {}
    for c in cands:
        if c.status != "unsupported":
            groups.setdefault((c.mode, c.backend), []).append(c)
    for group in groups.values():
        reasons = {c.reason for c in group}
        if all(c.reason_category == "backend_topology" for c in group) and len(reasons) == 1:
            raise ConfigError(f"{spec.source}: {group[0].reason}")
