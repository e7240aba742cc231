"""engine.backend_version: AISimulate 0.13's queryable versions (its `current` / `next` slots per
hardware and backend, or those aliases) are accepted, any other version is a config error, and
op-level timing at a version aisim has no op-time tables for is refused as not available yet.

Oracle evidence (b200_sxm): vLLM 0.24.0 / current and 0.31.0 / next run, 0.19.0 / 0.22.0 /
0.25.0 / 0.27.1 / previous are refused; TRT-LLM 1.3.0rc20 / 1.3.0rc23 run, 1.2.0rc5 / rc10 / rc11
are refused. With fixed timing the version reads no data: 0.31.0 gives the 0.24.0 figures.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aisim.config import load_config, unsupported_features
from aisim.errors import NotAvailableError
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


@pytest.mark.parametrize(
    ("golden", "version"),
    [
        ("fp32-checkpoint-op-level", "next"),
        ("fp32-checkpoint-op-level", "0.31.0"),
        ("dense-trtllm-c64-r256", "1.3.0rc23"),
    ],
)
def test_next_versions_under_op_level_timing_are_not_available(golden: str, version: str) -> None:
    path = str(GOLDEN / golden / "config.yaml")
    lines = unsupported_features(load_config(path, (f"engine.backend_version={version}",)))
    assert len(lines) == 1 and lines[0].startswith("engine.backend_version: ")
    assert "not available yet" in lines[0] and "'current'" in lines[0]
    with pytest.raises(NotAvailableError, match=r"engine\.backend_version"):
        run_prediction(path, (f"engine.backend_version={version}",))
