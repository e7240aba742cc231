"""Integer block counts and the clock's phase arithmetic, shared by every kernel."""

import numpy as np

from aisim.kernels._jit import helper


@helper
def ceil_div(a, b):
    return -((-a) // b)


@helper
def round_ns(ms):
    """A phase duration as AISimulate's clock adds it: whole nanoseconds, nearest."""
    if ms <= 0.0:
        return np.int64(0)
    return np.int64(np.floor(ms * 1e6 + 0.5))


@helper
def phase_ms(ns):
    """A whole-nanosecond phase duration in ms as the clock adds it: seconds plus nanoseconds
    over 1e9 (Rust's Duration::as_secs_f64), times 1000. The pass end is
    start + phase_ms(prefill) + phase_ms(decode), two float additions (docs/rules.md, "Clock")."""
    whole = ns // 1_000_000_000
    return (np.float64(whole) + np.float64(ns - whole * 1_000_000_000) / 1e9) * 1000.0
