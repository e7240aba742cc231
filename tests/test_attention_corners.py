"""Attention pricing at the edges of the measured grids (docs/timing.md 4.2, 4.3).

Golden figures: AISimulate 0.13.0 per-op evaluations (latency and energy) of Qwen3-32B TP4 / TP8
on vLLM 0.24.0 and TRT-LLM 1.3.0rc20, pinned in tests/golden_optable/attention_corners.json:
isl below the context table's smallest prefill isl (16), with and without a cached prefix,
batch above the measured range and the staircase, isl above 16384, and decode with a tiny kv
and a huge batch or a kv beyond 131072.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from aisim.errors import OpTableError
from aisim.kernels import optime_attention as KA
from aisim.models import load_model
from aisim.timing.energy import EnergyPricer
from aisim.timing.family_dense import build_dense_plan
from aisim.timing.leaf_attention import attention_slice, lane_order, lane_ranks
from aisim.timing.plan_record import Deployment

CORNERS = json.loads(
    (Path(__file__).parent / "golden_optable" / "attention_corners.json").read_text()
)
REL = 1e-9
CASE_IDS = [(k, c) for k, cfg in CORNERS["configs"].items() for c in cfg["cases"]]

_PLANS: dict = {}


def _plan(key: str):
    if key not in _PLANS:
        cfg = CORNERS["configs"][key]
        try:
            from aisim.timing.tables import load_tables

            tables, system = load_tables("b200_sxm", cfg["backend"], cfg["version"])
        except (ImportError, OpTableError) as exc:  # pragma: no cover - table not shipped
            pytest.skip(f"compiled op-time table not present ({exc})")
        _PLANS[key] = build_dense_plan(
            load_model(cfg["model"]),
            tables,
            system,
            Deployment(cfg["backend"], cfg["version"], tensor=cfg["tp"], mode="SILICON"),
        )
    return _PLANS[key]


def _close(got: float, ref: float) -> bool:
    return abs(got - ref) <= REL * abs(ref)


@pytest.mark.golden
@pytest.mark.parametrize(("key", "case"), CASE_IDS, ids=[f"{k}-{c}" for k, c in CASE_IDS])
def test_corner_per_op_latency_and_energy(key: str, case: str) -> None:
    c = CORNERS["configs"][key]["cases"][case]
    pricer = EnergyPricer(_plan(key))
    if "prefill" in c:
        evidence = pricer.prefill_evidence(*c["prefill"])
    else:
        evidence = pricer.decode_evidence(*c["decode"])
    assert [ev["name"] for ev in evidence] == [name for name, _, _ in c["ops"]]
    for ev, (name, ref_ms, ref_en) in zip(evidence, c["ops"], strict=True):
        assert _close(ev["latency_ms"], ref_ms), (name, ev["latency_ms"], ref_ms)
        got_en = ev["energy_wms"] or 0.0
        assert _close(got_en, ref_en), (name, got_en, ref_en)


# ------------------------------------------------------------------- lane rule, hand tables


def _rows(rows: list[tuple[str, int, int, float]]) -> dict[str, dict[str, np.ndarray]]:
    """A context-attention family of (kernel_source, isl, batch, latency) rows, 16 heads."""
    n = len(rows)
    cols = {
        "kernel_source": np.array([r[0] for r in rows]),
        "isl": np.array([r[1] for r in rows], np.int64),
        "batch_size": np.array([r[2] for r in rows], np.int64),
        "latency": np.array([r[3] for r in rows]),
        "num_heads": np.full(n, 16, np.int64),
        "num_key_value_heads": np.full(n, 2, np.int64),
        "head_dim": np.full(n, 128, np.int64),
        "window_size": np.zeros(n, np.int64),
        "step": np.zeros(n, np.int64),
        "attn_dtype": np.full(n, "bfloat16"),
        "kv_cache_dtype": np.full(n, "bfloat16"),
    }
    return {"context_attention": cols}


def _nest_of(rows, backend="vllm", version="0.24.0"):
    par = np.zeros(KA.PAR_SIZE)
    lanes = lane_order(backend, version)
    return attention_slice(
        _rows(rows), "context_attention", lanes, "bfloat16", "bfloat16", 16, 2, 128, par
    )


def test_one_lane_per_key_the_first_of_the_order() -> None:
    pre, dec = "vllm_flashinfer_trtllmprefill", "vllm_flashinfer_trtllmdecode"
    rows = [
        (dec, 1, 1, 0.5),
        (pre, 16, 1, 0.01),
        (pre, 32, 1, 0.02),
        (dec, 64, 1, 0.9),
        ("vllm_flashinfer", 128, 1, 0.3),
    ]
    nest = _nest_of(rows)
    # the decode lane's isl 1 / 64 rows and the unranked lane never fill the prefill lane's gaps
    assert nest.v1.tolist() == [16.0, 32.0]
    assert nest.lat.tolist() == [0.01, 0.02]
    # a key the first lane lacks is served by the next lane present, alone
    nest = _nest_of([r for r in rows if r[0] != pre])
    assert nest.v1.tolist() == [1.0, 64.0]
    # unranked lanes serve only when no ranked lane has the key
    nest = _nest_of([("vllm_flashinfer", 128, 1, 0.3), ("vllm_flashinfer", 256, 2, 0.4)])
    assert nest.v1.tolist() == [128.0, 256.0]


def test_a_vllm_version_without_a_pinned_lane_order_ranks_lanes_by_first_row() -> None:
    """At vLLM 0.31.0 (AISimulate's next) no lane order is pinned: the lanes rank in the order
    their first rows appear in source order, and the first lane with the key serves it alone."""
    pre, dec = "vllm_flashinfer_trtllmprefill", "vllm_flashinfer_trtllmdecode"
    rows = [(dec, 1, 1, 0.5), (pre, 16, 1, 0.01), (dec, 16, 1, 0.7), (pre, 32, 1, 0.02)]
    assert lane_order("vllm", "0.31.0") == ()
    nest = _nest_of(rows, version="0.31.0")
    assert nest.v1.tolist() == [1.0, 16.0]
    assert nest.lat.tolist() == [0.5, 0.7]
    prefill_first = [rows[1], rows[0], rows[2], rows[3]]
    assert _nest_of(prefill_first, version="0.31.0").v1.tolist() == [16.0, 32.0]
    assert _nest_of(rows).v1.tolist() == [16.0, 32.0]  # 0.24.0: the prefill lane alone


def test_lane_ranks_follow_the_pinned_order_then_the_tables_first_rows() -> None:
    """Ranks come from the whole table, not the key slice: the pinned lanes, then the rest."""
    pre, dec = "vllm_flashinfer_trtllmprefill", "vllm_flashinfer_trtllmdecode"
    assert lane_ranks((), np.array([dec, pre, dec], object)) == {dec: 0, pre: 1}
    assert lane_ranks((pre,), np.array([dec, "", pre], object)) == {pre: 0, dec: 1, "default": 2}


def test_single_lane_keeps_its_isl_1_rows() -> None:
    # TRT-LLM's torch_flow lane measures isl 1 itself: those rows are part of its grid
    nest = _nest_of([("torch_flow", 1, 1, 0.005), ("torch_flow", 16, 1, 0.01)], "trtllm")
    assert nest.v1.tolist() == [1.0, 16.0]
