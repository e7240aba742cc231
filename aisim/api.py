"""Python API for notebooks and scripts; the `aisim` CLI is a thin layer over it.

    import aisim
    r = aisim.predict("dense-vllm.yaml", capture_passes=True)
    r.summary["mean_ttft_ms"]; r.requests; r.passes     # dict, pyarrow Tables
    t = aisim.sweep("dense-vllm.yaml", grid={"traffic.load.concurrency": [1, 8, 64]}, jobs=2)
    t.to_pandas()

`config` is a path, a YAML string or a dict of the AISimulate-style config; `overrides` is a
list of `"PATH=YAML_VALUE"` strings (as `--set` takes them) or a dict `{path: value}`.
`r.requests` and `r.passes` exist only when asked for (`capture_requests=True`,
`capture_passes=True`); otherwise they are None, with a warning saying how to capture them.

Ctrl-C during a prediction raises KeyboardInterrupt at once; the compiled kernel it interrupted
cannot be stopped and finishes in a background thread, its results discarded.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Result:
    """One simulated deployment."""

    summary: dict  # the prediction.json fields (host wall-clock ones included, as printed)
    prediction_sha256: str  # hash of the deterministic fields
    # requests.jsonl records (aisim.output.records.RequestRecords: iterable, made in batches)
    records: object = field(default=None, repr=False)
    provenance: dict = field(default_factory=dict)
    _prediction: object = field(default=None, repr=False)
    _passes: object = field(default=None, repr=False)

    @property
    def requests(self):
        """requests table (pyarrow) when predicted with capture_requests=True, else None."""
        if self.records is None:
            _not_captured("requests", "capture_requests")
            return None
        from aisim.output.write import requests_tables

        return requests_tables(self.records, self.provenance)

    @property
    def passes(self):
        """passes table (pyarrow) when predicted with capture_passes=True, else None."""
        if self._passes is None:
            _not_captured("passes", "capture_passes")
            return None
        from aisim.output.passes import passes_table

        return passes_table(self._passes, self.provenance)

    @property
    def summary_table(self):
        from aisim.output.summary import summary_table

        return summary_table(self.summary, self.provenance)

    def write(self, out_dir: str | Path, overwrite: bool = False) -> str:
        """Write prediction.json, summary.parquet and the captured tables; returns the hash
        (which covers the per-request records when they were captured, as the CLI's does)."""
        from aisim.output.write import ResultFolder, write_outputs

        with ResultFolder(out_dir, overwrite, flag="out_dir") as folder:
            return write_outputs(
                folder, dict(self.summary), self.records, self.provenance, self._passes
            )


def _not_captured(table: str, flag: str) -> None:
    warnings.warn(
        f"Result.{table} is None: this prediction did not capture it; run "
        f"aisim.predict(config, {flag}=True)",
        stacklevel=3,
    )


def override_list(overrides) -> tuple[str, ...]:
    """`overrides` as `--set` strings: a list of "PATH=YAML_VALUE", or a dict {path: value}."""
    from aisim.errors import ConfigError

    if overrides is None:
        return ()
    if isinstance(overrides, dict):
        from aisim.sweeps.grid import yaml_text

        return tuple(f"{k}={yaml_text(v)}" for k, v in overrides.items())
    if isinstance(overrides, str):
        return (overrides,)
    try:
        items = tuple(overrides)
    except TypeError:
        raise ConfigError(
            f"overrides: expected a list of 'PATH=VALUE' strings or a dict "
            f"{{path: value}}, got {type(overrides).__name__}"
        ) from None
    for o in items:
        if not isinstance(o, str):
            raise ConfigError(
                f"overrides: {o!r} is not a 'PATH=VALUE' string; give strings "
                "or a dict {path: value}"
            )
    return items


def _load(config, overrides: tuple[str, ...]):
    """-> (validated Config, config hash) from a path, a YAML string or a dict."""
    from aisim.config import apply_overrides, load_config, parse_config
    from aisim.config.load import parse_yaml
    from aisim.errors import ConfigError
    from aisim.prediction import config_sha256

    if isinstance(config, Path) or (
        isinstance(config, str)
        and "\n" not in config
        and config.strip().endswith((".yaml", ".yml"))
    ):
        return load_config(config, overrides), config_sha256(str(config), overrides)
    if isinstance(config, str):
        raw, text = parse_yaml(config, "<config>"), config
    elif isinstance(config, dict):
        raw, text = config, json.dumps(config, sort_keys=True, default=str)
    else:
        raise ConfigError(
            f"config: expected a path, a YAML string or a dict, got {type(config).__name__}"
        )
    if not isinstance(raw, dict):
        raise ConfigError("<config>: the config must be one mapping (traffic:, engine:, ...)")
    h = hashlib.sha256(text.encode())
    for o in overrides:
        h.update(b"\0" + o.encode())
    cfg = parse_config(apply_overrides(raw, overrides, source="<config>"), "<config>")
    return cfg, h.hexdigest()


def predict(
    config, *, overrides=(), capture_requests: bool = False, capture_passes: bool = False
) -> Result:
    """Simulate one deployment (what `aisim predict` does) and return its results."""
    from aisim.output.write import prediction_sha256
    from aisim.prediction import predict_config, provenance

    overrides = override_list(overrides)
    cfg, digest = _load(config, overrides)
    pred = predict_config(cfg, digest, capture_requests, capture_passes)
    summary = dict(pred.prediction)
    return Result(
        summary, prediction_sha256(summary), pred.records, provenance(pred), pred, pred.passes
    )


def sweep(
    config,
    grid=None,
    *,
    sweep_file=None,
    out_dir=None,
    jobs: int = 1,
    executor: str = "local",
    ray_address: str | None = None,
    capture_requests: bool = False,
    overrides=(),
    progress: bool = False,
):
    """Run a grid of overrides over a base config; returns the sweep table (pyarrow).

    grid: {path: [values]} (a cartesian product) and/or sweep_file (product and zip groups).
    out_dir: where sweep.parquet, points/ and requests/ go (re-running skips finished points).
    """
    from aisim.errors import ConfigError
    from aisim.sweeps.grid import expand, load_sweep_yaml
    from aisim.sweeps.progress import Progress
    from aisim.sweeps.run import run_sweep

    dims = []
    if sweep_file is not None:
        dims.extend(load_sweep_yaml(sweep_file))
    for key, values in (grid or {}).items():
        if not isinstance(values, list | tuple) or not values:
            raise ConfigError(f"grid: {key}: expected a non-empty list of values")
        dims.append(((key, list(values)),))
    if not dims:
        raise ConfigError("sweep: nothing to sweep; give grid= or sweep_file=")
    out = Path(out_dir) if out_dir is not None else None
    base = _base_path(config, out)
    bar = Progress(0) if progress else None
    return run_sweep(
        base,
        expand(dims),
        out,
        base_overrides=override_list(overrides),
        jobs=jobs,
        executor=executor,
        ray_address=ray_address,
        capture_requests=capture_requests,
        progress=bar,
    )


def _base_path(config, out: Path | None) -> str:
    """Sweep points are re-read from a file (by worker processes too): dicts and YAML strings
    are written to <out_dir>/base.yaml (or a temporary file) first."""
    import tempfile

    import yaml

    if isinstance(config, Path) or (
        isinstance(config, str)
        and "\n" not in config
        and config.strip().endswith((".yaml", ".yml"))
    ):
        return str(config)
    text = config if isinstance(config, str) else yaml.safe_dump(config, sort_keys=True)
    folder = out if out is not None else Path(tempfile.mkdtemp(prefix="aisim-sweep-"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "base.yaml"
    path.write_text(text)
    return str(path)
