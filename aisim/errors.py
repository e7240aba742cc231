"""User-facing errors: each one is a single clear line and exit code 2, never a traceback."""

from __future__ import annotations

import click


class AisimError(click.ClickException):
    """Base of every error caused by user input (config, trace, CLI flag)."""

    exit_code = 2

    def format_message(self) -> str:
        return self.message

    def show(self, file=None) -> None:
        click.echo(f"aisim: error: {self.format_message()}", err=True)


class ConfigError(AisimError):
    """A config value is wrong; the message names the dotted path and the fix."""


class NotAvailableError(AisimError):
    """A valid config asks for a feature that aisim does not implement yet."""


class HybridEstimateError(NotAvailableError):
    """HYBRID mode on a deployment whose tables miss an op: AISimulate would price that op from
    its empirical utilisation grid, which aisim does not build yet."""


class CapacityError(AisimError):
    """The deployment can never finish a request (e.g. the KV pool cannot hold one)."""


class Interrupted(click.ClickException):
    """Ctrl-C (SIGINT) or SIGTERM stopped the command; nothing half-written was left behind."""

    def __init__(self, signum: int, detail: str = "") -> None:
        import signal

        name = signal.Signals(signum).name
        super().__init__(f"interrupted ({name}){'; ' + detail if detail else ''}")
        self.exit_code = 128 + signum  # the shell's convention: 130 for SIGINT, 143 for SIGTERM

    def show(self, file=None) -> None:
        click.echo(f"aisim: {self.format_message()}", err=True)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be, so both stop a run by the same paths."""


def interrupt_signal(exc: BaseException) -> int:
    """The signal number behind a KeyboardInterrupt (SIGTERM for Terminated)."""
    import signal

    return signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT


def note(message: str) -> None:
    """One line on stderr about something aisim did that the user did not spell out (a default
    it applied, rows it reordered); results are unaffected by whether anyone reads it."""
    click.echo(f"aisim: note: {' '.join(message.split())}", err=True)


class RunFailed(click.ClickException):
    """The input was fine but the run could not give results (every sweep point failed, a
    worker process was killed from outside): exit 1, one line."""

    exit_code = 1

    def show(self, file=None) -> None:
        click.echo(f"aisim: error: {self.format_message()}", err=True)


class InternalError(click.ClickException):
    """An unexpected exception (a bug in aisim): one line and exit 3; AISIM_TRACEBACK=1 lets
    the traceback through instead."""

    exit_code = 3

    def __init__(self, exc: BaseException) -> None:
        text = " ".join(str(exc).split())[:300]
        super().__init__(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)

    def show(self, file=None) -> None:
        click.echo(
            f"aisim: internal error: {self.format_message()} (rerun with "
            "AISIM_TRACEBACK=1 to see where)",
            err=True,
        )


class NoRequestsCompleted(click.ClickException):
    """The run finished but no request completed (AISimulate exits 1 in this case)."""

    exit_code = 1

    def show(self, file=None) -> None:
        click.echo(f"ERROR: {self.format_message()}", err=True)


class OpTableError(AisimError):
    """The op-time tables cannot answer.

    ``OpTableError(op, key, detail)``: an op's discrete key has no data (docs/timing.md 5); carries
    the op name and the key so callers and tests can tell which slice is missing.
    ``OpTableError(message)``: a compiled table (hardware / backend / version / family) is
    missing or unreadable; the message names it.
    """

    def __init__(self, op: str, key: str | None = None, detail: str | None = None) -> None:
        self.op = op if key is not None else None
        self.key = key
        self.detail = detail
        if key is None:
            super().__init__(op)
        else:
            super().__init__(f"op-time table miss: op {op}, key {key}: {detail}")


class UpFrontTableError(OpTableError):
    """A table problem AISimulate meets before any pass: refused even when no pass is ever
    priced (every request rejected), unlike a key miss."""


class EmptyTableError(UpFrontTableError):
    """A table family the run must load holds no rows at all (AISimulate loads it up front)."""


class UnratedDtypeError(UpFrontTableError):
    """The GPU has no tensor-core rate for a dtype the plan needs (fp8 on an A100): AISimulate
    rejects the engine config itself."""
