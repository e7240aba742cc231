"""The Python API: aisim.predict / aisim.sweep for notebooks; the CLI gives the same results."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from click.testing import CliRunner

import aisim
from aisim.cli import main
from tests.analysis_configs import OP_LEVEL


def test_predict_accepts_path_yaml_text_and_dict(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(OP_LEVEL)
    by_path = aisim.predict(str(cfg), capture_requests=True, capture_passes=True)
    by_text = aisim.predict(OP_LEVEL)
    by_dict = aisim.predict(yaml.safe_load(OP_LEVEL))
    assert by_path.prediction_sha256 == by_text.prediction_sha256 == by_dict.prediction_sha256
    assert by_path.summary["completed_requests"] == 48
    assert isinstance(by_path.requests, pa.Table) and by_path.requests.num_rows == 48
    assert isinstance(by_path.passes, pa.Table) and by_path.passes.num_rows > 0
    with pytest.warns(UserWarning, match="did not capture it"):
        assert by_text.requests is None and by_text.passes is None
    res = CliRunner().invoke(main, ["predict", "-c", str(cfg), "--format", "json"])
    assert json.loads(res.stdout.splitlines()[-1])["prediction_sha256"] == (
        by_path.prediction_sha256
    )


def test_overrides_and_write(tmp_path: Path) -> None:
    r = aisim.predict(OP_LEVEL, overrides=["traffic.load.concurrency=2"], capture_passes=True)
    assert max(r.passes.column("running").to_pylist()) <= 2
    digest = r.write(tmp_path / "out")
    assert (tmp_path / "out" / "prediction.sha256").read_text().strip() == digest
    assert (tmp_path / "out" / "passes.parquet").exists()


def test_sweep_returns_the_table(tmp_path: Path) -> None:
    table = aisim.sweep(
        yaml.safe_load(OP_LEVEL), {"traffic.load.concurrency": [1, 3]}, out_dir=tmp_path / "sw"
    )
    assert table.num_rows == 2 and table.column("status").to_pylist() == ["ok", "ok"]
    assert (tmp_path / "sw" / "base.yaml").exists()
    lone = aisim.predict(tmp_path / "sw" / "base.yaml", overrides=["traffic.load.concurrency=3"])
    assert table.column("prediction_sha256")[1].as_py() == lone.prediction_sha256


def test_api_names_survive_importing_the_modules() -> None:
    """aisim.predict / aisim.sweep are the notebook functions even after the CLI's modules
    (aisim.prediction, aisim.sweeps) are imported: no module shadows them."""
    import types

    import aisim.prediction
    import aisim.sweeps.run

    assert isinstance(aisim.predict, types.FunctionType)
    assert isinstance(aisim.sweep, types.FunctionType)


@pytest.mark.parametrize("enabled", [True, False])
def test_a_prediction_leaves_the_garbage_collector_as_it_found_it(enabled: bool) -> None:
    import gc

    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        frozen = gc.get_freeze_count()
        aisim.predict(OP_LEVEL)
        assert gc.isenabled() is enabled
        assert gc.get_freeze_count() == frozen
    finally:
        gc.enable() if was else gc.disable()
