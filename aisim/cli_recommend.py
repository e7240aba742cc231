"""`aisim recommend`: the command line of aisim.recommend (registered on aisim.cli.main)."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("recommend")
@click.option(
    "-c",
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="AISimulate-style recommend YAML (engine, traffic, evaluation, optimization, optimizer).",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="PATH=YAML_VALUE",
    help="Override a value of the recommend YAML before validation (repeatable).",
)
@click.option(
    "--output-dir",
    "-o",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("aisim-recommend"),
    show_default=True,
    help="recommendation.json / .csv, recommendations/, candidates.parquet go here; rerunning "
    "an interrupted run into the same folder resumes it.",
)
@click.option(
    "--overwrite", is_flag=True, help="Replace an earlier recommendation in --output-dir."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="What stdout shows: the best candidates as a table, or the recommendations as JSON.",
)
@click.option(
    "--search",
    type=click.Choice(["exhaustive", "halving", "optimizer"]),
    default="exhaustive",
    show_default=True,
    help="exhaustive: simulate every candidate; halving: every candidate at 1/16 of its "
    "requests, the best quarter at 1/4, the best quarter of those at full size; optimizer: the "
    "YAML's optimizer block (algorithm random: a seeded sample of max_trials).",
)
@click.option(
    "--budget-s",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="SECONDS",
    help="Stop starting candidates after this long (they run in seeded random order, so what "
    "ran is a uniform sample) [default: no limit].",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=None,
    help="Candidates simulated at once [default: the usable cores, at most optimizer.parallelism].",
)
@click.option(
    "--executor",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="Where candidates run (ray needs the aisim-serving[ray] extra).",
)
@click.option("--ray-address", default=None, metavar="ADDRESS", help="Ray cluster to join.")
def recommend(
    config_path: str,
    overrides: tuple[str, ...],
    output_dir: Path,
    overwrite: bool,
    fmt: str,
    search: str,
    budget_s: float | None,
    jobs: int | None,
    executor: str,
    ray_address: str | None,
) -> None:
    """Find the deployment that meets the SLA at the best target value.

    Exit code 0 when a candidate is feasible, 1 when none is (the ledger is still written),
    2 on bad input.
    """
    from aisim.errors import ConfigError
    from aisim.recommend.progress import RecommendProgress
    from aisim.recommend.report import as_json, render
    from aisim.recommend.run import recommend as run_recommend
    from aisim.recommend.spec import load_recommend
    from aisim.sweeps.run import default_jobs

    if executor == "local" and ray_address:
        raise ConfigError("--ray-address: only with --executor ray")
    spec = load_recommend(config_path, overrides)
    jobs = jobs or min(default_jobs(), spec.optimizer.parallelism)
    progress = RecommendProgress(0, enabled=None if fmt == "table" else False)
    outcome = run_recommend(
        spec,
        output_dir,
        overwrite=overwrite,
        jobs=jobs,
        executor=executor,
        ray_address=ray_address,
        budget_s=budget_s,
        search=search,
        progress=progress,
    )
    click.echo(as_json(outcome, output_dir) if fmt == "json" else render(outcome, output_dir))
    if not outcome.ranked:
        raise click.exceptions.Exit(1)
