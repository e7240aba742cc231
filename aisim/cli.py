"""The `aisim` command line. Thin: every command imports its implementation lazily so that
`aisim --help` and config errors never pay for numba or pyarrow."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

import click

from aisim import __version__


def _raise_terminated(signum, frame) -> None:
    from aisim.errors import Terminated

    raise Terminated()


class _Commands(click.Group):
    """Ctrl-C and SIGTERM end every command with one line and the shell's exit code (130 /
    143); whatever a command had staged is removed on the way out (aisim.output.write)."""

    def invoke(self, ctx):
        from aisim.errors import Interrupted, interrupt_signal

        previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGTERM, _raise_terminated)
        try:
            return super().invoke(ctx)
        except Interrupted as err:  # a sweep says how far it got
            _stop(err)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except (Exception, RecursionError) as exc:
            if os.environ.get("AISIM_TRACEBACK"):
                raise
            # a bug, not bad input: still one line (AISIM_TRACEBACK=1 shows where it happened)
            from aisim.errors import InternalError

            raise InternalError(exc) from None
        except KeyboardInterrupt as exc:
            _stop(Interrupted(interrupt_signal(exc), "nothing was written"))
        finally:
            if previous is not None:  # in-process callers (tests, notebooks) keep their own
                signal.signal(signal.SIGTERM, previous)


def _stop(err) -> None:
    """An interrupted command ends at once: its one line, then the process exits without the
    interpreter's teardown (~0.5 s with numba and pyarrow loaded), and without waiting for a
    compiled kernel the interrupt left running in the background. Inside a test runner only
    the latter ends the process; otherwise the error is raised as usual."""
    from aisim.engine.interruptible import abandoned

    if abandoned() or not _in_process():
        err.show()
        _exit_now(err.exit_code)
    raise err from None


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="aisim")
def main() -> None:
    """GPU-free simulator of LLM inference serving (AISimulate-compatible configs)."""


def _config_options(f):
    f = click.option(
        "--set",
        "overrides",
        multiple=True,
        metavar="PATH=YAML_VALUE",
        help="Override a config value before validation (repeatable).",
    )(f)
    f = click.option(
        "-c",
        "--config",
        "config_path",
        required=True,
        type=click.Path(dir_okay=False),
        help="AISimulate-style YAML config.",
    )(f)
    return f


@main.command()
@click.option(
    "-c",
    "--config",
    "config_paths",
    required=True,
    multiple=True,
    help="AISimulate-style YAML config; several -c, a folder or a glob run a batch "
    "(batch.parquet, a row per config).",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="PATH=YAML_VALUE",
    help="Override a config value before validation (repeatable; every config of a batch).",
)
@click.option(
    "--output-dir",
    "-o",
    type=click.Path(file_okay=False),
    default=None,
    help="Write prediction.json (and per-request files) here; a batch writes batch.parquet "
    "and points/ (rerunning resumes).",
)
@click.option("--overwrite", is_flag=True, help="Replace aisim's files in --output-dir.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "aiperf", "json", "vllm-bench"]),
    default="table",
    show_default=True,
    help="What to print on stdout: table (latencies as mean / median / p90 / p99, then "
    "throughputs), aiperf (AISimulate's full table), json (the summary), vllm-bench (vllm bench "
    "serve's result; with -o also vllm_bench.json, docs/vllm-bench.md).",
)
@click.option(
    "--metric-percentiles",
    default=None,
    metavar="P1,P2,...",
    help="vllm-bench: the percentiles reported, as vllm bench serve's flag [default: 99].",
)
@click.option(
    "--capture-per-request",
    is_flag=True,
    help="Also write requests.jsonl and requests.parquet (one record per request).",
)
@click.option(
    "--capture-passes",
    is_flag=True,
    help="Also write passes.parquet (one row per scheduler pass per rank).",
)
@click.option(
    "--summary-parquet",
    is_flag=True,
    help="Also write summary.parquet (implied by either capture flag).",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=None,
    help="Configs of a batch run at once [default: the usable cores].",
)
def predict(
    config_paths: tuple[str, ...],
    overrides: tuple[str, ...],
    output_dir: str | None,
    overwrite: bool,
    fmt: str,
    capture_per_request: bool,
    capture_passes: bool,
    summary_parquet: bool,
    metric_percentiles: str | None,
    jobs: int | None,
) -> None:
    """Simulate deployments and report TTFT, TPOT, ITL, E2E latency and throughput."""

    from aisim.errors import ConfigError
    from aisim.sweeps.batch import is_batch

    if is_batch(config_paths):
        flags = {
            "--capture-passes": capture_passes,
            "--summary-parquet": summary_parquet,
            "--metric-percentiles": metric_percentiles is not None,
        }
        from aisim.cli_batch import predict_batch

        predict_batch(
            config_paths, overrides, output_dir, overwrite, fmt, capture_per_request, flags, jobs
        )
        _fast_exit()
        return
    if jobs is not None:
        raise ConfigError("--jobs: runs the configs of a batch (several -c, a folder or a glob)")
    from aisim.cli_predict import predict_one

    predict_one(
        config_paths[0],
        overrides,
        output_dir,
        overwrite,
        fmt,
        capture_per_request,
        capture_passes,
        summary_parquet,
        metric_percentiles,
        _note_cold_cache,
    )
    _fast_exit()


@main.command()
@_config_options
@click.option(
    "--grid",
    "grids",
    multiple=True,
    metavar="PATH=V1,V2,...",
    help="Swept values of one config path (repeatable: cartesian product).",
)
@click.option(
    "--sweep-file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Sweep YAML with product: and zip: groups of PATH: [values].",
)
@click.option(
    "--output-dir",
    "-o",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="sweep.parquet, points/ and requests/ go here; re-running "
    "into the same folder skips finished points.",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=None,
    help="Points run at once on this machine [default: the usable cores].",
)
@click.option(
    "--executor",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="Where points run (ray needs the aisim-serving[ray] extra).",
)
@click.option(
    "--ray-address",
    default=None,
    metavar="ADDRESS",
    help="Ray cluster to join (e.g. ray://host:10001) [default: start a local one].",
)
@click.option(
    "--capture-per-request",
    is_flag=True,
    help="Also write each point's requests table to requests/point_id=<id>/.",
)
def sweep(
    config_path: str,
    overrides: tuple[str, ...],
    grids: tuple[str, ...],
    sweep_file: str | None,
    output_dir: Path,
    jobs: int | None,
    executor: str,
    ray_address: str | None,
    capture_per_request: bool,
) -> None:
    """Run a grid of config overrides; one sweep.parquet row per point."""
    from aisim.errors import ConfigError
    from aisim.sweeps.grid import expand, load_sweep_yaml, parse_grid
    from aisim.sweeps.progress import Progress
    from aisim.sweeps.run import default_jobs, run_sweep

    dims = list(load_sweep_yaml(sweep_file)) if sweep_file else []
    for g in grids:
        dims.append(parse_grid(g))
    if not dims:
        raise ConfigError("aisim sweep: give --grid PATH=V1,V2,... or --sweep-file")
    if executor == "local" and ray_address:
        raise ConfigError("--ray-address: only with --executor ray")
    points = expand(dims)
    table = run_sweep(
        config_path,
        points,
        output_dir,
        base_overrides=overrides,
        jobs=jobs or default_jobs(),
        executor=executor,
        ray_address=ray_address,
        capture_requests=capture_per_request,
        progress=Progress(len(points)),
    )
    failed = sum(1 for s in table.column("status").to_pylist() if s != "ok")
    click.echo(f"{table.num_rows} points ({failed} failed) -> {output_dir / 'sweep.parquet'}")
    if table.num_rows and failed == table.num_rows:
        first = table.column("error")[0].as_py()
        from aisim.errors import RunFailed

        raise RunFailed(f"every point of the sweep failed; the first: {first}")
    _fast_exit()


@main.command()
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@click.option(
    "--kind",
    type=click.Choice(["pareto", "latency", "timeline", "ranking", "attribution"]),
    multiple=True,
    help="Which figures [default: pareto + latency for a sweep, timeline for a run with "
    "passes.parquet (else attribution, from requests.parquet), pareto + ranking for a "
    "recommend folder].",
)
@click.option(
    "--output-dir",
    "-o",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the images go [default: beside the source].",
)
@click.option(
    "--format",
    "fmts",
    type=click.Choice(["png", "svg"]),
    multiple=True,
    help="Image formats [default: png and svg].",
)
@click.option(
    "--x",
    "x_column",
    default=None,
    metavar="COLUMN",
    help="Load column (or its config path) of the latency curves [default: the first swept "
    "column].",
)
def plot(
    source: Path,
    kind: tuple[str, ...],
    output_dir: Path | None,
    fmts: tuple[str, ...],
    x_column: str | None,
) -> None:
    """Figures from a sweep folder / sweep.parquet, a run folder with passes.parquet or
    requests.parquet, or a recommend folder."""
    from aisim.plot import plot_source

    for path in plot_source(source, kind, output_dir, fmts or ("png", "svg"), x_column):
        click.echo(str(path))


@main.command()
@_config_options
def validate(config_path: str, overrides: tuple[str, ...]) -> None:
    """Check a config without simulating; exit 2 with the first problem."""
    from aisim.config import load_config
    from aisim.engine.deployment import resolve_run
    from aisim.engine.spec import no_request_can_complete
    from aisim.engine.workload import resolve_workload
    from aisim.errors import NoRequestsCompleted

    cfg = load_config(config_path, overrides)
    workload = resolve_workload(cfg)
    specs = resolve_run(cfg, workload).pools
    for spec in specs:
        if workload.trace_path is not None:
            from aisim.traffic_trace import check_trace

            check_trace(spec, workload)
        reason = no_request_can_complete(cfg, spec, workload)
        if reason:
            # the run's own outcome (AISimulate's too): predict writes its outputs, exits 1
            raise NoRequestsCompleted(f"{config_path}: no request can complete: {reason}")
    for spec in specs:
        if spec.timing == "op_level":  # a table miss is refused here as predict refuses it
            _check_priced(cfg, spec, specs[0], workload)
    click.echo(f"{config_path}: ok")


def _check_priced(cfg, spec, first, workload) -> None:
    """The op plan predict would build for the spec's pool (its tables, its op families)."""
    from aisim.engine.bounds import rejected_at_admission
    from aisim.timing.provider import plan_unless_unpriced
    from aisim.traffic import role_traffic

    def rejects_all():  # as predict decides it: on the traffic of the first pool
        prompts = role_traffic(first, workload).prompt_len
        return bool(rejected_at_admission(first, prompts).all())

    plan_unless_unpriced(spec, f"{cfg.source_path}: engine.workers.{spec.role}", rejects_all)


def _note_cold_cache() -> None:
    """Tell the user when the first run will compile the kernels (tens of seconds, once)."""
    from aisim.kernels._jit import cache_is_warm

    if not cache_is_warm():
        click.echo(
            "aisim: compiling simulation kernels (first run of this kind of deployment "
            "only; a few minutes)...",
            err=True,
        )


def _in_process() -> bool:
    """Whether the command runs inside a test runner (or AISIM_NO_FAST_EXIT asks for a normal
    exit), where ending the process would end the caller."""
    return bool(os.environ.get("AISIM_NO_FAST_EXIT")) or "pytest" in sys.modules


def _exit_now(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _fast_exit() -> None:
    # Interpreter teardown with numba loaded costs ~0.1 s; outputs are flushed already.
    if not _in_process():
        _exit_now(0)


@main.command()
@click.argument("model_ids", nargs=-1, metavar="[MODEL]...")
@click.option(
    "--hardware", "hardware", multiple=True, help="Only this GPU (repeatable) [default: all]."
)
@click.option(
    "--backend",
    "backends",
    multiple=True,
    type=click.Choice(["vllm", "trtllm"]),
    help="Only this backend (repeatable) [default: both].",
)
@click.option(
    "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
def models(
    model_ids: tuple[str, ...], hardware: tuple[str, ...], backends: tuple[str, ...], fmt: str
) -> None:
    """The shipped model configs (engine.model by Hugging Face id) and the GPUs and backends
    op-level timing prices each on. The first listing builds every op plan (about a minute);
    later ones read the cached outcomes."""
    import json

    from aisim.catalog import as_json, catalog, render
    from aisim.config.registry import KNOWN_HARDWARE
    from aisim.errors import ConfigError
    from aisim.models import shipped_model_ids

    for h in hardware:
        if h not in KNOWN_HARDWARE:
            raise ConfigError(
                f"--hardware: unknown GPU {h!r}; use one of {', '.join(KNOWN_HARDWARE)}"
            )
    known = shipped_model_ids()
    for m in model_ids:
        if m not in known:
            raise ConfigError(f"MODEL: {m!r} is not a shipped model; use one of {', '.join(known)}")
    entries = catalog(model_ids, hardware, backends)
    if fmt == "json":
        click.echo(json.dumps(as_json(entries), indent=1))
    else:
        click.echo(render(entries, hardware))
    _fast_exit()


@main.group()
def optable() -> None:
    """Compiled op-time tables: measured per-op latencies from the silicon data."""


@optable.command("build")
@click.option(
    "--source",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Silicon tree: DIR/<hw>.yaml + DIR/<hw>/<family>/<backend>/<version>/*.parquet "
    "(or the systems/ folder of aisimulate / aiconfigurator-core).",
)
@click.option("--hardware", default="b200_sxm", show_default=True, help="System name.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Output folder [default: the package's data/optables].",
)
@click.option(
    "--target",
    "targets",
    multiple=True,
    metavar="BACKEND:VERSION",
    help="Backend version to compile (repeatable) [default: the versions aisim prices on the "
    "hardware, e.g. vllm:0.24.0, trtllm:1.3.0rc20; a100_sxm vllm:0.14.0, trtllm:1.0.0].",
)
@click.option("--origin", default="", help="Where the source tree came from (for PROVENANCE.md).")
def optable_build(
    source: Path, hardware: str, out: Path | None, targets: tuple[str, ...], origin: str
) -> None:
    """Compile the silicon parquet tables into sorted Arrow tables (one per op family)."""
    from aisim.config.registry import priced_versions
    from aisim.errors import OpTableError
    from aisim.optable.build import DEFAULT_TARGETS, build_optables
    from aisim.optable.load import default_root

    pairs = []
    for t in targets:
        backend, sep, version = t.partition(":")
        if not sep or not backend or not version:
            raise OpTableError(f"--target {t!r}: expected BACKEND:VERSION, e.g. vllm:0.24.0")
        pairs.append((backend, version))
    out = out if out is not None else default_root()
    manifest = build_optables(
        source,
        hardware,
        out,
        tuple(pairs)
        or tuple((b, v) for b in ("vllm", "trtllm") for v in priced_versions(hardware, b))
        or DEFAULT_TARGETS,
        origin=origin,
        log=lambda m: click.echo(m, err=True),
    )
    total = sum(t["bytes"] for t in manifest["tables"])
    click.echo(f"wrote {len(manifest['tables'])} tables ({total / 1e6:.2f} MB) to {out / hardware}")


@optable.command("inspect")
@click.option("--hardware", default="b200_sxm", show_default=True, help="System name.")
@click.option("--backend", default=None, help="vllm or trtllm [default: every compiled one].")
@click.option("--version", "version", default=None, help="Backend version [default: all].")
@click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder holding <hardware>/manifest.json [default: the shipped tables].",
)
@click.option("--brief", is_flag=True, help="Only the per-family row counts and sources.")
def optable_inspect(
    hardware: str, backend: str | None, version: str | None, root: Path | None, brief: bool
) -> None:
    """List what the compiled tables cover: families, rows, key ranges and sources."""
    from aisim.optable.inspect import describe
    from aisim.optable.load import load_optable, read_manifest

    manifest = read_manifest(hardware, root)
    pairs = sorted({(t["backend"], t["version"]) for t in manifest["targets"]})
    pairs = [(b, v) for b, v in pairs if backend in (None, b) and version in (None, v)]
    if not pairs:
        pairs = [(backend or "vllm", version or "")]  # load_optable names what exists
    for i, (b, v) in enumerate(pairs):
        if i:
            click.echo("")
        for line in describe(load_optable(hardware, b, v, root), details=not brief):
            click.echo(line)


@main.command()
@_config_options
@click.option(
    "--prefill",
    "prefill",
    multiple=True,
    metavar="BATCHxNEW[+PREFIX]",
    help="Price a prefill pass: BATCH requests of NEW new tokens on a cached PREFIX "
    "(repeatable), e.g. 1x1024 or 8x512+512.",
)
@click.option(
    "--decode",
    "decode",
    multiple=True,
    metavar="BATCHxCTX",
    help="Price a decode pass: BATCH requests at context CTX, the decoded token "
    "included (repeatable), e.g. 64x1100.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="What to print on stdout.",
)
@click.option(
    "--detail",
    "detail",
    multiple=True,
    type=click.Choice(["memory"]),
    help="Also show the KV-capacity memory model's terms (weights, activations, "
    "buffers, KV budget, blocks).",
)
@click.option(
    "--role",
    "role",
    type=click.Choice(["aggregated", "prefill", "decode"]),
    default=None,
    help="The worker role whose deployment prices the passes "
    "(required for a disaggregated config).",
)
def estimate(
    config_path: str,
    overrides: tuple[str, ...],
    prefill: tuple[str, ...],
    decode: tuple[str, ...],
    fmt: str,
    detail: tuple[str, ...],
    role: str | None,
) -> None:
    """Price single passes of the config's deployment, op by op (op-level timing).

    With both --prefill and --decode, also prints the mixed pass: the additive total and the
    duration the simulator's clock advances by (each phase rounded to whole ns, then added).
    """
    from aisim.estimate import estimate as run_estimate
    from aisim.estimate import render_json, render_table

    result = run_estimate(config_path, overrides, prefill, decode, detail, role)
    click.echo(render_json(result) if fmt == "json" else render_table(result))


def _register_commands() -> None:
    """The commands kept in modules of their own (each imports only click at load)."""
    from aisim import cli_compare, cli_trace
    from aisim.cli_recommend import recommend

    main.add_command(recommend)
    cli_compare.register(main)
    cli_trace.register(main)


_register_commands()

if __name__ == "__main__":
    main()
