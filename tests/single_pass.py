"""Pricing single passes through `aisim estimate` (the CLI a user runs), for the per-op tests."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from aisim.cli import main


def estimate(config: Path, *args: str) -> dict:
    """`aisim estimate -c config ARGS --format json`, parsed; the run must succeed."""
    res = CliRunner().invoke(main, ["estimate", "-c", str(config), *args, "--format", "json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def one_request_ops(config: Path, isl: int = 1024) -> dict[str, float]:
    """ms of every op of a prefill of `isl` tokens and the decode pass after it (ctx isl + 1)."""
    out = estimate(config, "--prefill", f"1x{isl}", "--decode", f"1x{isl + 1}")
    return {op["op"]: op["ms"] for p in out["passes"] for op in p["ops"]}
