"""`aisim predict` over many configs: several -c, a folder or a glob (aisim.sweeps.batch)."""

from __future__ import annotations

from pathlib import Path

import click


def predict_batch(configs, overrides, output_dir, overwrite, fmt, capture, flags, jobs) -> None:
    """aisim predict over many configs (aisim.sweeps.batch)."""
    import json
    import shutil

    from aisim.errors import ConfigError, RunFailed
    from aisim.sweeps.batch import expand_configs, render_batch, run_batch
    from aisim.sweeps.progress import Progress
    from aisim.sweeps.run import default_jobs

    for flag, given in flags.items():
        if given:
            raise ConfigError(f"{flag}: one config at a time (a batch writes batch.parquet)")
    if fmt in ("aiperf", "vllm-bench"):
        raise ConfigError(f"--format {fmt}: one config at a time; a batch prints table or json")
    if capture and output_dir is None:
        raise ConfigError("--capture-per-request needs --output-dir DIR (requests/ goes there)")
    paths = expand_configs(configs)
    out = Path(output_dir) if output_dir is not None else None
    if out is not None and overwrite:
        (out / "batch.parquet").unlink(missing_ok=True)
        for name in ("points", "requests"):
            shutil.rmtree(out / name, ignore_errors=True)
    table = run_batch(
        paths,
        out,
        overrides=overrides,
        jobs=jobs or default_jobs(),
        capture_requests=capture,
        progress=Progress(len(paths), enabled=None if fmt == "table" else False),
    )
    if fmt == "json":
        click.echo(json.dumps(table.to_pylist(), sort_keys=True, allow_nan=False))
    else:
        click.echo(render_batch(table))
        if out is not None:
            click.echo(f"Saved the batch to: {out / 'batch.parquet'}")
    if all(s != "ok" for s in table.column("status").to_pylist()):
        raise RunFailed(f"every config failed; the first: {table.column('error')[0].as_py()}")
