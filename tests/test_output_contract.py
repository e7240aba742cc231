"""The output contract (aisim/output/contract.py) holds every prediction.json aisim writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aisim.output.contract import (
    ALWAYS,
    EXTENSION_FIELDS,
    FIELDS,
    HOST_FIELDS,
    contract_problems,
)
from aisim.prediction import run_prediction
from tests.analysis_configs import OP_LEVEL, PD_OP_LEVEL, PRESSURE

GOLDEN = Path(__file__).parent / "golden"
SLA = "\nevaluation:\n  sla: {ttft_ms: 500, itl_ms: 50}\n"
NOTHING_COMPLETES = PRESSURE.replace("context_length: max", "context_length: 32")
DEFAULT_CAPACITY = OP_LEVEL.replace(
    "capacity: {type: fixed, blocks: 4096}", "capacity: {type: default}"
)


@pytest.mark.parametrize(
    "text",
    [OP_LEVEL, PRESSURE, PD_OP_LEVEL, OP_LEVEL + SLA, NOTHING_COMPLETES, DEFAULT_CAPACITY],
    ids=["op-level", "fixed-pressure", "pd", "sla", "no-completions", "default-capacity"],
)
def test_aisim_predictions_keep_the_contract(tmp_path: Path, text: str) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    pred = run_prediction(str(cfg), capture=True).prediction
    assert contract_problems(pred) == []
    optional = {name for name in pred if FIELDS[name].presence != ALWAYS}
    expected = {
        "sla": {
            "goodput_completed_requests",
            "goodput_request_throughput_rps",
            "goodput_output_throughput_tok_s",
        },
        "no-completions": {"diagnostic", "prediction_status", "stop_reason"},
        "default-capacity": {"kv_cache_precision"},
    }
    name = {
        OP_LEVEL + SLA: "sla",
        NOTHING_COMPLETES: "no-completions",
        DEFAULT_CAPACITY: "default-capacity",
    }.get(text)
    # captured runs add where their latency went (an aisim extension)
    assert optional == expected.get(name, set()) | {"latency_attribution"}


def test_aisimulate_goldens_keep_the_contract() -> None:
    """Every field AISimulate writes in the pinned runs is declared with its type."""
    seen = set()
    for path in sorted(GOLDEN.glob("*/prediction.json")):
        pred = json.loads(path.read_text())
        seen |= set(pred)
        # the pinned files leave out the host times (they differ between runs)
        host = dict.fromkeys(HOST_FIELDS, 1.0)
        assert contract_problems({**host, **pred}) == [], path.parent.name
    # the pinned runs show every declared field (the host times in some of them) but aisim's own
    assert set(FIELDS) - seen <= set(HOST_FIELDS) | set(EXTENSION_FIELDS)
    assert not seen & set(EXTENSION_FIELDS)


def test_contract_catches_drift() -> None:
    good = {
        **dict.fromkeys(HOST_FIELDS, 1.0),
        **json.loads((GOLDEN / "dense-vllm-c8-r256" / "prediction.json").read_text()),
    }
    assert contract_problems(good) == []
    assert contract_problems({**good, "new_field": 1}) == ["new_field: not a declared output field"]
    assert contract_problems({**good, "num_requests": 1.0}) == ["num_requests: float, declared int"]
    assert contract_problems({**good, "gpu_hours": None}) == ["gpu_hours: null but not nullable"]
    missing = dict(good)
    del missing["duration_ms"]
    assert contract_problems(missing) == ["duration_ms: missing"]


def test_docs_outputs_page_is_the_generated_one() -> None:
    from aisim.output.contract import markdown

    page = Path(__file__).resolve().parents[1] / "docs" / "outputs.md"
    assert page.read_text() == markdown(), "regenerate: python -m aisim.output.contract"
