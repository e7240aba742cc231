"""The on-disk op-plan cache returns exactly the plan a fresh build gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from aisim.config import load_config
from aisim.engine.spec import resolve
from aisim.timing import provider
from aisim.timing.plan_cache import flat_arrays
from aisim.timing.pricer import PassPricer
from tests.test_cli import OP_LEVEL


def test_cached_plan_is_identical(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("AISIM_CACHE_DIR", str(tmp_path))
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(OP_LEVEL)
    spec = resolve(load_config(cfg))
    fresh = provider.plan_for(spec, "test")
    files = list((tmp_path / "plans").glob("*.plan"))
    assert len(files) == 1
    cached = provider.plan_for(spec, "test")
    assert cached is not fresh and cached.op_names == fresh.op_names
    assert cached.arrays.scalars.dtype == fresh.arrays.scalars.dtype
    assert cached.arrays.scalars.tobytes() == fresh.arrays.scalars.tobytes()
    want, got = flat_arrays(fresh.arrays), flat_arrays(cached.arrays)
    assert list(got) == list(want)
    for name, a in want.items():
        assert got[name].dtype == a.dtype, name
        np.testing.assert_array_equal(got[name], a)
    assert type(cached.arrays) is type(fresh.arrays)
    for pr in (PassPricer(fresh), PassPricer(cached)):
        assert pr.prefill(3, 1500, 200) == PassPricer(fresh).prefill(3, 1500, 200)
        assert pr.decode(64, 1100) == PassPricer(fresh).decode(64, 1100)


def test_corrupt_cache_file_is_rebuilt(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("AISIM_CACHE_DIR", str(tmp_path))
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(OP_LEVEL)
    spec = resolve(load_config(cfg))
    provider.plan_for(spec, "test")
    (path,) = (tmp_path / "plans").glob("*.plan")
    path.write_bytes(b"not a plan")
    again = provider.plan_for(spec, "test")
    assert PassPricer(again).decode(8, 1025) > 0
