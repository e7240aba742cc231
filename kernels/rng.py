"""Rust `rand` 0.9 `StdRng` (ChaCha12) seeded by `seed_from_u64`, bit-exact, as array state.

AISimulate draws Poisson inter-arrival gaps and MTP draft acceptance from this generator
(behaviour.md 3, 8.2). State is one uint32[8 + 64 + 4] array: key words, a buffer of four
ChaCha blocks (64 words), then [block counter low, block counter high, buffer index, unused],
then 32 words of scratch for the block function (kernels do not allocate).
"""

import numpy as np

from aisim.kernels._jit import kernel

KEY = 0
BUF = 8
META = 72
SCRATCH = 76
STATE_WORDS = 108
_M32 = np.uint64(0xFFFFFFFF)


@kernel
def _rotl(v, c):
    return ((v << np.uint32(c)) | (v >> np.uint32(32 - c))) & np.uint32(0xFFFFFFFF)


@kernel
def _qr(s, a, b, c, d):
    s[a] = s[a] + s[b]
    s[d] = _rotl(s[d] ^ s[a], 16)
    s[c] = s[c] + s[d]
    s[b] = _rotl(s[b] ^ s[c], 12)
    s[a] = s[a] + s[b]
    s[d] = _rotl(s[d] ^ s[a], 8)
    s[c] = s[c] + s[d]
    s[b] = _rotl(s[b] ^ s[c], 7)


@kernel
def _refill(st):
    """Fill the buffer with four consecutive ChaCha12 blocks and advance the counter by 4."""
    counter = np.uint64(st[META]) | (np.uint64(st[META + 1]) << np.uint64(32))
    x = st[SCRATCH:SCRATCH + 16]
    init = st[SCRATCH + 16:SCRATCH + 32]
    for blk in range(4):
        ctr = counter + np.uint64(blk)
        init[0] = 0x61707865
        init[1] = 0x3320646E
        init[2] = 0x79622D32
        init[3] = 0x6B206574
        for k in range(8):
            init[4 + k] = st[KEY + k]
        init[12] = np.uint32(ctr & _M32)
        init[13] = np.uint32(ctr >> np.uint64(32))
        init[14] = 0
        init[15] = 0
        for k in range(16):
            x[k] = init[k]
        for _ in range(6):
            _qr(x, 0, 4, 8, 12)
            _qr(x, 1, 5, 9, 13)
            _qr(x, 2, 6, 10, 14)
            _qr(x, 3, 7, 11, 15)
            _qr(x, 0, 5, 10, 15)
            _qr(x, 1, 6, 11, 12)
            _qr(x, 2, 7, 8, 13)
            _qr(x, 3, 4, 9, 14)
        for k in range(16):
            st[BUF + 16 * blk + k] = x[k] + init[k]
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


@kernel
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


@kernel
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
