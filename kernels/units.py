"""Integer block counts and the clock's phase arithmetic, shared by every kernel."""

import numpy as np

from aisim.kernels._jit import helper


@helper
def ceil_div(a, b):
    return -((-a) // b)


@helper
def round_ns(ms):
    """A phase duration as AISimulate's clock takes it: Rust's Duration::from_secs_f64 of
    ms / 1000, the exact binary value of those seconds rounded to the nearest nanosecond, ties
    to even. Polynomial times sit on decimal ties (30.4689625 ms): their double is a hair below
    the tie, so this gives 30468962 ns where rounding the float product ms * 1e6 gives 30468963
    (docs/rules.md, "Clock")."""
    if ms <= 0.0:
        return np.int64(0)
    s = ms / 1000.0
    hi = s * 1e9
    lo = _product_error(s, 1e9, hi)  # s * 1e9 == hi + lo exactly
    k = np.floor(hi)
    # hi - k is exact (both on hi's ulp grid), and so is that minus 0.5 once it is >= 0.25
    above = (hi - k) - 0.5 + lo
    n = np.int64(k)
    if above > 0.0 or (above == 0.0 and n % 2 == 1):
        n += 1
    return n


@helper
def _product_error(a, b, p):
    """The rounding error of p = fl(a * b): a * b == p + error exactly (Dekker's product; no
    fused multiply-add needed)."""
    c = 134217729.0 * a  # 2**27 + 1 splits a double into two 26-bit halves
    a_hi = c - (c - a)
    a_lo = a - a_hi
    c = 134217729.0 * b
    b_hi = c - (c - b)
    b_lo = b - b_hi
    return ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo


@helper
def phase_ms(ns):
    """A whole-nanosecond phase duration in ms as the clock adds it: seconds plus nanoseconds
    over 1e9 (Rust's Duration::as_secs_f64), times 1000. The pass end is
    start + phase_ms(prefill) + phase_ms(decode), two float additions (docs/rules.md, "Clock")."""
    whole = ns // 1_000_000_000
    return (np.float64(whole) + np.float64(ns - whole * 1_000_000_000) / 1e9) * 1000.0
