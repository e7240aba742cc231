"""`aisim compare`: the command line of aisim.compare (registered on aisim.cli.main)."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("compare")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.argument("measured", type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="What stdout shows: the comparison as a table, or as JSON.",
)
def compare(run_dir: Path, measured: Path, fmt: str) -> None:
    """Compare a prediction folder (aisim predict -o RUN_DIR) with a measured
    `vllm bench serve --save-result` file.

    Prints predicted, measured and relative error for every metric both sides have and, when
    the run captured per-request records and the measurement was saved with --save-detailed,
    the per-request TTFT and E2E distributions (quantiles and the Kolmogorov-Smirnov distance).
    Exit code 2 on unreadable or mismatched input.
    """
    import json

    from aisim.compare import compare as run_compare
    from aisim.compare import render_compare

    result = run_compare(run_dir, measured)
    click.echo(json.dumps(result, indent=2) if fmt == "json" else render_compare(result))


def register(main_group: click.Group) -> None:
    """Add `compare` to the command group (aisim.cli.main)."""
    main_group.add_command(compare)
