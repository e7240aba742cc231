"""Rust `rand` 0.9 `StdRng` (ChaCha12) seeded by `seed_from_u64`, bit-exact, as array state.

AISimulate draws Poisson inter-arrival gaps and MTP draft acceptance from this generator
(docs/rules.md 1.4, 8.6). State is one uint32[8 + 256 + 4] array: key words, a buffer of sixteen
ChaCha blocks, then [block counter low, block counter high, buffer index, vector level].

The stream is the sequence of keystream words; a u64 takes the next two (low first), so the
buffer size is free: rand buffers 4 blocks, this buffers 16, and both read the same words. The
buffer is word-major (word i of block b at BUF + 16 i + b) so a refill stores whole vectors.
"""

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from aisim.kernels._jit import helper, kernel

KEY = 0
BUF = 8
BUF_WORDS = 256
META = BUF + BUF_WORDS
LEVEL = META + 3
STATE_WORDS = META + 4
_M32 = np.uint64(0xFFFFFFFF)

_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_SIGMA = (0x61707865, 0x3320646E, 0x79622D32, 0x6B206574)  # "expand 32-byte k"
# (lanes, LLVM target features, symbol) per vector level: the level-0 function is plain
# vector IR compiled for the build target (SSE2 on the generic x86-64 the archive is built for);
# the others carry their own target features and run only where the host reports them.
_LEVELS = (
    (4, "", "aisim_chacha12_x4_v1"),
    (8, "+avx2", "aisim_chacha12_x8_avx2_v1"),
    (16, "+avx512f", "aisim_chacha12_x16_avx512f_v1"),
)


def _blocks_function_ir(lanes: int, features: str, name: str, triple: str, layout: str) -> str:
    """LLVM IR text of `void name(i32* state, i64 first)`: ChaCha12 blocks counter + first ..
    counter + first + lanes - 1, computed side by side (lane b = one block), stored word-major.

    Written as IR text because numba has no vector type and llvmlite's IR builder cannot attach
    the target-features attribute that lets one function use AVX2 / AVX-512 inside a kernel
    library compiled for a generic CPU.
    """
    module = ir.Module(name=name)
    module.triple = triple
    module.data_layout = layout
    vec = ir.VectorType(_I32, lanes)
    vec64 = ir.VectorType(_I64, lanes)
    fshl = ir.Function(module, ir.FunctionType(vec, [vec, vec, vec]), name=f"llvm.fshl.v{lanes}i32")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [_I32.as_pointer(), _I64]), name=name)
    fn.linkage = "weak_odr"  # each kernel library that calls it may carry a copy: merged at link
    data, first = fn.args
    b = ir.IRBuilder(fn.append_basic_block())

    def word(i):
        return b.gep(data, [i if isinstance(i, ir.Value) else ir.Constant(_I64, i)])

    def splat(scalar, vtype):
        one = b.insert_element(ir.Constant(vtype, ir.Undefined), scalar, ir.Constant(_I32, 0))
        return b.shuffle_vector(
            one,
            ir.Constant(vtype, ir.Undefined),
            ir.Constant(ir.VectorType(_I32, lanes), [0] * lanes),
        )

    def rotl(v, c):
        return b.call(fshl, [v, v, ir.Constant(vec, [c] * lanes)])

    def quarter_round(x, a, bb, c, d):
        x[a] = b.add(x[a], x[bb])
        x[d] = rotl(b.xor(x[d], x[a]), 16)
        x[c] = b.add(x[c], x[d])
        x[bb] = rotl(b.xor(x[bb], x[c]), 12)
        x[a] = b.add(x[a], x[bb])
        x[d] = rotl(b.xor(x[d], x[a]), 8)
        x[c] = b.add(x[c], x[d])
        x[bb] = rotl(b.xor(x[bb], x[c]), 7)

    lo = b.zext(b.load(word(META)), _I64)
    hi = b.zext(b.load(word(META + 1)), _I64)
    counter = b.add(b.or_(lo, b.shl(hi, ir.Constant(_I64, 32))), first)
    ctr = b.add(splat(counter, vec64), ir.Constant(vec64, list(range(lanes))))
    init = [ir.Constant(vec, [w] * lanes) for w in _SIGMA]
    init += [splat(b.load(word(KEY + k)), vec) for k in range(8)]
    init.append(b.trunc(ctr, vec))
    init.append(b.trunc(b.lshr(ctr, ir.Constant(vec64, [32] * lanes)), vec))
    init += [ir.Constant(vec, [0] * lanes)] * 2  # stream id 0
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
        ptr = b.bitcast(word(b.add(first, ir.Constant(_I64, BUF + 16 * i))), vec.as_pointer())
        b.store(b.add(x[i], init[i]), ptr).align = 4
    b.ret_void()
    attrs = f' "target-features"="{features}"' if features else ""
    signature = f'@"{name}"(i32* %".1", i64 %".2")'
    text = str(module).replace(signature, signature + " #0", 1)
    return text + f"\nattributes #0 = {{ noinline nounwind{attrs} }}\n"


def _x86(triple: str) -> bool:
    return triple.startswith(("x86_64", "amd64"))


@intrinsic
def _chacha12_refill(typingctx, st):
    """Sixteen ChaCha12 blocks into the buffer with the widest vectors the state's level word
    allows (MTP runs draw a u64 per drafting request per pass: on mtp-vllm one 16-block refill
    took 450 ns with SSE2, 190 ns with AVX2, 110 ns with AVX-512)."""
    if not (isinstance(st, types.Array) and st.dtype == types.uint32 and st.ndim == 1):
        return None

    def codegen(context, builder, signature, args):
        module = builder.module
        levels = _LEVELS if _x86(module.triple) else _LEVELS[:1]
        library = context.active_code_library
        fns = []
        for lanes, features, name in levels:
            library.add_llvm_module(
                llvm.parse_assembly(
                    _blocks_function_ir(
                        lanes, features, name, module.triple, str(module.data_layout)
                    )
                )
            )
            fntype = ir.FunctionType(ir.VoidType(), [_I32.as_pointer(), _I64])
            fns.append(module.globals.get(name) or ir.Function(module, fntype, name=name))
        data = context.make_array(signature.args[0])(context, builder, args[0]).data

        def word(i):
            return builder.gep(data, [ir.Constant(_I64, i)])

        def fill(lanes, fn):
            for first in range(0, 16, lanes):
                builder.call(fn, [data, ir.Constant(_I64, first)])

        level = builder.load(word(LEVEL))
        after = builder.append_basic_block("chacha.done")
        cases = [builder.append_basic_block(f"chacha.level{k}") for k in range(len(fns))]
        switch = builder.switch(level, cases[0])
        for k, block in enumerate(cases):
            switch.add_case(ir.Constant(_I32, k), block)
            builder.position_at_end(block)
            fill(levels[k][0], fns[k])
            builder.branch(after)
        builder.position_at_end(after)
        lo = builder.zext(builder.load(word(META)), _I64)
        hi = builder.zext(builder.load(word(META + 1)), _I64)
        nxt = builder.add(
            builder.or_(lo, builder.shl(hi, ir.Constant(_I64, 32))), ir.Constant(_I64, 16)
        )
        builder.store(builder.trunc(nxt, _I32), word(META))
        builder.store(builder.trunc(builder.lshr(nxt, ir.Constant(_I64, 32)), _I32), word(META + 1))
        builder.store(ir.Constant(_I32, 0), word(META + 2))
        return context.get_dummy_value()

    return types.void(st), codegen


_host_level = None


def host_vector_level() -> int:
    """Widest refill this CPU (and its OS) runs: 2 AVX-512F, 1 AVX2, 0 otherwise."""
    global _host_level
    if _host_level is None:
        _host_level = 0
        if _x86(llvm.get_process_triple()):
            features = llvm.get_host_cpu_features()
            _host_level = 2 if features.get("avx512f") else 1 if features.get("avx2") else 0
    return _host_level


def _unseeded(level: int | None = None) -> np.ndarray:
    """A state to seed; `level` picks the refill's vector width (default: the host's widest).
    Every level yields the same words."""
    st = np.zeros(STATE_WORDS, dtype=np.uint32)
    st[LEVEL] = host_vector_level() if level is None else level
    return st


def new_stream(seed: int, level: int | None = None) -> np.ndarray:
    """A seeded state (see `_unseeded` for `level`)."""
    st = _unseeded(level)
    seed_from_u64(st, np.uint64(seed))
    return st


@kernel
def _refill(st):
    """Fill the buffer with sixteen consecutive ChaCha12 blocks and advance the counter by 16."""
    _chacha12_refill(st)


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
    st[META + 2] = BUF_WORDS  # empty buffer: the first draw refills


@helper
def _word(st, i):
    """Word i of the buffered stream (word-major layout: block i // 16, word i % 16)."""
    return st[BUF + ((i & np.uint32(15)) << np.uint32(4)) + (i >> np.uint32(4))]


@kernel
def next_u32(st):
    if st[META + 2] >= BUF_WORDS:
        _refill(st)
    i = st[META + 2]
    st[META + 2] = i + 1
    return _word(st, i)


@helper
def next_u64(st):
    """rand_core block-RNG rule: two consecutive words, low first, across a refill if needed."""
    i = st[META + 2]
    if i >= BUF_WORDS:
        _refill(st)
        i = np.uint32(0)
    if i < BUF_WORDS - 1:
        lo = np.uint64(_word(st, i))
        hi = np.uint64(_word(st, i + np.uint32(1)))
        st[META + 2] = i + 2
    else:
        lo = np.uint64(_word(st, i))
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


@kernel
def fill_below(st, seed, bound, out):
    """rand's `random_range(0..bound)` for a usize bound below 2^32, from a fresh seeded stream:
    a u32 x, result (x * bound) >> 32, and when the low half exceeds 2^32 - bound one more u32
    y whose (y * bound) >> 32 carries into it (Canon's method)."""
    seed_from_u64(st, seed)
    b = np.uint64(bound)
    neg = (np.uint64(1) << np.uint64(32)) - b
    for k in range(out.shape[0]):
        m = np.uint64(next_u32(st)) * b
        result = m >> np.uint64(32)
        lo = m & _M32
        if lo > neg:
            extra = (np.uint64(next_u32(st)) * b) >> np.uint64(32)
            if lo + extra > _M32:
                result += np.uint64(1)
        out[k] = result


def below(seed: int, bound: int, n: int) -> np.ndarray:
    """n draws of rand's `random_range(0..bound)` (bound < 2^32) from StdRng seeded by `seed`."""
    out = np.empty(n, dtype=np.int64)
    fill_below(_unseeded(), np.uint64(seed), np.int64(bound), out)
    return out


def poisson_arrivals_ms(seed: int, rate_per_s: float, n: int) -> np.ndarray:
    out = np.empty(n, dtype=np.float64)
    fill_poisson_arrivals_ms(_unseeded(), np.uint64(seed), float(rate_per_s), out)
    return out


def bernoulli_threshold(p: float) -> tuple[np.uint64, bool]:
    """(p_int, always) for random_bool: rand 0.9 compares against floor(p x 2^64)."""
    if p >= 1.0:
        return np.uint64(0), True
    return np.uint64(int(p * 2.0**64)), False
