"""`aisim predict` of one config: run, write the result folder, print the chosen format."""

from __future__ import annotations

from pathlib import Path

import click


def predict_one(
    config_path: str,
    overrides: tuple[str, ...],
    output_dir: str | None,
    overwrite: bool,
    fmt: str,
    capture_per_request: bool,
    capture_passes: bool,
    summary_parquet: bool,
    metric_percentiles: str | None,
    note_cold_cache,
) -> None:
    from contextlib import nullcontext

    from aisim.config import load_config
    from aisim.errors import ConfigError, NoRequestsCompleted
    from aisim.output.write import ResultFolder, prediction_sha256, write_outputs
    from aisim.prediction import config_sha256, predict_config, provenance, summary_json

    percentiles = _percentiles(metric_percentiles, fmt)
    if output_dir is None:
        for flag, given, what in (
            ("--capture-per-request", capture_per_request, "requests.jsonl and requests.parquet"),
            ("--capture-passes", capture_passes, "passes.parquet"),
            ("--summary-parquet", summary_parquet, "summary.parquet"),
        ):
            if given:
                raise ConfigError(f"{flag} needs --output-dir DIR ({what} go there)")
    cfg = load_config(config_path, overrides)
    folder = ResultFolder(output_dir, overwrite) if output_dir is not None else None
    bench = None
    with folder or nullcontext():
        note_cold_cache()
        pred = predict_config(
            cfg,
            config_sha256(config_path, overrides),
            capture=capture_per_request or fmt == "vllm-bench",  # vLLM's stats are per request
            capture_passes=capture_passes,
        )
        if fmt == "vllm-bench":
            from aisim.output.vllm_bench import result

            bench = result(pred, detailed=capture_per_request, percentiles=percentiles)
        if folder is not None:
            extra = {} if bench is None else {"vllm_bench.json": _json_bytes(bench)}
            digest = write_outputs(
                folder,
                pred.prediction,
                pred.records if capture_per_request else None,
                provenance(pred),
                pred.passes,
                summary=summary_parquet or capture_per_request or capture_passes,
                extra=extra,
            )
        else:
            digest = prediction_sha256(pred.prediction)
    if fmt == "json":
        click.echo(summary_json(pred, digest))
    elif fmt == "vllm-bench":
        from aisim.output.vllm_bench import render

        click.echo(render(bench))
        if output_dir is not None:
            click.echo(f"Saved the vLLM bench result to: {Path(output_dir) / 'vllm_bench.json'}")
    else:
        from aisim.output.table import deployment_title, render_summary, render_table

        if fmt == "aiperf":
            click.echo(render_table(pred.prediction, pred.spec.role))
            click.echo(f"prediction_sha256: {digest}")
        else:
            click.echo(render_summary(pred.prediction, deployment_title(cfg)))
            click.echo(f"sha256 {digest}")  # prediction_sha256, within 80 columns
        if output_dir is not None:
            click.echo(f"Saved full report to: {Path(output_dir) / 'prediction.json'}")
    if pred.prediction.get("completed_requests", 0) == 0:
        raise NoRequestsCompleted(pred.prediction["diagnostic"])


def _percentiles(text: str | None, fmt: str) -> tuple[float, ...]:
    """--metric-percentiles as vLLM parses it: comma-separated numbers in (0, 100]."""
    from aisim.errors import ConfigError

    if text is None:
        return (99.0,)
    if fmt != "vllm-bench":
        raise ConfigError("--metric-percentiles: only with --format vllm-bench")
    try:
        values = tuple(float(p) for p in text.split(","))
    except ValueError:
        values = ()
    if not values or not all(0 < p <= 100 for p in values):
        raise ConfigError(
            f"--metric-percentiles {text!r}: expected comma-separated numbers in (0, 100], "
            "e.g. 50,90,99"
        )
    return values


def _json_bytes(doc: dict) -> bytes:
    import json

    return (json.dumps(doc, allow_nan=False) + "\n").encode()  # compact, as vLLM writes it
