#!/usr/bin/env python3
"""Run aisim with its kernels as plain Python (numba off): no compile, so a kernel edit can be
checked at once, with print and pdb; slow, so for small cases and the golden suite (~25 s).

    python bench/pure_python.py predict -c CFG.yaml --output-dir OUT [...]   # the aisim CLI
    PYTHONPATH=bench python -m pytest -p pure_python -m "not slow" tests/test_golden.py

Three things numba provides and plain Python lacks are patched in before aisim runs:

* the op plan's pass scalars are a one-row structured array read by field name (`scalars[0].x`):
  as a recarray its row allows attribute access;
* some callers reach a kernel's Python body through `.py_func`: each plain function gets one;
* the ChaCha12 refill of kernels/rng.py is an LLVM intrinsic with no Python body: it is
  replaced by the plain-Python reading of tests/reference/stdrng.py (word-major buffer, the
  block counter advanced by 16), so Poisson arrivals and MTP draws work too.

A maintenance tool: nothing in aisim or its tests imports it.
"""

from __future__ import annotations

import os
import sys
import types
import warnings

os.environ["NUMBA_DISABLE_JIT"] = "1"

import importlib
import pkgutil
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent


def _patch() -> None:
    np.seterr(all="ignore")  # the hash mixers rely on wrapping uint64 arithmetic
    warnings.filterwarnings("ignore", category=RuntimeWarning)
    import aisim.kernels as kernels
    import aisim.kernels.rng as rng
    import aisim.timing.plan_record as plan_record

    scalars = plan_record.pass_scalars
    plan_record.pass_scalars = lambda **values: scalars(**values).view(np.recarray)
    for info in pkgutil.iter_modules(kernels.__path__):
        module = importlib.import_module(f"aisim.kernels.{info.name}")
        for value in vars(module).values():
            if isinstance(value, types.FunctionType) and not hasattr(value, "py_func"):
                value.py_func = value
    sys.path.insert(0, str(REPO / "tests" / "reference"))
    import stdrng

    def refill(st):
        key = [int(w) for w in st[rng.KEY : rng.KEY + 8]]
        counter = int(st[rng.META]) | (int(st[rng.META + 1]) << 32)
        for b in range(16):
            for i, word in enumerate(stdrng._block(key, counter + b)):
                st[rng.BUF + 16 * i + b] = word
        counter += 16
        st[rng.META] = counter & 0xFFFFFFFF
        st[rng.META + 1] = counter >> 32
        st[rng.META + 2] = 0

    rng._refill = refill


_patch()

if __name__ == "__main__":
    from aisim.cli import main

    sys.argv = ["aisim", *sys.argv[1:]]
    sys.exit(main())
