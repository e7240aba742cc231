"""The estimator options of AISimulate's default timing, and which of their values aisim takes.

`aisimulate recommend` writes every resolved estimator option into the configs it recommends
(per role: estimation_mode op_level, fallback_policy deny, database_mode, estimator_config,
systems_paths = its own packaged database, transfer_policy = all four kinds). Those values change
nothing; aisim accepts them, and refuses (aisim.config.features) values that would.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

from aisim.config.checks import Invalid

TRANSFER_KINDS = ("xshape", "xquant", "xprofile", "xop")
TRANSFER_PRESETS = ("off", "conservative", "balanced", "aggressive")


def check_transfer_policy(value: Any, path: str) -> None:
    """AISimulate's spellings: a preset or kind name, or several joined by commas, in a string
    (case and spaces ignored), or a list of kind names exactly as written (no presets)."""
    if value is None:
        return
    if isinstance(value, str):
        tokens = [t.strip() for t in value.strip().lower().split(",") if t.strip()]
        allowed = TRANSFER_KINDS + TRANSFER_PRESETS
    else:
        tokens, allowed = list(value), TRANSFER_KINDS
    for token in tokens:
        if token not in allowed:
            raise Invalid(
                path,
                f"unknown transfer kind{'/preset' if isinstance(value, str) else ''} {token!r}",
                value if isinstance(value, str) else list(value),
                f"kinds: {', '.join(TRANSFER_KINDS)}"
                + (
                    f"; presets: {', '.join(TRANSFER_PRESETS)}"
                    if isinstance(value, str)
                    else " (a list takes kinds only)"
                ),
            )


_PRESET_KINDS = {
    "off": (),
    "conservative": ("xshape",),
    "balanced": ("xshape", "xquant"),
    "aggressive": TRANSFER_KINDS,
}


def transfer_kinds(value: Any) -> tuple[str, ...]:
    """The transfer kinds a (checked) transfer_policy enables, sorted: every kind when unset;
    presets expand (a string may join kinds and presets with commas)."""
    if value is None:
        return tuple(sorted(TRANSFER_KINDS))
    tokens = (
        [t.strip() for t in value.strip().lower().split(",") if t.strip()]
        if isinstance(value, str)
        else list(value)
    )
    kinds: set[str] = set()
    for token in tokens:
        kinds.update(_PRESET_KINDS.get(token, (token,)))
    return tuple(sorted(kinds))


ESTIMATOR_CONFIG_DEFAULTS: dict[str, Any] = {
    "features": {
        "attention_kv_weight": 1.0,
        "prefill_attention_pair_weight": 1.0,
        "ffn_token_weight": 1.0,
    },
    "op_level": {},
    "fpm_interpolation": {"method": "sol"},
    "fpm_regression": {
        "sampling": {"bins_per_axis": [4, 4], "max_observations": 64},
        "min_observations": 5,
        "fit": {
            "kind": "standardized_nnls",
            "singular_ridge_scale": 1e-09,
            "rebuild_interval": None,
        },
    },
    "correction": {
        "enabled": True,
        "feature_space": "legacy_workload",
        "sampling": {"bins_per_axis": [4, 4], "max_observations": 64},
        "min_observations": 5,
        "factor_bounds": {"min": 0.5, "max": 2.0},
        "max_num_tokens": 8192,
        "max_batch_size": 512,
        "max_kv_tokens": 2000000,
    },
}
"""AISimulate 0.13's resolved estimator_config (the same for every model, backend and database
mode; read from its estimator provenance), as `recommend` writes it."""


def is_default_estimator_config(value: Any, defaults: Any = ESTIMATOR_CONFIG_DEFAULTS) -> bool:
    """Whether every option given equals AISimulate's default (a partial mapping is fine)."""
    if isinstance(value, Mapping):
        return isinstance(defaults, Mapping) and all(
            key in defaults and is_default_estimator_config(item, defaults[key])
            for key, item in value.items()
        )
    if isinstance(value, list | tuple):
        return (
            isinstance(defaults, list | tuple)
            and len(value) == len(defaults)
            and all(is_default_estimator_config(a, b) for a, b in zip(value, defaults, strict=True))
        )
    if isinstance(value, bool) or isinstance(defaults, bool):
        return value is defaults
    return value == defaults


def is_packaged_systems_root(entry: str) -> bool:
    """'default', or a path to AISimulate's own packaged database (<site-packages>/
    aisimulate_core/systems), which is what aisim's op-time tables were compiled from."""
    return entry.strip().lower() == "default" or PurePath(entry).parts[-2:] == (
        "aisimulate_core",
        "systems",
    )
