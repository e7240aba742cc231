"""Rust `rand` 0.9 `StdRng` (ChaCha12) seeded by `seed_from_u64`, bit-exact, as array state.

AISimulate draws Poisson inter-arrival gaps and MTP draft acceptance from this generator
(behaviour.md 3, 8.2). State is one uint32[8 + 64 + 4] array: key words, a buffer of four
ChaCha blocks (64 words), then [block counter low, block counter high, buffer index, unused],
then 32 words that earlier versions used as scratch (kept so the state layout is stable).
"""

import numpy as np

from aisim.kernels._jit import helper, kernel

KEY = 0
BUF = 8
META = 72
SCRATCH = 76
STATE_WORDS = 108
_M32 = np.uint64(0xFFFFFFFF)


@helper
def _rotl(v, c):
    # numba widens uint32 arithmetic to 64 bits: the cast keeps the low word (wrap-around)
    return np.uint32((v << np.uint64(c)) | (v >> np.uint64(32 - c)))


@helper
def _add(a, b):
    return np.uint32(a + b)


@helper
def _qr(a, b, c, d):
    """ChaCha quarter round on four uint32 words held in registers."""
    a = _add(a, b)
    d = _rotl(d ^ a, 16)
    c = _add(c, d)
    b = _rotl(b ^ c, 12)
    a = _add(a, b)
    d = _rotl(d ^ a, 8)
    c = _add(c, d)
    b = _rotl(b ^ c, 7)
    return a, b, c, d


@kernel
def _refill(st):
    """Fill the buffer with four consecutive ChaCha12 blocks and advance the counter by 4.

    The block function works on 16 local words (registers), not on array slots: an array-based
    version with called quarter rounds cost ~3x more per draw."""
    counter = np.uint64(st[META]) | (np.uint64(st[META + 1]) << np.uint64(32))
    k0, k1, k2, k3 = st[KEY], st[KEY + 1], st[KEY + 2], st[KEY + 3]
    k4, k5, k6, k7 = st[KEY + 4], st[KEY + 5], st[KEY + 6], st[KEY + 7]
    c0 = np.uint32(0x61707865)
    c1 = np.uint32(0x3320646E)
    c2 = np.uint32(0x79622D32)
    c3 = np.uint32(0x6B206574)
    zero = np.uint32(0)
    for blk in range(4):
        ctr = counter + np.uint64(blk)
        lo = np.uint32(ctr & _M32)
        hi = np.uint32(ctr >> np.uint64(32))
        x0, x1, x2, x3 = c0, c1, c2, c3
        x4, x5, x6, x7 = k0, k1, k2, k3
        x8, x9, x10, x11 = k4, k5, k6, k7
        x12, x13, x14, x15 = lo, hi, zero, zero
        for _ in range(6):
            x0, x4, x8, x12 = _qr(x0, x4, x8, x12)
            x1, x5, x9, x13 = _qr(x1, x5, x9, x13)
            x2, x6, x10, x14 = _qr(x2, x6, x10, x14)
            x3, x7, x11, x15 = _qr(x3, x7, x11, x15)
            x0, x5, x10, x15 = _qr(x0, x5, x10, x15)
            x1, x6, x11, x12 = _qr(x1, x6, x11, x12)
            x2, x7, x8, x13 = _qr(x2, x7, x8, x13)
            x3, x4, x9, x14 = _qr(x3, x4, x9, x14)
        o = BUF + 16 * blk
        st[o] = x0 + c0
        st[o + 1] = x1 + c1
        st[o + 2] = x2 + c2
        st[o + 3] = x3 + c3
        st[o + 4] = x4 + k0
        st[o + 5] = x5 + k1
        st[o + 6] = x6 + k2
        st[o + 7] = x7 + k3
        st[o + 8] = x8 + k4
        st[o + 9] = x9 + k5
        st[o + 10] = x10 + k6
        st[o + 11] = x11 + k7
        st[o + 12] = x12 + lo
        st[o + 13] = x13 + hi
        st[o + 14] = x14
        st[o + 15] = x15
    counter += np.uint64(4)
    st[META] = np.uint32(counter & _M32)
    st[META + 1] = np.uint32(counter >> np.uint64(32))
    st[META + 2] = 0


@kernel
def seed_from_u64(st, seed):
    """Expand a u64 seed into the ChaCha key (PCG32 steps) and empty the buffer."""
    state = np.uint64(seed)
    mul = np.uint64(6364136223846793005)
    inc = np.uint64(11634580027462260723)
    for k in range(8):
        state = state * mul + inc
        xs = np.uint32((((state >> np.uint64(18)) ^ state) >> np.uint64(27)) & _M32)
        rot = np.uint32(state >> np.uint64(59))
        st[KEY + k] = (xs >> rot) | (xs << ((np.uint32(32) - rot) & np.uint32(31)))
    st[META] = 0
    st[META + 1] = 0
    st[META + 2] = 64  # empty buffer: the first draw refills


@kernel
def next_u32(st):
    if st[META + 2] >= 64:
        _refill(st)
    i = st[META + 2]
    st[META + 2] = i + 1
    return st[BUF + i]


@helper
def next_u64(st):
    """rand_core block-RNG rule: two consecutive words, low first, across a refill if needed."""
    i = st[META + 2]
    if i >= 64:
        _refill(st)
        i = 0
    if i < 63:
        lo = np.uint64(st[BUF + i])
        hi = np.uint64(st[BUF + i + 1])
        st[META + 2] = i + 2
    else:
        lo = np.uint64(st[BUF + 63])
        _refill(st)
        hi = np.uint64(st[BUF])
        st[META + 2] = 1
    return lo | (hi << np.uint64(32))


@helper
def random_bool(st, p_int, always):
    """Bernoulli draw: `always` (p == 1) accepts without consuming; else next_u64 < p_int."""
    if always:
        return True
    return next_u64(st) < p_int


@kernel
def unit_f64(st):
    """U in [0, 1) with 53 random bits, as rand's Standard f64."""
    return float(next_u64(st) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@kernel
def fill_poisson_arrivals_ms(st, seed, rate_per_s, out):
    """Arrival times: request 0 at 0, then gaps -ln(1 - U) x (1000 / rate) summed in ms."""
    seed_from_u64(st, seed)
    n = out.shape[0]
    t = 0.0
    scale = 1000.0 / rate_per_s
    for k in range(n):
        if k > 0:
            t += -np.log(1.0 - unit_f64(st)) * scale
        out[k] = t


def poisson_arrivals_ms(seed: int, rate_per_s: float, n: int) -> np.ndarray:
    out = np.empty(n, dtype=np.float64)
    fill_poisson_arrivals_ms(np.zeros(STATE_WORDS, dtype=np.uint32), np.uint64(seed),
                             float(rate_per_s), out)
    return out


def bernoulli_threshold(p: float) -> tuple[np.uint64, bool]:
    """(p_int, always) for random_bool: rand 0.9 compares against floor(p x 2^64)."""
    if p >= 1.0:
        return np.uint64(0), True
    return np.uint64(int(p * 2.0**64)), False
