"""Plain-Python reading of Rust rand 0.9 `StdRng` (ChaCha12), for testing kernels/rng.py.

Written from the algorithm (RFC 8439 quarter rounds, 12 rounds, 64-bit block counter, stream 0,
rand_core's 4-block buffer and `next_u64` rule; rand_core's PCG32 `seed_from_u64` expansion) and
kept deliberately naive: one integer at a time, no numpy, no shared code with the kernel.
"""

from __future__ import annotations

MASK32 = 0xFFFFFFFF
MASK64 = 0xFFFFFFFFFFFFFFFF
SIGMA = (0x61707865, 0x3320646E, 0x79622D32, 0x6B206574)  # "expand 32-byte k"


def _rotl32(v: int, c: int) -> int:
    return ((v << c) & MASK32) | (v >> (32 - c))


def _quarter(x: list[int], a: int, b: int, c: int, d: int) -> None:
    x[a] = (x[a] + x[b]) & MASK32
    x[d] = _rotl32(x[d] ^ x[a], 16)
    x[c] = (x[c] + x[d]) & MASK32
    x[b] = _rotl32(x[b] ^ x[c], 12)
    x[a] = (x[a] + x[b]) & MASK32
    x[d] = _rotl32(x[d] ^ x[a], 8)
    x[c] = (x[c] + x[d]) & MASK32
    x[b] = _rotl32(x[b] ^ x[c], 7)


def _block(key: list[int], counter: int) -> list[int]:
    start = [*SIGMA, *key, counter & MASK32, counter >> 32, 0, 0]
    x = list(start)
    for _ in range(6):  # 12 rounds = 6 double rounds
        _quarter(x, 0, 4, 8, 12)
        _quarter(x, 1, 5, 9, 13)
        _quarter(x, 2, 6, 10, 14)
        _quarter(x, 3, 7, 11, 15)
        _quarter(x, 0, 5, 10, 15)
        _quarter(x, 1, 6, 11, 12)
        _quarter(x, 2, 7, 8, 13)
        _quarter(x, 3, 4, 9, 14)
    return [(x[i] + start[i]) & MASK32 for i in range(16)]


class StdRng:
    def __init__(self, seed: int) -> None:
        state = seed & MASK64
        self.key = []
        for _ in range(8):
            state = (state * 6364136223846793005 + 11634580027462260723) & MASK64
            xorshifted = (((state >> 18) ^ state) >> 27) & MASK32
            rot = state >> 59
            self.key.append(((xorshifted >> rot) | (xorshifted << ((32 - rot) & 31))) & MASK32)
        self.counter = 0
        self.words: list[int] = []
        self.index = 64

    def _refill(self) -> None:
        self.words = []
        for k in range(4):
            self.words += _block(self.key, self.counter + k)
        self.counter += 4
        self.index = 0

    def next_u32(self) -> int:
        if self.index >= 64:
            self._refill()
        v = self.words[self.index]
        self.index += 1
        return v

    def next_u64(self) -> int:
        if self.index >= 64:
            self._refill()
        if self.index < 63:
            lo, hi = self.words[self.index], self.words[self.index + 1]
            self.index += 2
        else:
            lo = self.words[63]
            self._refill()
            hi = self.words[0]
            self.index = 1
        return lo | (hi << 32)

    def random_bool(self, p: float) -> bool:
        if p >= 1.0:
            return True
        return self.next_u64() < int(p * 2.0**64)


def burst(rng: StdRng, rates: list[float]) -> int:
    """1 + the number of leading draft positions accepted."""
    n = 1
    for rate in rates:
        if not rng.random_bool(rate):
            break
        n += 1
    return n
