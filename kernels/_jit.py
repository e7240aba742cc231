"""The only place jit options are set.

cache=True   compiled kernels are written next to the source, so a warm process skips compiling.
nogil=True   sweeps may run independent points on threads.
error_model="numpy"   integer division by zero must not raise a Python exception inside a pass;
             every divisor here is checked before use.
_nrt=False   no reference counting: every array a kernel touches is owned by the Python caller
             for the whole call, and with NRT on, each array handed to a helper paid an atomic
             incref/decref pair (measured: 28 ns vs 1 ns per small helper call with five
             arrays; the event loop ran 3x slower). Consequence: kernels never allocate
             (no np.empty / np.zeros inside); scratch space comes in from the caller.
No fastmath: results must be bit-reproducible across runs and machines.
"""

import hashlib
import os
from functools import partial
from pathlib import Path

import numba

from . import _cache

# Pure-Python cache management: it decides no compiled code, so editing it must not invalidate
# the shipped archive (kernels/_cache.py says why and how the folders are laid out).
_NOT_CODEGEN = ("_cache.py",)


def kernel_digest() -> str:
    """sha256 over every kernel source file that shapes compiled code (names and bytes).

    numba's own cache only notices edits to the file that defines a function, not to kernels it
    calls from other files; keying the cache folder by all kernel sources makes a stale binary
    impossible (and lets several aisim versions share a machine).
    """
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        if path.name in _NOT_CODEGEN:
            continue
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


PREBUILT = Path(__file__).parent / "prebuilt.tar.gz"
PREBUILT_CPU = "generic"


def prebuilt_manifest(digest: str) -> dict:
    """What a prebuilt archive must have been built for to be usable in this process."""
    import sys

    return {
        "kernel_digest": digest,
        "numba": numba.__version__,
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "cpu": PREBUILT_CPU,
    }


if not os.environ.get("NUMBA_CPU_NAME"):
    # Portable code: the prebuilt kernels run on any x86-64, and kernels compiled here match
    # them (numba keys each cached binary on the CPU name and features it was built for).
    numba.config.CPU_NAME = PREBUILT_CPU
    numba.config.CPU_FEATURES = ""

if not os.environ.get("NUMBA_CACHE_DIR"):
    _digest = kernel_digest()
    numba.config.CACHE_DIR = str(
        _cache.prepare(_digest, Path(__file__).parent, PREBUILT, prebuilt_manifest(_digest))
    )

kernel = partial(numba.njit, cache=True, nogil=True, error_model="numpy", _nrt=False)

# Small helpers called per request inside a pass are inlined at numba-IR level: an ordinary call
# between jitted functions increfs and decrefs every array of each NamedTuple argument, which
# costs more than the helper's own work (measured: ~400 ns per request per pass without it).
helper = partial(
    numba.njit, cache=True, nogil=True, error_model="numpy", _nrt=False, inline="always"
)


def cache_is_warm() -> bool:
    """True when this install has compiled kernels for these exact sources on disk."""
    folder = numba.config.CACHE_DIR
    return bool(folder) and _cache.has_index(
        Path(folder) / _cache.install_subpath(Path(__file__).parent)
    )
