"""Energy evidence and run-level power (docs/timing.md 6).

Golden figures: AISimulate 0.13.0. Per-op and 1-request figures are the worked examples of
docs/timing.md 6.6 (observed / reproduced runs of Qwen3-32B TP4 and Qwen3-0.6B TP1 on TRT-LLM
1.3.0rc20); the 256-request run is pinned in tests/golden_energy/ (see its `about`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from aisim.errors import OpTableError
from aisim.kernels import optime_pass as KP
from aisim.models import load_model
from aisim.timing.energy import (
    Accumulators,
    EnergyPricer,
    power_report,
    unsupported_report,
)
from aisim.timing.family_dense import build_dense_plan
from aisim.timing.plan_record import Deployment
from tests.reference.pass_pricing import DensePlanReading

GOLDEN_RUN = Path(__file__).parent / "golden_energy" / "dense_trtllm_c64_r256.json"
_PRICERS: dict = {}


def pricer(
    model: str = "Qwen/Qwen3-32B", tp: int = 4, backend: str = "trtllm", version: str = "1.3.0rc20"
) -> EnergyPricer:
    key = (model, tp, backend, version)
    if key not in _PRICERS:
        try:
            from aisim.timing.tables import load_tables

            tables, system = load_tables("b200_sxm", backend, version)
        except (ImportError, OpTableError) as exc:  # pragma: no cover - table not shipped
            pytest.skip(f"compiled op-time table not present ({exc})")
        plan = build_dense_plan(
            load_model(model), tables, system, Deployment(backend, version, tensor=tp)
        )
        _PRICERS[key] = EnergyPricer(plan)
    ep = _PRICERS[key]
    ep.acc = Accumulators(len(ep.plan.op_names))
    return ep


def _ops(evidence: list[dict]) -> dict[str, dict]:
    return {e["name"]: e for e in evidence}


# ------------------------------------------------------------------- per-op (docs/timing.md 6.6)


@pytest.mark.golden
def test_prefill_per_op_energy() -> None:
    ep = pricer()
    ops = _ops(ep.prefill_evidence(1, 1024, 0))
    assert ops["context_qkv_gemm"]["latency_ms"] == 1.2651861826578776
    assert ops["context_qkv_gemm"]["energy_wms"] == 1239.9925302026113
    assert ops["context_gate_ffn1_gemm"]["latency_ms"] == 5.86664472822896
    assert ops["context_gate_ffn1_gemm"]["energy_wms"] == 3444.0574782569156
    assert ops["context_attention"]["latency_ms"] == 4.6605516546093755
    assert ops["context_attention"]["energy_wms"] == 1767.9415084838868
    # the energy-less fused extras still count as covered
    assert ops["context_attention"]["covered_latency_ms"] == 4.6605516546093755
    assert ops["context_ar_1"]["latency_ms"] == 3.4248551177978515
    assert ops["context_ar_1"]["energy_wms"] == 1024.1682463193795
    for name in (
        "context_embedding",
        "context_add_norm_1",
        "context_add_norm_2",
        "context_act_gate",
        "context_p2p",
    ):
        assert ops[name]["energy_wms"] is None
        assert ops[name]["covered_latency_ms"] == 0.0
    assert ops["context_add_norm_1"]["source"] == "empirical"
    assert ops["context_attention"]["source"] == "mixed"
    assert ops["context_qkv_gemm"]["source"] == "silicon"
    lat = cov = en = 0.0
    for e in ops.values():
        lat += e["latency_ms"]
        cov += e["covered_latency_ms"]
        en += e["energy_wms"] or 0.0
    assert (lat, cov, en) == (24.59240663850414, 22.731624612530116, 10108.16036005459)


@pytest.mark.golden
def test_prefix_scales_attention_energy() -> None:
    ops = _ops(pricer().prefill_evidence(1, 1024, 512))
    assert ops["context_attention"]["latency_ms"] == 4.129095660957032
    assert ops["context_attention"]["energy_wms"] == 1325.9561313629151


@pytest.mark.golden
def test_decode_per_op_energy() -> None:
    ep = pricer()
    ops = _ops(ep.decode_evidence(1, 1025))
    assert ops["generation_attention"]["energy_wms"] == 251.06774078493444
    lat = en = 0.0
    for e in ops.values():
        lat += e["latency_ms"]
        en += e["energy_wms"] or 0.0
    assert (lat, en) == (7.390312495740691, 3452.949137992425)


@pytest.mark.golden
def test_one_request_run() -> None:
    """P 1024 / O 4: one prefill and three decodes (docs/timing.md 6.6)."""
    ep = pricer()
    ep.record_prefill(1, 1024, 0)
    for ctx in (1025, 1026, 1027):
        ep.record_decode(1, ctx)
    power, coverage, diag = ep.report()
    assert (power, coverage) == (437.6711714299286, 0.9229841522061932)
    assert diag["latency_ms"] == 46.7635863257078
    assert diag["covered_latency_ms"] == 43.162049078954546
    assert diag["energy_wms"] == 20467.073607437123
    assert diag["publication_status"] == "available"
    prefill, decode = diag["phases"]
    assert (prefill["power_w"], prefill["power_coverage"]) == (
        411.02770089318227,
        0.9243350984990378,
    )
    assert (decode["latency_ms"], decode["energy_wms"], decode["covered_latency_ms"]) == (
        22.171179687203658,
        10358.913247382532,
        20.430424466424434,
    )
    assert (decode["power_w"], decode["power_coverage"]) == (467.2242701348586, 0.9214856744053218)


@pytest.mark.golden
def test_gate_failing_tp1() -> None:
    """Qwen3-0.6B TP1, one request 1024 / 8: coverage under 0.9 withholds power (8.5 d)."""
    ep = pricer("Qwen/Qwen3-0.6B", 1)
    ep.record_prefill(1, 1024, 0)
    for ctx in range(1025, 1032):
        ep.record_decode(1, ctx)
    power, coverage, diag = ep.report()
    assert power is None
    assert coverage == 0.8741238443384941
    assert diag["covered_latency_ms"] == 15.301823344983273
    assert diag["latency_ms"] == 17.505326555372882
    assert diag["energy_wms"] == 6814.61184069568
    assert diag["publication_status"] == "withheld"
    assert [p["publication_status"] for p in diag["phases"]] == ["withheld", "withheld"]
    ar = {o["name"]: o for o in diag["phases"][0]["operations"]}["context_ar_1"]
    assert ar["source"] == "empirical" and ar["status"] == "missing"


@pytest.mark.golden
def test_pinned_256_request_run() -> None:
    """Every number of AISimulate's power_diagnostics, replaying the run's evaluations."""
    golden = json.loads(GOLDEN_RUN.read_text())
    ep = pricer()
    for ev in golden["evaluations"]:
        if ev[0] == "p":
            ep.record_prefill(*ev[1:])
        else:
            ep.record_decode(*ev[1:])
    power, coverage, diag = ep.report()
    assert (power, coverage) == (golden["power_w"], golden["power_coverage"])
    assert json.dumps(diag, sort_keys=True) == json.dumps(
        golden["power_diagnostics"], sort_keys=True
    )


def test_vllm_has_no_energy() -> None:
    ep = pricer(backend="vllm", version="0.24.0")
    ep.record_prefill(3, 2000, 100)
    ep.record_decode(64, 1500)
    power, coverage, diag = ep.report()
    assert power is None and coverage == 0.0
    assert diag["publication_status"] == "withheld"
    assert "energy_wms" not in diag and diag["covered_latency_ms"] == 0.0
    for phase in diag["phases"]:
        assert phase["source"] == "mixed" and phase["source_kind"] == "missing"
        assert phase["publication_status"] == "withheld"
        assert all(o["status"] == "missing" and "energy_wms" not in o for o in phase["operations"])


# ------------------------------------------------- the kernels against a plain-Python reading

REL = 1e-12


def _close(got: float, want: float) -> bool:
    return abs(got - want) <= REL * abs(want)


@pytest.mark.parametrize(
    ("backend", "version", "tp"),
    [("trtllm", "1.3.0rc20", 4), ("vllm", "0.24.0", 4), ("trtllm", "1.3.0rc20", 1)],
)
def test_random_passes_match_the_python_reading(backend: str, version: str, tp: int) -> None:
    """Per op latency and energy of random shapes (grid interiors, staircase edges, holds,
    IDW GEMMs, allreduce curve ends) against tests/reference/pass_pricing.py; the phase total
    is the op sum in op order; covered latency is the latency of ops with energy."""
    model = "Qwen/Qwen3-32B" if tp == 4 else "Qwen/Qwen3-0.6B"
    ep = pricer(model, tp, backend, version)
    reading = DensePlanReading(ep.plan.arrays)
    k = ep.plan.num_ctx_ops
    rng = np.random.default_rng(7)
    bad = []
    for _ in range(150):
        b = int(rng.integers(1, 300))
        isl = int(rng.integers(1, 40000))
        pfx = int(rng.integers(0, isl)) if rng.random() < 0.5 else 0
        ctx = int(rng.integers(1, 140000))
        for phase, total, want, ops in (
            ("prefill", ep.prefill(b, isl, pfx), reading.prefill(b, isl, pfx), slice(0, k)),
            ("decode", ep.decode(b, ctx), reading.decode(b, ctx), slice(k, None)),
        ):
            ms, en, cov = ep.ms[ops], ep.energy_wms[ops], ep.covered_ms[ops]
            acc = 0.0
            for i, (lat, energy) in enumerate(want):
                acc += float(ms[i])
                if not (_close(ms[i], lat) and _close(en[i], energy)):
                    name = ep.plan.op_names[ops][i]
                    bad.append(
                        f"{phase} {b} {isl} {pfx} {ctx} {name}: {ms[i]} vs {lat} ms, "
                        f"{en[i]} vs {energy} W*ms"
                    )
                assert cov[i] == (ms[i] if en[i] > 0.0 else 0.0)
            assert total == acc
    assert not bad, "\n".join(bad[:10])


def test_accumulate_kernel() -> None:
    out = np.array([1.0, 2.0, 3.0])
    en = np.array([0.0, 5.0, 6.0])
    cov = np.array([0.0, 2.0, 3.0])
    acc = [np.zeros(3), np.zeros(3), np.zeros(3)]
    KP.accumulate(1, 3, out, en, cov, *acc)
    KP.accumulate(1, 3, out, en, cov, *acc)
    assert acc[0].tolist() == [0.0, 4.0, 6.0]
    assert acc[1].tolist() == [0.0, 10.0, 12.0]
    assert acc[2].tolist() == [0.0, 4.0, 6.0]


# ----------------------------------------------------------- aggregation on hand-made sums


class _Acc:
    def __init__(self, ms, cov, en, prefill_evals=1, decode_evals=1):
        self.ms = np.asarray(ms, float)
        self.covered_ms = np.asarray(cov, float)
        self.energy_wms = np.asarray(en, float)
        self.prefill_evals = prefill_evals
        self.decode_evals = decode_evals


NAMES = ("context_b", "context_a", "generation_b", "generation_a")
SOURCES = ("silicon", "empirical", "silicon", "mixed")


def test_aggregation_hand_made() -> None:
    acc = _Acc([10.0, 1.0, 4.0, 2.0], [10.0, 0.0, 3.0, 2.0], [5000.0, 0.0, 1500.0, 600.0])
    power, coverage, diag = power_report(NAMES, SOURCES, 2, acc)
    # L 17, C 15, U 2: 15 / 9 < 2 fails the gate
    assert power is None
    assert coverage == 15.0 / 17.0
    assert diag["publication_status"] == "withheld"
    assert diag["energy_wms"] == 7100.0
    prefill, decode = diag["phases"]
    assert prefill["power_w"] == 5000.0 / 11.0 and prefill["power_coverage"] == 10.0 / 11.0
    assert prefill["source"] == "mixed" and prefill["source_kind"] == "mixed"
    assert [o["name"] for o in prefill["operations"]] == ["context_a", "context_b"]
    a, b = prefill["operations"]
    assert a == {
        "covered_latency_ms": 0.0,
        "latency_ms": 1.0,
        "name": "context_a",
        "power_coverage": 0.0,
        "source": "empirical",
        "source_kind": "missing",
        "status": "missing",
        "uncovered_reason": "timing provider returned latency without positive energy evidence",
    }
    assert b["energy_contribution"] == 1.0 and b["source_kind"] == "measured"
    assert b["status"] == "available" and "uncovered_reason" not in b
    gb = {o["name"]: o for o in decode["operations"]}["generation_b"]
    assert gb["status"] == "partial" and gb["power_coverage"] == 0.75
    assert gb["uncovered_reason"] == (
        "some accumulated operation latency lacks positive energy evidence"
    )
    # decode: L 6, C 5, U 1: 5/9 < 1 -> withheld, coverage capped below the gate
    assert decode["power_w"] is None and decode["publication_status"] == "withheld"


def test_gate_edges() -> None:
    # exactly 90 % covered: qualifies; coverage floored at 0.9
    acc = _Acc([9.0, 1.0, 0.0, 0.0], [9.0, 0.0, 0.0, 0.0], [900.0, 0.0, 0.0, 0.0], decode_evals=0)
    power, coverage, diag = power_report(NAMES, SOURCES, 2, acc)
    assert power == 90.0 and coverage == 0.9
    assert diag["publication_status"] == "available"
    decode = diag["phases"][1]
    assert decode == {
        "covered_latency_ms": 0.0,
        "latency_ms": 0.0,
        "name": "decode",
        "operations": [],
        "power_coverage": 0.0,
        "power_w": None,
        "publication_status": "not_observed",
        "source": "missing",
        "source_kind": "missing",
    }
    # 89.99 %: withheld, coverage reported as is
    acc = _Acc(
        [8.999, 1.001, 0.0, 0.0], [8.999, 0.0, 0.0, 0.0], [900.0, 0.0, 0.0, 0.0], decode_evals=0
    )
    power, coverage, _ = power_report(NAMES, SOURCES, 2, acc)
    assert power is None and coverage == 8.999 / (8.999 + 1.001)


def test_nothing_observed() -> None:
    acc = _Acc([0.0] * 4, [0.0] * 4, [0.0] * 4, 0, 0)
    power, coverage, diag = power_report(NAMES, SOURCES, 2, acc)
    assert power is None and coverage == 0.0
    assert diag["publication_status"] == "not_observed"
    assert diag["unavailable_reason"] == "no forward-pass timing evidence was observed"
    assert diag["latency_ms"] == 0.0 and "energy_wms" not in diag


def test_unsupported() -> None:
    power, coverage, diag = unsupported_report()
    assert power is None and coverage is None
    assert diag == {
        "coverage_gate": 0.9,
        "energy_unit": "W-ms",
        "latency_unit": "ms",
        "phases": [],
        "power_coverage": None,
        "power_w": None,
        "power_w_unit": "W",
        "publication_status": "unsupported",
        "schema_version": "1.0",
        "scope": "active_forward_pass_per_gpu",
        "unavailable_reason": "one or more replay roles have no timing provider",
    }


def test_sol_mode_has_no_energy() -> None:
    """SOL mode: AISimulate's per-op SOL figures, no energy evidence, every source `sol`."""
    from aisim.timing.tables import load_tables

    try:
        tables, system = load_tables("b200_sxm", "trtllm", "1.3.0rc20")
    except (ImportError, OpTableError) as exc:  # pragma: no cover - table not shipped
        pytest.skip(f"compiled op-time table not present ({exc})")
    plan = build_dense_plan(
        load_model("Qwen/Qwen3-32B"),
        tables,
        system,
        Deployment("trtllm", "1.3.0rc20", tensor=4, mode="SOL"),
    )
    ep = EnergyPricer(plan)
    golden = json.loads(
        (Path(__file__).parent / "golden_optable" / "qwen3_32b_tp4.json").read_text()
    )["configs"]["qwen3_32b_tp4_trtllm_1.3.0rc20"]
    for case in ("prefill_1x1024", "decode_b64_kv1100"):
        c = golden["per_op_breakdown"][case]
        evidence = (
            ep.prefill_evidence(*c["prefill"])
            if "prefill" in c
            else ep.decode_evidence(*c["decode"])
        )
        for ev, ref in zip(evidence, c["ops"], strict=True):
            assert ev["name"] == ref["op"]
            assert abs(ev["latency_ms"] - ref["sol_ms"]) <= 1e-9 * ref["sol_ms"], ev
            assert ev["energy_wms"] is None and ev["covered_latency_ms"] == 0.0
    # pipeline 1: the p2p placeholder keeps its `silicon` tag, every other op is `sol`
    assert {
        src for name, src in zip(plan.op_names, ep.sources, strict=True) if not name.endswith("p2p")
    } == {"sol"}
    assert {
        src for name, src in zip(plan.op_names, ep.sources, strict=True) if name.endswith("p2p")
    } == {"silicon"}


# ------------------------------------------------------------- full-size seed runs (slow)


def _uniform_closed_loop(
    n: int,
    conc: int = 64,
    prompt: int = 1024,
    out: int = 128,
    budget: int = 8192,
    max_seqs: int = 256,
) -> list[tuple]:
    """Evaluations of a uniform closed-loop run without KV pressure or prefix hits (the rules of
    tests/reference/scheduler.py reduced to that case; same list on the 256-request golden)."""
    created = min(conc, n)
    waiting = list(range(created))
    comp: dict[int, int] = {}
    gen: dict[int, int] = {}
    running: list[int] = []
    evals: list[tuple] = []
    while running or waiting:
        left = budget
        sched = {}
        for r in running:
            if left <= 0:
                break
            k = min(prompt + gen[r] - comp[r], left)
            sched[r] = (comp[r], k)
            comp[r] += k
            left -= k
        while waiting and len(running) < max_seqs and left > 0:
            r = waiting.pop(0)
            running.append(r)
            gen[r] = 0
            k = min(prompt, left)
            sched[r] = (0, k)
            comp[r] = k
            left -= k
        bs_p = s_isl = s_pfx = bs_d = s_ctx = 0
        for r in running:
            if r in sched:
                before, k = sched[r]
                if before < prompt:
                    bs_p += 1
                    s_isl += min(before + k, prompt)
                    s_pfx += before
                if (gen[r] > 0 or k == 0) and before + k == prompt + gen[r]:
                    bs_d += 1
                    s_ctx += prompt + gen[r]
        if bs_p > 0 and s_isl // bs_p != s_pfx // bs_p:
            evals.append(("p", bs_p, s_isl // bs_p, s_pfx // bs_p))
        if bs_d > 0:
            evals.append(("d", bs_d, s_ctx // bs_d))
        for r in list(running):
            if r in sched and comp[r] == prompt + gen[r]:
                gen[r] += 1
                if gen[r] >= out:
                    running.remove(r)
                    if created < n:
                        waiting.append(created)
                        created += 1
    return evals


def test_uniform_replay_matches_pinned_evaluations() -> None:
    golden = json.loads(GOLDEN_RUN.read_text())
    assert [list(e) for e in _uniform_closed_loop(256)] == golden["evaluations"]


@pytest.mark.slow
@pytest.mark.golden
@pytest.mark.parametrize(
    ("backend", "version", "want"),
    [
        # AISimulate 0.13 full seed references dense-trtllm / dense-vllm (65,536 requests)
        (
            "trtllm",
            "1.3.0rc20",
            (
                537.7129037041044,
                0.9194029889947726,
                2186684.753643835,
                2010444.4984894397,
                1175808608.3673208,
            ),
        ),
        ("vllm", "0.24.0", (None, 0.0, 2297182.9362478643, 0.0, None)),
    ],
)
def test_full_seed_runs(backend: str, version: str, want: tuple) -> None:
    ep = pricer(backend=backend, version=version)
    for ev in _uniform_closed_loop(65536):
        if ev[0] == "p":
            ep.record_prefill(*ev[1:])
        else:
            ep.record_decode(*ev[1:])
    power, coverage, diag = ep.report()
    assert (
        power,
        coverage,
        diag["latency_ms"],
        diag["covered_latency_ms"],
        diag.get("energy_wms"),
    ) == want
