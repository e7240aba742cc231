"""`aisim trace`: a run folder's timeline for the Perfetto UI (aisim.output.timeline)."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("trace")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The trace file [default: RUN_DIR/trace.perfetto-trace, or trace.json with --json].",
)
@click.option("--json", "as_json", is_flag=True, help="Chrome JSON trace events instead.")
@click.option(
    "--requests",
    "request_range",
    default=None,
    metavar="N | A-B",
    help="Request tracks of the first N requests, or of indices A to B [default: all].",
)
@click.option(
    "--window",
    default=None,
    metavar="START:END",
    help="Only passes and requests within this simulated time, in seconds (either side open).",
)
def trace(run_dir: Path, output: Path | None, as_json: bool, request_range, window) -> None:
    """Write RUN_DIR's timeline (aisim predict -o RUN_DIR --capture-passes, and
    --capture-per-request for the request tracks): one track per worker rank with a slice per
    scheduler pass and counters of KV blocks and queues, one track per request with its phases.
    Opens in ui.perfetto.dev (or chrome://tracing with --json)."""
    from aisim.output.perfetto import ChromeTrace, PerfettoTrace
    from aisim.output.timeline import build
    from aisim.output.write import write_file_atomically

    cut = _cut(request_range, window)
    writer = ChromeTrace() if as_json else PerfettoTrace()
    counts = build(run_dir, writer, cut)
    out = output or run_dir / ("trace.json" if as_json else "trace.perfetto-trace")
    write_file_atomically(out, writer.to_bytes(), "--output")
    what = f"{counts['passes']} passes"
    what += (
        f", {counts['requests']} requests"
        if counts["request_tracks"]
        else " (no requests.jsonl: rerun with --capture-per-request for request tracks)"
    )
    click.echo(f"{out}: {what}")


def _cut(request_range: str | None, window: str | None):
    from aisim.errors import ConfigError
    from aisim.output.timeline import Cut

    first, last = 0, None
    if request_range is not None:
        try:
            if "-" in request_range:
                a, b = request_range.split("-", 1)
                first, last = int(a), int(b)
            else:
                last = int(request_range) - 1
            ok = first >= 0 and (last is None or last >= first)
        except ValueError:
            ok = False
        if not ok:
            raise ConfigError(
                f"--requests {request_range!r}: expected a count N or an index range A-B "
                "(A <= B), e.g. 1000 or 0-999"
            )
    start, end = float("-inf"), float("inf")
    if window is not None:
        try:
            a, b = window.split(":", 1)
            start = float(a) * 1000.0 if a.strip() else start
            end = float(b) * 1000.0 if b.strip() else end
            ok = start <= end
        except ValueError:
            ok = False
        if not ok:
            raise ConfigError(
                f"--window {window!r}: expected START:END in simulated seconds (START <= END; "
                "either may be left out), e.g. 10:20 or :5"
            )
    return Cut(first, last, start, end)


def register(main_group: click.Group) -> None:
    main_group.add_command(trace)
