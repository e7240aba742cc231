"""Where a cold numba compile spends its time: exclusive seconds per kernel, and its LLVM share.

usage: AISIM_CACHE_DIR=$(mktemp -d) python bench/compile_profile.py predict -c CONFIG [...]

Runs the aisim CLI in-process with a numba compile-event listener. A kernel's compile includes
the compiles of the kernels it calls, so each event's nested time is subtracted to give the
kernel's own share; LLVM time is attributed to the kernel being compiled when it ran. Point
AISIM_CACHE_DIR at an empty folder, or every kernel loads from the cache and nothing is listed.
"""

from __future__ import annotations

import collections
import os
import sys
import time

from numba.core import event

exclusive: collections.Counter = collections.Counter()
llvm: collections.Counter = collections.Counter()
_stack: list[list] = []  # [start, nested seconds, kernel name] per compile in progress


def _name(data: dict) -> str:
    fn = getattr(data.get("dispatcher"), "py_func", None)
    return f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__qualname__}" if fn else "?"


class _Compiles(event.Listener):
    def on_start(self, ev):
        _stack.append([time.perf_counter(), 0.0, _name(ev.data)])

    def on_end(self, ev):
        start, nested, name = _stack.pop()
        took = time.perf_counter() - start
        exclusive[name] += took - nested
        if _stack:
            _stack[-1][1] += took


class _Llvm(event.Listener):
    def on_start(self, ev):
        self.start = time.perf_counter()

    def on_end(self, ev):
        llvm[_stack[-1][2] if _stack else "?"] += time.perf_counter() - self.start


def report(top: int = 30) -> None:
    print(
        f"compile total {sum(exclusive.values()):.1f} s (LLVM {sum(llvm.values()):.1f} s)",
        file=sys.stderr,
    )
    for name, seconds in exclusive.most_common(top):
        print(f"{seconds:8.2f} s  LLVM {llvm[name]:6.2f} s  {name}", file=sys.stderr)


def main() -> None:
    event.register("numba:compile", _Compiles())
    event.register("numba:llvm_lock", _Llvm())
    real_exit = os._exit

    def exit_after_report(code: int) -> None:  # the CLI leaves through os._exit (no atexit)
        report()
        sys.stderr.flush()
        real_exit(code)

    os._exit = exit_after_report
    from aisim.cli import main as cli

    sys.argv = ["aisim", *sys.argv[1:]]
    try:
        cli()
    finally:
        report()


if __name__ == "__main__":
    main()
