"""engine.backend_version: AISimulate 0.13's queryable versions (its `current` / `next` slots per
hardware and backend, or those aliases) are accepted, any other version is a config error, and
op-level timing prices every slot version, `next` from its backward-filled tables.

Oracle evidence (b200_sxm): vLLM 0.24.0 / current and 0.31.0 / next run, 0.19.0 / 0.22.0 /
0.25.0 / 0.27.1 / previous are refused; TRT-LLM 1.3.0rc20 / 1.3.0rc23 run, 1.2.0rc5 / rc10 / rc11
are refused. With fixed timing the version reads no data: 0.31.0 gives the 0.24.0 figures.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aisim.config import load_config
from aisim.prediction import run_prediction
from tests.parity_rule import mismatches

GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize(
    ("golden", "version", "concrete"),
    [
        ("single-request", "current", "0.24.0"),
        ("single-request", "next", "0.31.0"),
        ("single-request", "0.31.0", "0.31.0"),
        ("trtllm-basic", "next", "1.3.0rc23"),
        ("trtllm-basic", "1.3.0rc23", "1.3.0rc23"),
        ("trtllm-basic", "current", "1.3.0rc20"),
    ],
)
def test_slot_versions_run_under_fixed_timing(golden: str, version: str, concrete: str) -> None:
    folder = GOLDEN / golden
    overrides = (f"engine.backend_version={version}",)
    cfg = load_config(str(folder / "config.yaml"), overrides)
    assert cfg.engine.backend_version == concrete
    ref = json.loads((folder / "prediction.json").read_text())
    pred = run_prediction(str(folder / "config.yaml"), overrides)
    assert not mismatches(pred.prediction, ref)


def test_current_alias_prices_op_level_like_the_version() -> None:
    folder = GOLDEN / "fp32-checkpoint-op-level"
    ref = json.loads((folder / "prediction.json").read_text())
    pred = run_prediction(str(folder / "config.yaml"), ("engine.backend_version=current",))
    assert not mismatches(pred.prediction, ref)
    assert pred.prediction["prediction_provenance"]["aggregated"]["data_version"] == "0.24.0"


def test_next_alias_prices_op_level_like_the_version() -> None:
    """`next` is AISimulate's next slot, priced from its backward-filled tables (the golden
    pins 0.31.0 itself): the alias gives the same figures and reports the concrete version."""
    folder = GOLDEN / "next-vllm-b200-dense"
    ref = json.loads((folder / "prediction.json").read_text())
    pred = run_prediction(str(folder / "config.yaml"), ("engine.backend_version=next",))
    assert not mismatches(pred.prediction, ref)
    assert pred.prediction["prediction_provenance"]["aggregated"]["data_version"] == "0.31.0"


def test_next_differs_from_current_where_the_data_does() -> None:
    """The next tables are not the current ones relabelled: vLLM 0.31.0 reads 0.27.1 / 0.25.0
    rows (and no lane order), so the same deployment prices differently at 0.24.0."""
    folder = GOLDEN / "next-vllm-b200-dense"
    ref = json.loads((folder / "prediction.json").read_text())
    pred = run_prediction(str(folder / "config.yaml"), ("engine.backend_version=0.24.0",))
    assert mismatches(pred.prediction, ref)
