"""Rust `rand` 0.9 `StdRng` (ChaCha12) seeded by `seed_from_u64`, bit-exact, as array state.

AISimulate draws Poisson inter-arrival gaps and MTP draft acceptance from this generator
(behaviour.md 3, 8.2). State is one uint32[8 + 64 + 4] array: key words, a buffer of four
ChaCha blocks (64 words), then [block counter low, block counter high, buffer index, unused],
then 32 words that earlier versions used as scratch (kept so the state layout is stable).
"""

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from aisim.kernels._jit import helper, kernel

KEY = 0
BUF = 8
META = 72
SCRATCH = 76
STATE_WORDS = 108
_M32 = np.uint64(0xFFFFFFFF)


_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_V32 = ir.VectorType(_I32, 4)
_V64 = ir.VectorType(_I64, 4)
_SIGMA = (0x61707865, 0x3320646E, 0x79622D32, 0x6B206574)  # "expand 32-byte k"


@intrinsic
def _chacha12_x4(typingctx, st):
    """The four ChaCha12 blocks of one refill, computed side by side in 4-lane vectors.

    Lane b holds block counter + b, so each quarter-round step is one vector instruction for
    all four blocks (MTP runs draw a u64 per drafting request per pass; the scalar version,
    one block at a time in registers, was ~3x slower per refill). Written as LLVM IR because
    numba has no vector type; the arithmetic is the plain ChaCha block function.
    """
    if not (isinstance(st, types.Array) and st.dtype == types.uint32 and st.ndim == 1):
        return None

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data

        def word(i):
            return builder.gep(data, [ir.Constant(_I64, i)])

        def splat(scalar):
            v = ir.Constant(_V32, ir.Undefined)
            for lane in range(4):
                v = builder.insert_element(v, scalar, ir.Constant(_I32, lane))
            return v

        def rotl(v, c):
            left = builder.shl(v, ir.Constant(_V32, [c] * 4))
            return builder.or_(left, builder.lshr(v, ir.Constant(_V32, [32 - c] * 4)))

        def quarter_round(x, a, b, c, d):
            x[a] = builder.add(x[a], x[b])
            x[d] = rotl(builder.xor(x[d], x[a]), 16)
            x[c] = builder.add(x[c], x[d])
            x[b] = rotl(builder.xor(x[b], x[c]), 12)
            x[a] = builder.add(x[a], x[b])
            x[d] = rotl(builder.xor(x[d], x[a]), 8)
            x[c] = builder.add(x[c], x[d])
            x[b] = rotl(builder.xor(x[b], x[c]), 7)

        lo = builder.zext(builder.load(word(META)), _I64)
        hi = builder.zext(builder.load(word(META + 1)), _I64)
        counter = builder.or_(lo, builder.shl(hi, ir.Constant(_I64, 32)))
        ctr = ir.Constant(_V64, ir.Undefined)
        for lane in range(4):
            ctr = builder.insert_element(ctr, builder.add(counter, ir.Constant(_I64, lane)),
                                         ir.Constant(_I32, lane))
        init = [ir.Constant(_V32, [w] * 4) for w in _SIGMA]
        init += [splat(builder.load(word(KEY + k))) for k in range(8)]
        init.append(builder.trunc(ctr, _V32))
        init.append(builder.trunc(builder.lshr(ctr, ir.Constant(_V64, [32] * 4)), _V32))
        init += [ir.Constant(_V32, [0] * 4)] * 2  # stream id 0
        x = list(init)
        for _ in range(6):  # 12 rounds: column round + diagonal round, six times
            quarter_round(x, 0, 4, 8, 12)
            quarter_round(x, 1, 5, 9, 13)
            quarter_round(x, 2, 6, 10, 14)
            quarter_round(x, 3, 7, 11, 15)
            quarter_round(x, 0, 5, 10, 15)
            quarter_round(x, 1, 6, 11, 12)
            quarter_round(x, 2, 7, 8, 13)
            quarter_round(x, 3, 4, 9, 14)
        for i in range(16):
            out = builder.add(x[i], init[i])
            for lane in range(4):
                builder.store(builder.extract_element(out, ir.Constant(_I32, lane)),
                              word(BUF + 16 * lane + i))
        nxt = builder.add(counter, ir.Constant(_I64, 4))
        builder.store(builder.trunc(nxt, _I32), word(META))
        builder.store(builder.trunc(builder.lshr(nxt, ir.Constant(_I64, 32)), _I32), word(META + 1))
        builder.store(ir.Constant(_I32, 0), word(META + 2))
        return context.get_dummy_value()

    return types.void(st), codegen


@kernel
def _refill(st):
    """Fill the buffer with four consecutive ChaCha12 blocks and advance the counter by 4."""
    _chacha12_x4(st)


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
