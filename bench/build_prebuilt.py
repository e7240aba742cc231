"""Compile every kernel specialization aisim uses and pack them as kernels/prebuilt.tar.gz.

usage: python bench/build_prebuilt.py [--workloads ../shared/workloads] [--skip-tests]

A fresh install then loads compiled kernels instead of spending minutes in numba. Rerun this
after any edit to a kernel source (every kernels/*.py but _cache.py): the archive records the
digest of the kernel sources it was built from and is ignored once they change (aisim then
compiles as it would without an archive, correct but slow). The kernels are compiled for a
generic x86-64 CPU (kernels/_jit.py), so the archive is portable across x86-64 Linux machines
with the same numba and Python.

What is compiled: everything the test suite compiles (so CI starts warm too) and every seed
workload of the given folder at full size.
"""

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARCHIVE = REPO / "kernels" / "prebuilt.tar.gz"


def _kernel_digest() -> str:
    code = (
        "from aisim.kernels._jit import kernel_digest, prebuilt_manifest; import json; "
        "print(json.dumps(prebuilt_manifest(kernel_digest())))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        text=True,
        env=_env(tempfile.mkdtemp()),
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _env(cache: str) -> dict:
    env = dict(os.environ, AISIM_CACHE_DIR=cache, AISIM_NO_PREBUILT="1")
    for var in ("NUMBA_CACHE_DIR", "NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES"):
        env.pop(var, None)
    return env


def _compile_all(cache: str, workloads: Path | None, run_tests: bool) -> None:
    env = _env(cache)
    if run_tests:
        # the archive being built is stale by definition until this run ends
        stale = "tests/test_prebuilt.py::test_shipped_archive_matches_these_kernel_sources"
        # at most CHUNK tests a process: numba keeps every module it compiled in memory, and
        # the whole suite compiled in one process (or the goldens in one) came within 2 GB of
        # this machine's 24 GB (60 tests a chunk were OOM-killed there once the session kernels
        # came); the chunks share the on-disk cache, so a kernel compiled once is loaded by the
        # later ones
        for chunk in _test_chunks(env, stale):
            print(f"testing {chunk[0]} .. {chunk[-1]} ({len(chunk)} tests)", flush=True)
            subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *chunk],
                cwd=REPO,
                env=env,
                check=True,
            )
    if workloads is not None:
        out = tempfile.mkdtemp()
        for config in sorted(workloads.glob("*.yaml")):
            print(f"compiling for {config.name}", flush=True)
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "aisim.cli",
                    "predict",
                    "-c",
                    str(config),
                    "--output-dir",
                    os.path.join(out, config.stem),
                    "--overwrite",
                ],
                cwd=REPO,
                env=env,
                check=True,
                stdout=subprocess.DEVNULL,
            )


CHUNK = 30


def _test_chunks(env: dict, skip: str) -> list[list[str]]:
    """The suite's test ids in collection order, cut into runs of at most CHUNK."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    ids = [line for line in out.splitlines() if "::" in line and line != skip]
    return [ids[i : i + CHUNK] for i in range(0, len(ids), CHUNK)]


def _pack(cache: str, manifest: dict) -> int:
    from numba.core.caching import _CacheLocator

    # only this checkout's files: numba's sub-path for the folder holding the kernel sources
    subpath = _CacheLocator.get_suitable_cache_subpath(str(REPO / "kernels" / "_jit.py"))
    folder = Path(cache) / "numba" / manifest["kernel_digest"][:16] / subpath
    files = sorted(p for p in folder.iterdir() if p.suffix in (".nbi", ".nbc"))
    if not files:
        raise SystemExit(f"no compiled kernels under {folder}")
    buffer = io.BytesIO()
    # fixed metadata and order: the same compiled files give the same archive bytes
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        entries = [("MANIFEST.json", json.dumps(manifest, sort_keys=True).encode())]
        entries += [(p.name, p.read_bytes()) for p in files]
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(data))
    import gzip

    ARCHIVE.write_bytes(gzip.compress(buffer.getvalue(), compresslevel=9, mtime=0))
    return len(files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=Path, default=REPO.parent / "shared" / "workloads")
    parser.add_argument("--skip-tests", action="store_true")
    parser.add_argument(
        "--cache",
        help="compile into (and reuse) this cache folder instead of "
        "a new empty one, e.g. to resume a build that stopped",
    )
    args = parser.parse_args()
    workloads = args.workloads if args.workloads.is_dir() else None
    manifest = _kernel_digest()
    cache = args.cache or tempfile.mkdtemp(prefix="aisim-prebuild-")
    _compile_all(cache, workloads, not args.skip_tests)
    if _kernel_digest() != manifest:
        raise SystemExit("kernel sources changed while compiling; rerun")
    count = _pack(cache, manifest)
    print(
        f"{ARCHIVE.relative_to(REPO)}: {count} files, {ARCHIVE.stat().st_size / 1e6:.1f} MB, "
        f"kernels {manifest['kernel_digest'][:16]}"
    )


if __name__ == "__main__":
    main()
