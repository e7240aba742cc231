"""aisim recommend: domains, validation, the candidate space and its pruning, scoring and
ranking, the output files, resuming, and that each recommended YAML predicts what it scored."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from aisim.config.checks import Invalid
from aisim.errors import ConfigError
from aisim.recommend import score as sc
from aisim.recommend.domains import domain
from aisim.recommend.space import Space, worker_shapes
from aisim.recommend.spec import parse_recommend

TRAFFIC = {
    "source": {"type": "synthetic", "input_tokens": 512, "output_tokens": 16},
    "load": {"type": "concurrency", "concurrency": 8},
    "stop": {"requests": 24},
}


def _raw(**over) -> dict:
    raw = {
        "traffic": TRAFFIC,
        "engine": {
            "mode": "aggregated",
            "model": "Qwen/Qwen3-32B",
            "hardware": "b200_sxm",
            "backend": "vllm",
            "context_length": 2048,
            "workers": {"aggregated": {"scheduler": {"max_batched_tokens": 8192}}},
        },
        "optimization": {"target": "throughput_per_gpu", "constraints": {"max_candidate_gpus": 2}},
    }
    for path, value in over.items():
        node = raw
        keys = path.split("__")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        if value is None:
            node.pop(keys[-1], None)
        else:
            node[keys[-1]] = value
    return raw


def _write(tmp_path: Path, raw: dict, name: str = "rec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "aisim", "recommend", *args], capture_output=True, text=True
    )


# ---------------------------------------------------------------- domains


def test_domains_expand_to_finite_values() -> None:
    assert domain(4, "x", "int").values == (4,)
    assert domain({"choices": [1, 8, 2]}, "x", "int").values == (1, 8, 2)
    assert domain({"range": {"min": 2, "max": 9, "step": 3}}, "x", "int").values == (2, 5, 8)
    log = domain({"range": {"min": 3, "max": 40, "scale": "log"}}, "x", "int")
    assert log.values == (3, 4, 8, 16, 32, 40)
    assert log.admits(5) and not log.admits(41)  # a pool filter keeps the whole interval
    frac = domain({"range": {"min": 0.5, "max": 0.9, "step": 0.2}}, "x", "float", upper=1.0)
    assert frac.values == (0.5, 0.7, 0.9)


@pytest.mark.parametrize(
    ("raw", "kind", "message"),
    [
        ({"range": {"min": 1, "max": 8}}, "int", "integer linear range requires step"),
        ({"range": {"min": 1, "max": 8, "step": 1, "scale": "log"}}, "int", "takes no step"),
        ({"range": {"min": 0.1, "max": 0.9}}, "float", "continuous"),
        ({"range": {"min": 8, "max": 1, "step": 1}}, "int", "above max"),
        ({"choices": []}, "int", "nonempty"),
        ({"choices": [2, 2]}, "int", "unique"),
        ({"choices": [2], "range": {}}, "int", "a domain is"),
        (0, "int", "positive integer"),
        ({"choices": [0.5, 1.5]}, "float", "at most 1"),
    ],
)
def test_bad_domains_name_the_problem(raw, kind: str, message: str) -> None:
    with pytest.raises(Invalid) as err:
        domain(raw, "engine.workers.aggregated.scheduler.max_sequences", kind, upper=1.0)
    assert message in err.value.line("rec.yaml")


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"bogus": 1}, "bogus: unknown top-level section"),
        ({"optimization": None}, "optimization: is required"),
        ({"engine__workers__aggregated__parallelism": {"tensor": 2}}, "preset: false"),
        ({"optimization__strict_sla": True}, "requires at least one evaluation.sla bound"),
        ({"optimization__target": "goodput"}, "requires an evaluation.sla bound"),
        ({"optimization__target": "fastest"}, "optimization.target: must be one of"),
        (
            {"optimization__constraints__min_goodput_rps": 2.0},
            "min_goodput_rps: is only supported with target min_gpus",
        ),
        ({"evaluation": {"sla": {"e2e_ms": 5.0, "ttft_ms": 1.0}}}, "mutually exclusive"),
        ({"engine__mode": "disaggregated"}, "requires prefill and decode workers"),
        ({"optimizer": {"algorithm": "grid"}}, "optimizer.algorithm: must be bayesian or random"),
        ({"execution": {"resources": {"cpu_limit": 2}}}, "use --jobs"),
        ({"engine__mode": "afd"}, "not simulated by aisim"),
        (
            {"engine__workers__aggregated__parallelism": {"preset": [{"tensor": 2}]}},
            "must give exactly the knobs",
        ),
    ],
)
def test_bad_recommend_yaml_exit_2_one_line_no_files(tmp_path: Path, over, field: str) -> None:
    cfg = _write(tmp_path, _raw(**over))
    out = tmp_path / "out"
    r = _cli("-c", str(cfg), "-o", str(out))
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and field in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists()


def test_a_field_predict_refuses_is_refused_before_anything_runs(tmp_path: Path) -> None:
    cfg = _write(tmp_path, _raw(engine__nextn=9))
    r = _cli("-c", str(cfg), "-o", str(tmp_path / "out"))
    assert r.returncode == 2 and "engine.nextn" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- the space


def test_automatic_pool_shapes() -> None:
    assert worker_shapes(False, "vllm", 8) == [
        (1, 1, 1, 1),
        (2, 1, 1, 1),
        (4, 1, 1, 1),
        (8, 1, 1, 1),
    ]
    moe = set(worker_shapes(True, "vllm", 4))
    # TEP, DEP and MoE-TP patterns of 2 and 4 GPUs, never mixed expert tensor x expert parallel
    assert {(2, 1, 1, 2), (1, 2, 1, 2), (2, 1, 2, 1), (1, 2, 2, 1), (4, 1, 1, 4)} <= moe
    assert all(not (mtp > 1 and mep > 1) for _, _, mtp, mep in moe)
    assert all(tp * dp == mtp * mep for tp, dp, mtp, mep in moe)
    assert all(not (tp > 1 and dp > 1) for tp, dp, _, _ in worker_shapes(True, "trtllm", 16))


def test_space_counts_replicas_knobs_and_the_gpu_budget() -> None:
    raw = _raw(
        engine__workers__aggregated={
            "parallelism": {"preset": False, "tensor": {"choices": [1, 2]}},
            "scheduler": {"max_batched_tokens": 8192, "max_sequences": {"choices": [64, 128]}},
        },
        optimization__constraints__max_candidate_gpus=4,
    )
    cands = Space(parse_recommend(raw, "rec.yaml")).candidates()
    shapes = {
        (c.role("aggregated").par["tensor"], c.role("aggregated").par["replicas"]) for c in cands
    }
    # TP1 x1..4 and TP2 x1..2, each with two max_sequences values
    assert shapes == {(1, 1), (1, 2), (1, 3), (1, 4), (2, 1), (2, 2)}
    assert len(cands) == 12 and all(c.used_gpus <= 4 for c in cands)
    assert [c.used_gpus for c in cands] == sorted(c.used_gpus for c in cands)


def test_disaggregated_pairs_share_the_budget_and_sglang_is_listed_unsupported() -> None:
    raw = _raw(
        engine__mode="disaggregated",
        engine__backend={"choices": ["vllm", "sglang"]},
        engine__workers={"prefill": {}, "decode": {}},
        optimization__constraints__max_candidate_gpus=3,
    )
    cands = Space(parse_recommend(raw, "rec.yaml")).candidates()
    unsupported = [c for c in cands if c.status == "unsupported"]
    assert len(unsupported) == 1 and "SGLang" in unsupported[0].reason
    runnable = [c for c in cands if c.status == "pending"]
    pairs = {(c.role("prefill").gpus, c.role("decode").gpus) for c in runnable}
    assert pairs == {(1, 1), (1, 2), (2, 1)}  # dense TP1/TP2 shapes, x replicas, within 3 GPUs
    # default limits: prefill 3 x 9 scheduler values, decode 1 x 3
    per_pair = 27 * 3
    assert len(runnable) % per_pair == 0


def test_gpus_are_a_search_dimension() -> None:
    from aisim.recommend.materialize import predict_config

    raw = _raw(engine__hardware={"choices": ["b200_sxm", "h200_sxm"]})
    space = Space(parse_recommend(raw, "rec.yaml"))
    cands = space.candidates()
    single = Space(parse_recommend(_raw(), "rec.yaml")).candidates()
    assert {c.hardware for c in cands} == {"b200_sxm", "h200_sxm"}
    assert len(cands) == 2 * len(single) == 18  # 3 shapes x 3 default max_sequences per GPU
    for c in cands:
        assert predict_config(space.spec, c, space)["engine"]["hardware"] == c.hardware


def test_a_shape_whose_kv_cannot_hold_the_context_is_pruned_with_its_reason() -> None:
    raw = _raw(
        engine__workers__aggregated={
            "kv_cache": {"capacity": {"type": "fixed", "blocks": 20}, "block_size": 64},
        },
    )
    cands = Space(parse_recommend(raw, "rec.yaml")).candidates()
    assert cands and all(c.status == "infeasible" for c in cands)
    assert all(c.reason_category == "kv_capacity" for c in cands)
    assert "holds 1280 tokens per rank, not one 2048-token sequence" in cands[0].reason


def test_a_shape_predict_refuses_is_pruned_with_its_reason() -> None:
    shape = {"replicas": 1, "pipeline": 1, "attention_data": 1, "moe_tensor": 1, "moe_expert": 1}
    raw = _raw(
        engine__workers__aggregated={
            "parallelism": {"preset": [{**shape, "tensor": 3}, {**shape, "tensor": 2}]}
        },
        optimization__constraints__max_candidate_gpus=4,
    )
    cands = Space(parse_recommend(raw, "rec.yaml")).candidates()
    by_tp = {c.role("aggregated").par["tensor"]: c for c in cands}
    assert by_tp[2].status == "pending"
    assert by_tp[3].status == "infeasible" and by_tp[3].reason_category == "backend_topology"
    assert "parallelism.tensor: 3" in by_tp[3].reason


# ---------------------------------------------------------------- scoring


def _pred(**fields) -> dict:
    base = {
        "output_throughput_tok_s": 1000.0,
        "gpu_hours": 2.0 / 3600.0 * 10.0,
        "duration_ms": 10_000.0,
        "mean_output_token_throughput_per_user": 50.0,
        "completed_requests": 10,
        "num_ttft_samples": 10,
        "num_tpot_samples": 10,
        "num_e2e_latency_samples": 10,
        "mean_ttft_ms": 100.0,
        "mean_tpot_ms": 10.0,
        "mean_e2e_latency_ms": 300.0,
    }
    base.update(fields)
    return base


def test_scores_read_prediction_fields() -> None:
    p = _pred()
    assert sc.average_gpus(p) == pytest.approx(2.0)
    assert sc.score("throughput_per_gpu", p, 2) == pytest.approx(500.0)
    assert sc.score("throughput", p, 2) == 1000.0
    assert sc.score("ttft", p, 2) == -100.0
    assert sc.score("min_gpus", p, 2) == -2.0
    assert sc.objectives("pareto", p, 2) == {
        "throughput_per_gpu": pytest.approx(500.0),
        "throughput_per_user": 50.0,
    }


def test_strict_sla_gates_on_the_means() -> None:
    raw = _raw(evaluation={"sla": {"ttft_ms": 90.0, "itl_ms": 20.0}}, optimization__strict_sla=True)
    spec = parse_recommend(raw, "rec.yaml")
    cat, reason = sc.infeasibility(spec, _pred(), 1)
    assert cat == "sla_constraint" and reason.endswith("ttft 100ms > 90ms")
    assert sc.infeasibility(spec, _pred(mean_ttft_ms=90.0), 1) is None  # bounds are inclusive


def _entry(cid: str, score: float, gpus: int, per_user: float = 0.0, **cfg) -> dict:
    return {
        "candidate_id": cid,
        "score": score,
        "used_gpus": gpus,
        "config": {"id": cid, **cfg},
        "objectives": {"throughput_per_gpu": score, "throughput_per_user": per_user},
        "metrics": {},
    }


def test_ranking_breaks_ties_by_gpus_then_config() -> None:
    es = [_entry("a", 5.0, 2), _entry("b", 7.0, 4), _entry("c", 5.0, 1), _entry("d", 5.0, 1)]
    assert [e["candidate_id"] for e in sc.rank("throughput", es)] == ["b", "c", "d", "a"]


def test_pareto_front_keeps_the_non_dominated() -> None:
    es = [
        _entry("a", 10.0, 1, 1.0),
        _entry("b", 8.0, 1, 5.0),
        _entry("c", 8.0, 1, 4.0),  # dominated by b
        _entry("d", 2.0, 1, 9.0),
        _entry("e", 2.0, 1, 9.0),  # equal to d: neither dominates
        _entry("f", 1.0, 1, 8.0),  # dominated by d
    ]
    front = sc.rank("pareto", es)
    assert [e["candidate_id"] for e in front] == ["a", "b", "d", "e"]


# ---------------------------------------------------------------- whole runs


def _small(tmp_path: Path, **over) -> Path:
    raw = _raw(
        engine__workers__aggregated={
            "scheduler": {"max_batched_tokens": 8192, "max_sequences": {"choices": [4, 64]}}
        },
        **over,
    )
    return _write(tmp_path, raw)


def test_recommend_ranks_writes_and_each_yaml_predicts_its_score(tmp_path: Path) -> None:
    from aisim.prediction import run_prediction

    cfg = _small(tmp_path)
    out = tmp_path / "out"
    r = _cli("-c", str(cfg), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "best throughput_per_gpu" in r.stdout
    doc = json.loads((out / "recommendation.json").read_text())
    assert doc["schema_version"] == "1.1"
    assert doc["counts"]["evaluated"] == len(doc["candidates"]) == 6  # TP1 x1, x2; TP2 x1
    top = doc["views"]["top_n"]
    files = sorted((out / "recommendations").glob("*.yaml"))
    assert len(files) == len(top) and files[0].name == "0001.yaml"
    by_id = {c["candidate_id"]: c for c in doc["candidates"]}
    scores = [by_id[c]["score"] for c in top]
    assert scores == sorted(scores, reverse=True)
    best = by_id[top[0]]
    pred = run_prediction(str(files[0])).prediction
    assert sc.score("throughput_per_gpu", pred, best["used_gpus"]) == best["score"]
    with (out / "recommendation.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(__import__("aisim.recommend.ledger", fromlist=["x"]).CSV_COLUMNS)
    assert [row["is_top_n"] for row in rows].count("True") == len(top)
    table = pq.read_table(out / "candidates.parquet")
    assert table.num_rows == 6
    assert table.column("rank").to_pylist().count(1) == 1


def test_no_feasible_candidate_exits_1_with_the_ledger(tmp_path: Path) -> None:
    cfg = _small(tmp_path, evaluation={"sla": {"ttft_ms": 0.001}}, optimization__strict_sla=True)
    out = tmp_path / "out"
    r = _cli("-c", str(cfg), "-o", str(out))
    assert r.returncode == 1, r.stderr
    assert "NO feasible candidate" in r.stdout
    doc = json.loads((out / "recommendation.json").read_text())
    assert doc["counts"]["feasible"] == 0 and doc["counts"]["infeasible"] == 6
    assert not (out / "recommendations").exists()
    assert {c["reason_category"] for c in doc["candidates"]} == {"sla_constraint"}


def test_runs_are_deterministic_and_resume_from_finished_points(tmp_path: Path) -> None:
    cfg = _small(tmp_path)
    a, b = tmp_path / "a", tmp_path / "b"
    assert _cli("-c", str(cfg), "-o", str(a), "-j", "2").returncode == 0
    assert _cli("-c", str(cfg), "-o", str(b), "-j", "1").returncode == 0
    names = ("recommendation.json", "recommendation.csv", "candidates.parquet")
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    # an interrupted run: results not written yet, some simulations finished
    points = sorted((a / "points").glob("*.json"))
    for name in names:
        (a / name).unlink()
    for p in points[::2]:
        p.unlink()
    r = _cli("-c", str(cfg), "-o", str(a))
    assert r.returncode == 0, r.stderr
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    again = _cli("-c", str(cfg), "-o", str(a))
    assert again.returncode == 2 and "--overwrite" in again.stderr


def test_kv_capacity_fraction_becomes_a_concurrency(tmp_path: Path) -> None:
    cfg = _small(tmp_path, traffic__load={"type": "kv_capacity_fraction", "fraction": 0.001})
    out = tmp_path / "out"
    assert _cli("-c", str(cfg), "-o", str(out)).returncode == 0
    doc = json.loads((out / "recommendation.json").read_text())
    for c in doc["candidates"]:
        conf = c["config"]
        per_request = 512 + 16 // 2
        assert (
            conf["kv_load_concurrency_capacity"] == conf["kv_load_capacity_tokens"] // per_request
        )
        assert conf["concurrency"] == max(1, int(0.001 * conf["kv_load_concurrency_capacity"]))
        load = c["prediction_config"]["traffic"]["load"]
        assert load == {"type": "concurrency", "concurrency": conf["concurrency"]}


def test_optimizer_search_samples_max_trials(tmp_path: Path) -> None:
    cfg = _small(tmp_path, optimizer={"algorithm": "random", "max_trials": 2, "seed": 3})
    out = tmp_path / "out"
    r = _cli("-c", str(cfg), "-o", str(out), "--search", "optimizer")
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "recommendation.json").read_text())
    assert doc["counts"]["evaluated"] == 2
    assert "random sample of 2 of 6 candidates (seed 3)" in doc["provenance"]["search_strategy"]
    cfg2 = _small(tmp_path, optimizer={"algorithm": "bayesian"})
    r = _cli("-c", str(cfg2), "-o", str(tmp_path / "o2"), "--search", "optimizer")
    assert r.returncode == 2 and "no Bayesian optimizer" in r.stderr


def test_halving_runs_short_rungs_and_ranks_only_full_runs(tmp_path: Path) -> None:
    cfg = _small(tmp_path)
    a, b = tmp_path / "a", tmp_path / "b"
    r = _cli("-c", str(cfg), "-o", str(a), "--search", "halving", "-j", "2")
    assert r.returncode == 0, r.stderr
    assert _cli("-c", str(cfg), "-o", str(b), "--search", "halving").returncode == 0
    for name in ("recommendation.json", "recommendation.csv", "candidates.parquet"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    doc = json.loads((a / "recommendation.json").read_text())
    # 6 candidates at 2 requests, the best 2 at 6, the best of those at all 24
    assert "kept 6 -> 2 -> 1" in doc["provenance"]["search_strategy"]
    assert doc["counts"]["evaluated"] == 1
    assert len(list((a / "candidates").glob("*-at-16th.yaml"))) == 6
    assert len(list((a / "candidates").glob("*-at-4th.yaml"))) == 2
    (best,) = doc["candidates"]
    assert best["prediction_config"]["traffic"]["stop"]["requests"] == 24
    assert best["metrics"]["completed_requests"] == 24
    # the survivor is the exhaustive run's best here (the short runs order these the same)
    full = tmp_path / "full"
    assert _cli("-c", str(cfg), "-o", str(full)).returncode == 0
    exhaustive = json.loads((full / "recommendation.json").read_text())
    by_id = {c["candidate_id"]: c for c in exhaustive["candidates"]}
    top = exhaustive["views"]["top_n"][0]
    assert by_id[top]["config"] == best["config"] and by_id[top]["score"] == best["score"]


def test_a_budget_starts_candidates_in_seeded_random_order(tmp_path: Path, monkeypatch) -> None:
    import random

    from aisim.recommend import run as rr
    from aisim.recommend.spec import load_recommend

    started: list[list[str]] = []
    simulate = rr._Runner.simulate

    def spy(self, runnable, fraction, deadline=None, longest_first=True):
        assert deadline is not None and not longest_first
        started.append([c[0] for c in runnable])
        return simulate(self, runnable, fraction, deadline, longest_first)

    monkeypatch.setattr(rr._Runner, "simulate", spy)
    spec = load_recommend(_small(tmp_path, optimizer={"seed": 5}))
    out = rr.recommend(spec, tmp_path / "a", budget_s=600.0)
    ids = [f"candidate-{n:06d}" for n in range(1, 7)]
    order = list(range(6))
    random.Random(5).shuffle(order)
    assert started == [[ids[i] for i in order]]
    assert "within --budget-s 600: started in seeded random order" in out.search
    assert len(out.entries) == 6  # everything finished within the budget
    started.clear()
    out = rr.recommend(spec, tmp_path / "b", budget_s=600.0, search="halving")
    assert len(started) == 3 and started[0] == [ids[i] for i in order]
    assert "later rungs best first" in out.search and "kept 6 -> 2 -> 1" in out.search


def test_halving_shortens_request_stops_and_keeps_the_best_feasible() -> None:
    from aisim.recommend.run import _best, _shortened

    raw = {"traffic": {"stop": {"requests": 24}}}
    assert _shortened(raw, 1 / 16)["traffic"]["stop"]["requests"] == 2  # rounded up
    assert _shortened({"traffic": {"stop": {"requests": 3}}}, 1 / 16)["traffic"]["stop"] == {
        "requests": 1
    }
    unit = _shortened({"traffic": {"stop": {"requests_per_load_unit": 8.0}}}, 1 / 4)
    assert unit["traffic"]["stop"]["requests_per_load_unit"] == 2.0
    assert raw["traffic"]["stop"]["requests"] == 24  # the original is left alone
    entries = [
        {**_entry("c1", 5.0, 1), "status": "feasible"},
        {**_entry("c2", 9.0, 2), "status": "feasible"},
        {**_entry("c3", 99.0, 1), "status": "infeasible"},
        {**_entry("c4", 7.0, 1), "status": "feasible"},
    ]
    assert _best("throughput_per_gpu", entries, 2) == ["c2", "c4"]
    assert _best("throughput_per_gpu", entries, 4) == ["c2", "c4", "c1", "c3"]


def test_parse_refuses_unknown_model_in_one_line() -> None:
    with pytest.raises(ConfigError):
        Space(parse_recommend(_raw(engine__model="nobody/none"), "rec.yaml"))


@pytest.mark.skipif(
    __import__("importlib").util.find_spec("ray") is None,
    reason="Ray is not installed: pip install -e '.[ray]' (CI installs it with [test])",
)
def test_local_and_ray_executors_write_the_same_files(tmp_path: Path) -> None:
    cfg = _small(tmp_path)
    local, remote = tmp_path / "local", tmp_path / "ray"
    assert _cli("-c", str(cfg), "-o", str(local), "-j", "2").returncode == 0
    r = _cli("-c", str(cfg), "-o", str(remote), "--executor", "ray")
    assert r.returncode == 0, r.stderr
    for name in ("recommendation.json", "recommendation.csv", "candidates.parquet"):
        assert (local / name).read_bytes() == (remote / name).read_bytes(), name
