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

import math
import random
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from aisim.errors import AisimError, ConfigError
from aisim.recommend import score as sc
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
    `halving` all, shortened first (see _halve); `optimizer` follows the YAML's optimizer
    block: a seeded random sample of max_trials."""
    if search == "exhaustive":
        return pending, f"exhaustive: every one of {len(pending)} candidates"
    if search == "halving":
        return pending, "halving"
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
    budget_note = (
        ""
        if budget_s is None
        else f"; within --budget-s {budget_s:g}: started in seeded random order"
        + (", later rungs best first" if search == "halving" else "")
        + " (which ones finish depends on this machine's speed)"
    )
    prepare_folder(out_dir, overwrite)
    outcome = Outcome(spec, how, len(cands))
    chosen_ids = {id(c) for c in chosen}
    numbered = [
        c for c in cands if c.status != "pending" or id(c) in chosen_ids
    ]  # a pending candidate outside the sample is neither simulated nor recorded
    runnable: list[tuple[str, Candidate, dict, dict]] = []
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
        runnable.append((cid, cand, raw, details))
        outcome.entries.append({"candidate_id": cid, "_run": True})
    timeout_s = DEFAULT_TIMEOUT_S if timeout is None else timeout
    run = _Runner(spec, out_dir, jobs, executor, ray_address, progress, timeout_s)
    deadline = None if budget_s is None else time.monotonic() + budget_s
    if deadline is not None:  # started in the seeded random order of `chosen`
        position = {id(c): i for i, c in enumerate(chosen)}
        runnable.sort(key=lambda item: position[id(item[1])])
    if search == "halving":
        runnable, outcome.search = _halve(run, runnable, outcome.search, deadline)
    outcome.search += budget_note
    done = run.simulate(runnable, 1.0, deadline, longest_first=deadline is None)
    outcome.entries = [
        e if "_run" not in e else done[e["candidate_id"]]
        for e in outcome.entries
        if "_run" not in e or e["candidate_id"] in done
    ]  # a candidate without a result: the budget ran out or halving dropped it
    ledger.rank_and_write(outcome, out_dir)
    return outcome


HALVING_RUNGS = (1 / 16, 1 / 4)  # request fractions of the shorter rungs; the last is full size
HALVING_KEEP = 4  # each rung keeps the best quarter


class _Runner:
    """Simulates candidates (at a fraction of their requests) through the sweep machinery."""

    def __init__(self, spec, out_dir, jobs, executor, ray_address, progress, timeout_s):
        self.spec, self.out_dir, self.jobs = spec, out_dir, jobs
        self.executor, self.ray_address, self.progress = executor, ray_address, progress
        self.timeout_s = timeout_s

    def simulate(self, runnable, fraction: float, deadline=None, longest_first=True) -> dict:
        """candidate id -> ledger entry of each candidate that ran."""
        from aisim.recommend import ledger
        from aisim.sweeps.run import RunLimits, execute, run_cost, split_finished

        tasks, by_pid = [], {}
        for cid, cand, raw, details in runnable:
            conf = raw if fraction == 1.0 else _shortened(raw, fraction)
            name = cid if fraction == 1.0 else f"{cid}-at-{round(1 / fraction)}th"
            path = ledger.write_candidate_config(self.out_dir, name, conf)
            pid = ledger.point_id(path)
            by_pid[pid] = (cid, cand, conf, details)
            task = {
                "base": str(path),
                "base_overrides": [],
                "overrides": [],
                "point_id": pid,
                "index": int(cid.rsplit("-", 1)[1]),
                "capture_requests": False,
                "config": conf,
                "config_sha256": ledger.config_digest(path),
                "cost": run_cost(conf),
            }
            tasks.append(task)
        # resume: the candidates an interrupted run finished
        records, tasks = split_finished(self.out_dir, tasks)
        if longest_first:
            tasks.sort(key=lambda t: -t["cost"])  # the cores stay busy to the end
        if self.progress is not None:
            stage = "" if fraction == 1.0 else f"at 1/{round(1 / fraction)} of the requests"
            self.progress.attach(self.spec, by_pid, stage)
        limits = RunLimits(deadline=deadline, timeout_s=self.timeout_s)
        execute(
            tasks,
            self.out_dir,
            records,
            len(runnable) - len(tasks),
            len(runnable),
            self.jobs,
            self.executor,
            self.ray_address,
            self.progress,
            limits=None if self.executor == "ray" else limits,
            longest_first=False,
            on_record=None if self.progress is None else self.progress.observe,
        )
        out = {}
        for pid, (cid, cand, conf, details) in by_pid.items():
            if pid in records:
                out[cid] = ledger.entry(self.spec, cid, cand, records[pid], details, conf)
        return out


def _shortened(raw: dict, fraction: float) -> dict:
    """The candidate's config with its request count cut to `fraction` (at least one)."""
    import copy

    out = copy.deepcopy(raw)
    stop = out["traffic"]["stop"]
    for key in ("requests", "requests_per_load_unit"):
        if stop.get(key) is not None:
            value = stop[key] * fraction
            stop[key] = max(1, math.ceil(value)) if key == "requests" else value
    return out


def _halve(run: _Runner, runnable: list, how: str, deadline=None) -> tuple[list, str]:
    """Successive halving: every candidate at 1/16 of its requests, the best quarter at 1/4,
    the best quarter of those at full size. Deterministic: the cuts depend on scores only.
    Under a deadline each later rung starts its candidates best first, so the time left goes
    to the most promising ones."""
    spec = run.spec
    stop = spec.traffic.get("stop") or {}
    if stop.get("requests") is None and stop.get("requests_per_load_unit") is None:
        raise ConfigError(
            f"{spec.source}: --search halving shortens runs by traffic.stop.requests (or "
            "requests_per_load_unit), which this traffic does not set; use --search exhaustive"
        )
    sizes = [len(runnable)]
    for fraction in HALVING_RUNGS:
        keep = math.ceil(len(runnable) / HALVING_KEEP)
        if keep >= len(runnable):
            break
        entries = run.simulate(runnable, fraction, deadline, longest_first=deadline is None)
        by_id = {c[0]: c for c in runnable}
        best = _best(spec.target, [entries[c[0]] for c in runnable if c[0] in entries], keep)
        runnable = [by_id[cid] for cid in best]
        sizes.append(len(runnable))
    rungs = " -> ".join(str(n) for n in sizes)
    return runnable, (
        f"successive halving over {sizes[0]} candidates (1/16, 1/4, then full size of "
        f"traffic.stop; kept {rungs})"
    )


def _best(target: str, entries: list[dict], keep: int) -> list[str]:
    """The `keep` most promising candidate ids of a shortened rung: feasible ones by score
    (pareto: alternately the best per GPU and per user), then the others."""
    feasible = [e for e in entries if e["status"] == "feasible"]
    if target == "pareto":
        by_gpu = sorted(feasible, key=lambda e: -e["objectives"]["throughput_per_gpu"])
        by_user = sorted(feasible, key=lambda e: -e["objectives"]["throughput_per_user"])
        order = [e for pair in zip(by_gpu, by_user, strict=True) for e in pair]
    else:
        order = sc.rank(target, feasible)
    order += [e for e in entries if e["status"] != "feasible"]
    ids: list[str] = []
    for e in order:
        if e["candidate_id"] not in ids:
            ids.append(e["candidate_id"])
        if len(ids) == keep:
            break
    return ids


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
