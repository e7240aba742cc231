"""Cost of the event loop's memo-miss path: one `pass_price.memo_fill` call per distinct pass shape.

    python bench/memo_miss.py [--repeats 7] [--shapes 400] [GOLDEN_NAME ...]

For each golden config (default: a dense vLLM, a dense TRT-LLM, DeepSeek-V3.2 DSA, DeepSeek-R1
MLA on TRT-LLM and DeepSeek-V3 on vLLM TP x DP) the op plan is resolved as `aisim predict`
resolves it, then a jitted driver calls `memo_fill` (the kernel the event loop calls when a
pass shape is not cached) on a fixed list of distinct prefill and decode shapes. The driver is
compiled and warmed first, so only pricing is timed; best of --repeats, in microseconds per
call. A checksum of the phase totals shows two builds price the same shapes identically.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

GOLDEN = Path(__file__).resolve().parents[1] / "tests" / "golden"
DEFAULT = (
    "dense-vllm-c64-r256",
    "dense-trtllm-c64-r256",
    "mla-dp8-c128-r256",
    "dsr1-trtllm-tp8",
    "dsv3-vllm-tp2-dp4",
)


def shapes(count: int, seed: int = 11) -> tuple[np.ndarray, ...]:
    """Half prefills (batch, isl, prefix), half decodes (batch, ctx, 0), all distinct."""
    rng = np.random.default_rng(seed)
    seen: set = set()
    rows = []
    while len(rows) < count:
        if len(rows) % 2 == 0:
            batch = int(rng.integers(1, 17))
            isl = int(rng.integers(16, 12000))
            key = (0, batch, isl, int(rng.integers(0, isl)) if rng.random() < 0.3 else 0)
        else:
            key = (1, int(rng.integers(1, 257)), int(rng.integers(2, 40000)), 0)
        if key not in seen:
            seen.add(key)
            rows.append(key)
    cols = np.asarray(rows, np.int64).T
    return tuple(np.ascontiguousarray(c) for c in cols)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*", default=list(DEFAULT))
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--shapes", type=int, default=400)
    args = ap.parse_args()

    import numba

    from aisim.config import load_config
    from aisim.engine.spec import resolve
    from aisim.kernels import pass_price
    from aisim.state import allocate_memo
    from aisim.timing.provider import plan_for

    @numba.njit
    def drive(plan, memo, kind, a, b, c):
        total = 0.0
        for i in range(kind.shape[0]):
            slot = i & (memo.keys.shape[0] - 1)
            pass_price.memo_fill(plan, memo, slot, kind[i], a[i], b[i], c[i])
            total += memo.vals[slot]
        return total

    kind, a, b, c = shapes(args.shapes)
    for name in args.names:
        spec = resolve(load_config(str(GOLDEN / name / "config.yaml")))
        plan = plan_for(spec, name)
        memo = allocate_memo(len(plan.op_names), 1 << 10)
        checksum = drive(plan.arrays, memo, kind, a, b, c)  # compile + warm
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            drive(plan.arrays, memo, kind, a, b, c)
            best = min(best, time.perf_counter() - t0)
        print(
            f"{name:32s} {best / len(kind) * 1e6:8.2f} us per memo_fill "
            f"({len(plan.op_names)} ops, checksum {checksum!r})"
        )


if __name__ == "__main__":
    main()
