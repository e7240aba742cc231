"""Estimator options and other accepted fields: each one is honoured, refused, or a no-op that
AISimulate 0.13 was shown to ignore (oracle runs: the figures equal those without the option).

The figures are the pinned goldens' (tests/golden/); a no-op must leave them unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from aisim.config import load_config, unsupported_features
from aisim.config.estimator import ESTIMATOR_CONFIG_DEFAULTS
from aisim.errors import ConfigError
from aisim.prediction import run_prediction
from tests.parity_rule import mismatches

GOLDEN = Path(__file__).parent / "golden"
OP_LEVEL = GOLDEN / "qwen3-0.6b-tp1-vllm"
FIXED = GOLDEN / "single-request"
TRACE = GOLDEN / "trace-vllm-bs16"
T = "engine.workers.aggregated.timing"
W = "engine.workers.aggregated"
# where AISimulate's own database lives in a venv; `aisimulate recommend` writes that path
PACKAGED = "/opt/venv/lib/python3.11/site-packages/aisimulate_core/systems"
# as `aisimulate recommend` writes a role's timing (YAML spells 1e-09 as 1.0e-09)
RECOMMENDED_TIMING = yaml.safe_dump(
    {
        "type": "default",
        "estimation_mode": "op_level",
        "fallback_policy": "deny",
        "database_mode": "SILICON",
        "estimator_config": ESTIMATOR_CONFIG_DEFAULTS,
        "systems_paths": [PACKAGED],
        "transfer_policy": ["xshape", "xquant", "xprofile", "xop"],
    },
    default_flow_style=True,
    width=10_000,
).strip()

NO_OPS = {
    "recommended-timing": (OP_LEVEL, (f"{T}={RECOMMENDED_TIMING}",)),
    "engine-level-defaults": (
        OP_LEVEL,
        (
            "engine.systems_paths=[default]",
            "engine.transfer_policy=aggressive",
            "engine.estimator_config={op_level: {}}",
        ),
    ),
    "engine-packaged-systems-path": (OP_LEVEL, (f"engine.systems_path={PACKAGED}",)),
    "transfer-presets": (OP_LEVEL, (f"{T}.transfer_policy='off'",)),
    "transfer-kinds": (OP_LEVEL, (f"{T}.transfer_policy='xshape, Balanced'",)),
    "partial-estimator-config": (
        OP_LEVEL,
        (f"{T}.estimator_config={{correction: {{enabled: true}}}}",),
    ),
    "fallback-allow": (OP_LEVEL, ("engine.fallback_policy=allow", f"{T}.fallback_policy=allow")),
    "strict-provenance": (OP_LEVEL, ("engine.strict_provenance=true",)),
    "shared-layer-off-dense": (OP_LEVEL, ("engine.enable_shared_layer=false",)),
    "moe-split-on-dense": (OP_LEVEL, (f"{W}.parallelism.moe_expert=4",)),
    # HYBRID prices from silicon every op the tables answer (all of them here)
    "hybrid-database": (OP_LEVEL, ("engine.database_mode=hybrid",)),
    "role-hybrid-database": (OP_LEVEL, (f"{T}.database_mode=HYBRID",)),
    # AISimulate quantizes only context-parallel / AFD collectives with it (oracle: dense TP4 and
    # TP16 with default capacity, DeepSeek-V3 DP8 / TP2 x DP4, Qwen3 MoE, P/D: figures unchanged)
    "comm-quant": (OP_LEVEL, ("engine.comm_quant_mode=fp8",)),
    "role-comm-quant": (OP_LEVEL, (f"{T}.comm_quant_mode=int8",)),
    "schedule-interval-one-rank": (FIXED, (f"{W}.scheduler.prefill_schedule_interval=2",)),
    "bytes-per-token-with-blocks": (FIXED, (f"{W}.kv_cache.bytes_per_token=1234",)),
    "execution-resources": (
        FIXED,
        (
            "execution={resources: {memory_limit_gb: 8, cpu_limit: 1, "
            "reserve_memory_gb: 2, available_memory_fraction: 0.5}}",
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(NO_OPS))
def test_no_op_options_leave_the_figures(name: str) -> None:
    folder, overrides = NO_OPS[name]
    ref = json.loads((folder / "prediction.json").read_text())
    pred = run_prediction(str(folder / "config.yaml"), overrides)
    bad = mismatches(pred.prediction, ref)
    assert not bad, bad[:3]


REFUSED = {
    "role-fpm-estimation": (f"{T}.estimation_mode=fpm_interpolation", f"{T}.estimation_mode"),
    "role-fpm-forward-model": (f"{T}.forward_model=fpm", f"{T}.forward_model"),
    "role-attention-backend": (f"{T}.attention_backend=flashinfer", f"{T}.attention_backend"),
    "role-estimator-config": (
        f"{T}.estimator_config={{correction: {{enabled: false}}}}",
        f"{T}.estimator_config",
    ),
    "engine-estimator-config": (
        "engine.estimator_config={features: {ffn_token_weight: 2.0}}",
        "engine.estimator_config",
    ),
    "role-systems-root": (f"{T}.systems_paths=[/data/my-systems]", f"{T}.systems_paths"),
    "engine-systems-root": ("engine.systems_path=/data/my-systems", "engine.systems_path"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_options_that_change_the_pricing_are_refused(name: str) -> None:
    override, path = REFUSED[name]
    lines = unsupported_features(load_config(str(OP_LEVEL / "config.yaml"), (override,)))
    assert len(lines) == 1 and lines[0].startswith(f"{path}: "), lines
    assert "not available yet" in lines[0]


BAD = {
    "transfer-unknown": (OP_LEVEL, f"{T}.transfer_policy=bogus", "unknown transfer kind/preset"),
    "transfer-list-preset": (
        OP_LEVEL,
        f"{T}.transfer_policy=[balanced]",
        "unknown transfer kind 'balanced'",
    ),
    "engine-transfer-unknown": (
        OP_LEVEL,
        "engine.transfer_policy=[XSHAPE]",
        "unknown transfer kind 'XSHAPE'",
    ),
    "systems-path-conflict": (
        OP_LEVEL,
        "engine.systems_paths=[default]",
        "conflicts with systems_paths",
    ),
    "decoder-replay": (OP_LEVEL, "engine.decoder_replay=true", "DeepSeek-V4.1-Flash"),
    "agentic-warmup": (TRACE, "traffic.load.agentic_warmup=true", "requires agentic_snapshot"),
    "agentic-policy": (
        TRACE,
        "traffic.load.agentic_warmup_policy=live_trajectory_v1",
        "requires agentic_warmup and agentic_profile",
    ),
    "agentic-snapshot": (
        TRACE,
        "traffic.load.agentic_snapshot={lanes: 1}",
        "requires agentic_lanes",
    ),
    "agentic-profile": (
        TRACE,
        "traffic.load.agentic_profile={duration_s: 1}",
        "requires agentic_snapshot",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_values_aisimulate_rejects_are_config_errors(name: str) -> None:
    folder, override, fragment = BAD[name]
    overrides = (override,)
    if name == "systems-path-conflict":
        overrides = (override, f"engine.systems_path={PACKAGED}")
    with pytest.raises(ConfigError, match=fragment):
        load_config(str(folder / "config.yaml"), overrides)


def test_hybrid_refuses_a_deployment_whose_tables_miss_an_op(tmp_path: Path) -> None:
    # DeepSeek-V3 on l40s: no MLA context module rows; AISimulate's HYBRID would estimate that op
    # from empirical utilisation (SILICON refuses the deployment with the same miss)
    from click.testing import CliRunner

    from aisim.cli import main

    cfg = yaml.safe_load((OP_LEVEL / "config.yaml").read_text())
    cfg["engine"].update(model="deepseek-ai/DeepSeek-V3", hardware="l40s", database_mode="HYBRID")
    cfg["engine"]["workers"]["aggregated"]["parallelism"] = {"tensor": 8, "moe_expert": 8}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["predict", "-c", str(path), "--output-dir", str(out)])
    assert res.exit_code == 2, res.output
    line = res.output.strip().splitlines()[-1]
    assert "database_mode HYBRID would estimate" in line and "mla_context_module" in line
    assert "not available yet" in line and not out.exists()
