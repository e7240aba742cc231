"""Goodput under evaluation.sla: the attainment rule, and every output that carries it.

The end-to-end figures are AISimulate's, pinned in tests/golden/sla-* and pd-sla-* (checked
field by field by test_golden); these tests check the rule on hand-made latencies and that the
API, summary.parquet, the sweep table and the terminal table show the same fields.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa

import aisim
from aisim.config.schema import Sla
from aisim.metrics import GOODPUT_KEYS, goodput_fields
from aisim.output.table import render_table

GOLDEN = Path(__file__).parent / "golden"
BOUNDARY = GOLDEN / "sla-ttft-itl-boundary"


def _requests(arrival, first, last, ntok):
    return SimpleNamespace(
        arrival_ms=np.array(arrival, dtype=np.float64),
        first_token_ms=np.array(first, dtype=np.float64),
        last_token_ms=np.array(last, dtype=np.float64),
        num_generated=np.array(ntok, dtype=np.int64),
    )


def test_bounds_are_inclusive_and_rates_divide_by_the_duration() -> None:
    # TTFT 10 / 10.5 / 10, mean ITL 2 / 2 / 2.5 against ttft 10, itl 2
    req = _requests([0.0, 0.0, 0.0], [10.0, 10.5, 10.0], [24.0, 24.5, 27.5], [8, 8, 8])
    got = goodput_fields(req, slice(None), 0.5, Sla(ttft_ms=10.0, itl_ms=2.0))
    assert got == {
        "goodput_completed_requests": 1,
        "goodput_request_throughput_rps": 2.0,
        "goodput_output_throughput_tok_s": 16.0,
    }
    e2e = goodput_fields(req, slice(None), 0.5, Sla(e2e_ms=24.5))
    assert e2e["goodput_completed_requests"] == 2


def test_one_token_outputs_skip_the_itl_bound() -> None:
    req = _requests([0.0, 0.0], [5.0, 5.0], [5.0, 9.0], [1, 2])
    got = goodput_fields(req, slice(None), 1.0, Sla(itl_ms=1.0))
    assert got["goodput_completed_requests"] == 1
    assert got["goodput_output_throughput_tok_s"] == 1.0


def test_mean_itl_is_formed_from_the_two_latencies() -> None:
    # arrival 0.1, tokens at 0.2 and 0.7: e2e - ttft = 0.5, last - first = 0.49999999999999994
    req = _requests([0.1], [0.2], [0.7], [2])
    assert (0.7 - 0.1) - (0.2 - 0.1) == 0.5 > 0.7 - 0.2
    assert (
        goodput_fields(req, slice(None), 1.0, Sla(itl_ms=0.7 - 0.2))["goodput_completed_requests"]
        == 0
    )
    assert goodput_fields(req, slice(None), 1.0, Sla(itl_ms=0.5))["goodput_completed_requests"] == 1


def test_api_summary_parquet_and_table_show_goodput() -> None:
    ref = json.loads((BOUNDARY / "prediction.json").read_text())
    r = aisim.predict(BOUNDARY / "config.yaml")
    assert {k: r.summary[k] for k in GOODPUT_KEYS} == {k: ref[k] for k in GOODPUT_KEYS}
    assert ref["goodput_completed_requests"] == 7
    schema = r.summary_table.schema
    assert schema.field("goodput_completed_requests").type == pa.int64()
    assert schema.field("goodput_request_throughput_rps").metadata[b"unit"] == b"requests/s"
    assert r.summary_table.column("goodput_completed_requests").to_pylist() == [7]
    table = render_table(r.summary)
    assert "Goodput Request Count (requests)" in table
    assert "Goodput Request Throughput (requests/sec)" in table


def test_no_bound_no_goodput() -> None:
    for overrides in (["evaluation.sla={}"], ["evaluation={}"]):
        r = aisim.predict(BOUNDARY / "config.yaml", overrides=overrides)
        assert not any(k.startswith("goodput") for k in r.summary), overrides
        assert "Goodput" not in render_table(r.summary)


def test_sweep_rows_carry_goodput(tmp_path: Path) -> None:
    table = aisim.sweep(
        BOUNDARY / "config.yaml",
        {"evaluation.sla.itl_ms": [4.285714285714286, 1.0]},
        out_dir=tmp_path / "sw",
    )
    assert table.column("status").to_pylist() == ["ok", "ok"]
    assert table.schema.field("goodput_completed_requests").type == pa.int64()
    assert table.column("goodput_completed_requests").to_pylist() == [7, 0]
