"""Where compiled kernels live on disk, and how a new install starts with them already there.

Layout under the cache root (``AISIM_CACHE_DIR``, default ``~/.cache/aisim``)::

    numba/<kernel digest[:16]>/.aisim-kernel-cache      marker: this folder is aisim's
    numba/<kernel digest[:16]>/<install sub-path>/      numba's files for one install location
    numba/<kernel digest[:16]>/<install sub-path>/.aisim-install   the install's kernels folder
    plans/                                              op-plan cache (aisim.timing.provider)

numba finds a function's cached binary under a sub-path derived from the absolute path of the
folder holding its source, so two installs of the same kernels (two venvs, a clone beside a
``pip install``, a CI checkout in a fresh folder) look in different sub-paths of one digest
folder. Each install's sub-path is filled from the shipped archive whenever it is missing or
empty, and topped up with the archive's other kernels when it holds only some compiled here, so
every install starts warm, not only the first one on a machine.

Nothing is ever deleted unless aisim can recognise it as its own: digest folders carry a marker
file (or, from older aisim versions, hold only numba sub-paths and staging folders), and an
install sub-path is pruned only when its marker names a kernels folder that no longer exists.

This module decides no compiled code, so the kernel digest leaves it out (kernels/_jit.py):
editing it does not invalidate the shipped archive.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tarfile
import tempfile
import time
from pathlib import Path

DIGEST_MARKER = ".aisim-kernel-cache"
INSTALL_MARKER = ".aisim-install"
SEEDED_MARKER = ".aisim-seeded"  # the shipped archive's files are all in this sub-path
STAGING_PREFIX = ".seed-"
KEEP_DIGESTS = 3
STALE_STAGING_S = 3600.0

_DIGEST_NAME = re.compile(r"^[0-9a-f]{16}$")
_SUBPATH_NAME = re.compile(r"^[^/]+_[0-9a-f]{40}$")


def cache_root() -> Path:
    """The folder every aisim cache lives under (kernels and op plans)."""
    root = os.environ.get("AISIM_CACHE_DIR")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")) / "aisim"


def install_subpath(kernels_dir: Path) -> str:
    """The sub-path numba reads this install's cached kernels from (its own rule)."""
    from numba.core.caching import _CacheLocator

    return _CacheLocator.get_suitable_cache_subpath(str(kernels_dir / "_jit.py"))


def has_index(folder: Path) -> bool:
    """True when numba has at least one cache index in this install sub-path."""
    try:
        return any(name.endswith(".nbi") for name in os.listdir(folder))
    except OSError:
        return False


def prepare(digest: str, kernels_dir: Path, archive: Path, manifest: dict) -> Path:
    """Create (or reuse) the digest folder, make sure this install's sub-path is warm, prune.

    Returns the folder to hand to numba as its cache directory. Never raises for a filesystem
    problem: an unusable cache only means compiling, as numba would without one.
    """
    base = cache_root() / "numba"
    folder = base / digest[:16]
    try:
        fresh = not folder.is_dir()
        folder.mkdir(parents=True, exist_ok=True)
        _write_once(folder / DIGEST_MARKER, json.dumps({"kernel_digest": digest}))
        target = folder / install_subpath(kernels_dir)
        if not has_index(target):
            seed(target, archive, manifest)
        elif not (target / SEEDED_MARKER).is_file():
            top_up(target, archive, manifest)
        target.mkdir(exist_ok=True)
        _write_once(target / INSTALL_MARKER, str(kernels_dir.resolve()))
        prune_installs(folder)
        if fresh:
            prune_digests(base, keep=KEEP_DIGESTS, current=folder.name)
    except OSError:
        pass
    return folder


def seed(target: Path, archive: Path, manifest: dict) -> bool:
    """Fill an install sub-path from the archive of compiled kernels shipped in the package.

    The files are unpacked into a staging folder beside the target and renamed into place in
    one step: a process that starts at the same moment (a sweep's forked workers, parallel CI
    jobs) sees either no index or every file, never half of them. The archive is used only when
    its manifest matches these kernels exactly; otherwise numba compiles as usual.
    """
    if os.environ.get("AISIM_NO_PREBUILT") or not archive.is_file():
        return False
    staging = None
    try:
        with tarfile.open(archive) as tar:
            if json.load(tar.extractfile("MANIFEST.json")) != manifest:
                return False
            target.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=target.parent))
            for member in tar.getmembers():
                name = member.name
                if member.isfile() and "/" not in name and name.endswith((".nbi", ".nbc")):
                    with open(staging / name, "wb") as out:
                        shutil.copyfileobj(tar.extractfile(member), out)
            (staging / SEEDED_MARKER).write_text(manifest["kernel_digest"])
        try:
            # rename(2) replaces a missing or empty directory atomically and fails on a full
            # one: whoever renames first wins, the others drop their copy
            os.rename(staging, target)
            staging = None
        except OSError:
            return has_index(target)
        return True
    except (OSError, tarfile.TarError, ValueError, KeyError):
        return False  # an unreadable archive only means compiling, as without one
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)


def top_up(target: Path, archive: Path, manifest: dict) -> bool:
    """Add the archive's kernels to a sub-path that already holds some compiled here.

    A sub-path gets its own files when kernels are compiled before the archive matches them
    (kernels edited, then the archive rebuilt; a run with AISIM_NO_PREBUILT): seeding only empty
    sub-paths would then leave every other kernel to compile. A function whose index is already
    here keeps its own files (an index lists the overloads of its data files, so the two sets
    cannot be mixed); every other function's data files are placed first and its index last, each
    by an atomic rename, so a concurrent reader sees a function either complete or absent.
    """
    if os.environ.get("AISIM_NO_PREBUILT") or not archive.is_file():
        return False
    try:
        present = set(os.listdir(target))
        with tarfile.open(archive) as tar:
            if json.load(tar.extractfile("MANIFEST.json")) != manifest:
                return False
            members = {
                m.name: m
                for m in tar.getmembers()
                if m.isfile() and "/" not in m.name and m.name.endswith((".nbi", ".nbc"))
            }
            for index in sorted(n for n in members if n.endswith(".nbi")):
                if index in present:
                    continue
                stem = index[: -len("nbi")]
                for name in sorted(n for n in members if n.startswith(stem) and n != index):
                    _place(target, name, tar.extractfile(members[name]))
                _place(target, index, tar.extractfile(members[index]))
        _write_once(target / SEEDED_MARKER, manifest["kernel_digest"])
        return True
    except (OSError, tarfile.TarError, ValueError, KeyError):
        return False


def _place(target: Path, name: str, data) -> None:
    temp = target / f".{name}.{os.getpid()}.tmp"
    with open(temp, "wb") as out:
        shutil.copyfileobj(data, out)
    os.replace(temp, target / name)


def prune_installs(folder: Path) -> None:
    """Remove sub-paths of installs whose kernels folder no longer exists, and stale staging."""
    now = time.time()
    for entry in _scandir(folder):
        if not entry.is_dir(follow_symlinks=False):
            continue
        path = Path(entry.path)
        if entry.name.startswith(STAGING_PREFIX):
            if now - entry.stat(follow_symlinks=False).st_mtime > STALE_STAGING_S:
                shutil.rmtree(path, ignore_errors=True)
            continue
        if not _SUBPATH_NAME.match(entry.name):
            continue
        try:
            source = Path((path / INSTALL_MARKER).read_text().strip())
        except OSError:
            continue  # not recognisably ours to judge: leave it
        if source.is_absolute() and not (source / "_jit.py").is_file():
            shutil.rmtree(path, ignore_errors=True)


def prune_digests(base: Path, keep: int, current: str) -> None:
    """Each kernel version caches a few MB: keep the most recently used few of aisim's own."""
    ours = [
        e
        for e in _scandir(base)
        if e.name != current and e.is_dir(follow_symlinks=False) and is_digest_folder(e.path)
    ]
    ours.sort(key=lambda e: e.stat(follow_symlinks=False).st_mtime, reverse=True)
    for entry in ours[max(keep - 1, 0) :]:
        shutil.rmtree(entry.path, ignore_errors=True)


def is_digest_folder(path: str) -> bool:
    """A folder aisim created for one kernel version, recognised by name and content."""
    folder = Path(path)
    if not _DIGEST_NAME.match(folder.name):
        return False
    if (folder / DIGEST_MARKER).is_file():
        return True
    # aisim versions before the marker: only numba sub-paths and staging folders inside
    names = [e.name for e in _scandir(folder)]
    return bool(names) and all(
        _SUBPATH_NAME.match(n) or n.startswith(STAGING_PREFIX) for n in names
    )


def _scandir(folder) -> list:
    try:
        with os.scandir(folder) as it:
            return list(it)
    except OSError:
        return []


def _write_once(path: Path, text: str) -> None:
    if path.is_file():
        return
    temp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    temp.write_text(text)
    os.replace(temp, path)
