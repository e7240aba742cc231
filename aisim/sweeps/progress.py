"""A one-line progress bar with an ETA on a terminal; silent when stderr is not a terminal."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, stream=None, enabled: bool | None = None):
        self.total = total
        self.done = 0
        self.failed = 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.t0 = time.monotonic()

    def advance(self, ok: bool = True) -> None:
        self.done += 1
        self.failed += 0 if ok else 1
        if self.enabled:
            self.stream.write("\r" + self.line())
            self.stream.flush()

    def line(self, width: int = 30) -> str:
        frac = self.done / self.total if self.total else 1.0
        elapsed = time.monotonic() - self.t0
        eta = elapsed / self.done * (self.total - self.done) if self.done else float("nan")
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        failed = f", {self.failed} failed" if self.failed else ""
        eta_text = "--" if eta != eta else f"{eta:5.1f}s"
        return (
            f"sweep [{bar}] {self.done}/{self.total} points{failed} "
            f"elapsed {elapsed:5.1f}s ETA {eta_text}"
        )

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
