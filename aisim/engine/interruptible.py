"""Compiled kernels that Ctrl-C and SIGTERM can stop.

A numba kernel never returns to the interpreter until it is done, so a signal that arrives while
it runs is handled only afterwards, and then inside numba's result boxing, which turns the
KeyboardInterrupt into a SystemError traceback. The kernels release the GIL (nogil), so each
call runs in its own thread while the main thread waits in short joins: the signal handler runs
at once in the main thread and the interrupt propagates from there. The kernel thread cannot be
stopped and runs on until its call returns; `abandoned()` tells the command line that one is
still running, so it ends the process at once instead of waiting for it.
"""

from __future__ import annotations

import threading

_abandoned = 0


def abandoned() -> int:
    """Kernel calls an interrupt left running in the background of this process."""
    return _abandoned


def run_kernel(fn, *args):
    """fn(*args), interruptible from the main thread (elsewhere it is a plain call: signal
    handlers only ever run in the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return fn(*args)
    box: dict = {}

    def call() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc

    worker = threading.Thread(target=call, name="aisim-kernel", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.2)
    except BaseException:
        global _abandoned
        _abandoned += 1
        raise
    if "error" in box:
        raise box["error"]
    return box["value"]
