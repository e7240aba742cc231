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


def _cache_dir() -> str:
    """A numba cache folder keyed by the hash of every kernel source file.

    numba's own cache only notices edits to the file that defines a function, not to kernels it
    calls from other files; keying the folder by all kernel sources makes a stale binary
    impossible (and lets several aisim versions share a machine).
    """
    digest = kernel_digest()
    base = os.environ.get("AISIM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "aisim", "numba")
    folder = os.path.join(base, digest[:16])
    if not os.path.isdir(folder):
        _prune(base, keep=3)
        seed_from_prebuilt(folder, digest)
    return folder


def kernel_digest() -> str:
    """sha256 over every kernel source file (names and bytes)."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _prune(base: str, keep: int) -> None:
    """Each kernel version caches ~5 MB; keep only the most recently used few."""
    import shutil

    try:
        entries = sorted((e for e in os.scandir(base) if e.is_dir()),
                         key=lambda e: e.stat().st_mtime, reverse=True)
    except OSError:
        return
    for entry in entries[keep:]:
        shutil.rmtree(entry.path, ignore_errors=True)


PREBUILT = Path(__file__).parent / "prebuilt.tar.gz"
PREBUILT_CPU = "generic"


def prebuilt_manifest(digest: str) -> dict:
    """What a prebuilt archive must have been built for to be usable in this process."""
    import sys

    return {"kernel_digest": digest, "numba": numba.__version__,
            "python": f"{sys.version_info[0]}.{sys.version_info[1]}", "cpu": PREBUILT_CPU}


def seed_from_prebuilt(folder: str, digest: str, archive_path: Path = PREBUILT) -> None:
    """Fill an empty cache folder from the archive of compiled kernels shipped in the package.

    Compiling the event loop takes minutes per deployment kind on a small machine; the package
    carries the kernels compiled for a generic x86-64 CPU, so a fresh install runs in seconds.
    The archive is used only when it was built from these exact kernel sources with this numba
    and Python; otherwise numba compiles as usual. numba locates a function's cache by the
    absolute path of its source folder, so the files are placed where this install looks.
    """
    import json
    import shutil
    import tarfile
    import tempfile

    from numba.core.caching import _CacheLocator

    if os.environ.get("AISIM_NO_PREBUILT") or not archive_path.is_file() or os.path.isdir(folder):
        return
    try:
        with tarfile.open(archive_path) as archive:
            manifest = json.load(archive.extractfile("MANIFEST.json"))
            if manifest != prebuilt_manifest(digest):
                return
            os.makedirs(os.path.dirname(folder), exist_ok=True)
            staging = tempfile.mkdtemp(prefix=".seed-", dir=os.path.dirname(folder))
            target = os.path.join(staging, _CacheLocator.get_suitable_cache_subpath(__file__))
            os.makedirs(target)
            for member in archive.getmembers():
                name = member.name
                if member.isfile() and "/" not in name and name.endswith((".nbi", ".nbc")):
                    with open(os.path.join(target, name), "wb") as out:
                        shutil.copyfileobj(archive.extractfile(member), out)
        try:
            os.rename(staging, folder)  # atomic: a concurrent process may have seeded it first
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
    except (OSError, tarfile.TarError, ValueError, KeyError):
        return  # an unreadable archive only means compiling, as without one


if not os.environ.get("NUMBA_CPU_NAME"):
    # Portable code: the prebuilt kernels run on any x86-64, and kernels compiled here match
    # them (numba keys each cached binary on the CPU name and features it was built for).
    numba.config.CPU_NAME = PREBUILT_CPU
    numba.config.CPU_FEATURES = ""

if not os.environ.get("NUMBA_CACHE_DIR"):
    numba.config.CACHE_DIR = _cache_dir()

kernel = partial(numba.njit, cache=True, nogil=True, error_model="numpy", _nrt=False)

# Small helpers called per request inside a pass are inlined at numba-IR level: an ordinary call
# between jitted functions increfs and decrefs every array of each NamedTuple argument, which
# costs more than the helper's own work (measured: ~400 ns per request per pass without it).
helper = partial(numba.njit, cache=True, nogil=True, error_model="numpy", _nrt=False,
                 inline="always")


def cache_is_warm() -> bool:
    """True when compiled kernels for these exact sources are already on disk."""
    folder = numba.config.CACHE_DIR
    return bool(folder) and os.path.isdir(folder) and any(
        name.endswith(".nbi") for _, _, files in os.walk(folder) for name in files)

