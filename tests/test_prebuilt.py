"""The compiled kernels shipped in the package and the cache they fill (kernels/_cache.py)."""

import io
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

from aisim.kernels import _cache, _jit

REPO = Path(__file__).resolve().parents[1]
DIGEST = "ab" * 32
FILES = {"loop.run_aggregated-40.py311.nbi": b"index", "loop.run_aggregated-40.py311.1.nbc": b"x"}


def _archive(path: Path, manifest: dict, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        entries = {"MANIFEST.json": json.dumps(manifest).encode(), **files}
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def root(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("AISIM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("AISIM_NO_PREBUILT", raising=False)
    return tmp_path / "cache"


def _install(tmp_path: Path, name: str) -> Path:
    """A kernels folder at its own path: what numba keys an install's cache on."""
    folder = tmp_path / name / "kernels"
    folder.mkdir(parents=True)
    (folder / "_jit.py").write_text("# stand-in\n")
    return folder


def _prepare(tmp_path, kernels: Path, files=FILES, manifest=None) -> Path:
    archive = _archive(tmp_path / "a.tar.gz", manifest or _jit.prebuilt_manifest(DIGEST), files)
    folder = _cache.prepare(DIGEST, kernels, archive, _jit.prebuilt_manifest(DIGEST))
    return folder / _cache.install_subpath(kernels)


def _names(folder: Path) -> list[str]:
    markers = (_cache.INSTALL_MARKER, _cache.SEEDED_MARKER)
    return sorted(p.name for p in folder.iterdir() if p.name not in markers)


def test_archive_for_these_kernels_fills_the_folder_numba_reads(tmp_path, root):
    placed = _prepare(tmp_path, _install(tmp_path, "a"))
    assert placed.parent == root / "numba" / DIGEST[:16]
    assert _names(placed) == sorted(FILES)
    assert (placed / "loop.run_aggregated-40.py311.1.nbc").read_bytes() == b"x"
    assert not [p for p in placed.parent.iterdir() if p.name.startswith(_cache.STAGING_PREFIX)]


def test_every_install_location_is_seeded_not_only_the_first(tmp_path, root):
    first = _prepare(tmp_path, _install(tmp_path, "a"))
    second = _prepare(tmp_path, _install(tmp_path, "b"))
    assert first != second and first.parent == second.parent
    assert _names(first) == _names(second) == sorted(FILES)


def test_an_empty_install_subpath_is_seeded(tmp_path, root):
    kernels = _install(tmp_path, "a")
    placed = root / "numba" / DIGEST[:16] / _cache.install_subpath(kernels)
    placed.mkdir(parents=True)
    assert _names(_prepare(tmp_path, kernels)) == sorted(FILES)


def test_a_partly_compiled_subpath_gets_the_other_kernels_and_keeps_its_own(tmp_path, root):
    """Kernels compiled here before the archive matched them (edited, then the archive rebuilt)
    keep their files; every other kernel of the archive is added, once."""
    kernels = _install(tmp_path, "a")
    placed = root / "numba" / DIGEST[:16] / _cache.install_subpath(kernels)
    placed.mkdir(parents=True)
    own = {
        "loop.run_aggregated-40.py311.nbi": b"compiled here",
        "loop.run_aggregated-40.py311.1.nbc": b"own code",
    }
    for name, data in own.items():
        (placed / name).write_bytes(data)
    files = dict(
        FILES,
        **{
            "emission.emit_rank-7.py311.nbi": b"i",
            "emission.emit_rank-7.py311.1.nbc": b"c",
            "emission.emit_rank-7.py311.2.nbc": b"d",
        },
    )
    _prepare(tmp_path, kernels, files=files)
    assert _names(placed) == sorted(files)
    assert all((placed / n).read_bytes() == d for n, d in own.items())
    assert (placed / "emission.emit_rank-7.py311.2.nbc").read_bytes() == b"d"
    assert not [p for p in placed.iterdir() if p.name.endswith(".tmp")]
    (placed / "emission.emit_rank-7.py311.nbi").unlink()
    _prepare(tmp_path, kernels, files=files)  # topped up once: the marker says so
    assert not (placed / "emission.emit_rank-7.py311.nbi").exists()


@pytest.mark.parametrize(
    "field, value",
    [("kernel_digest", "cd" * 32), ("numba", "0.0.1"), ("python", "3.99"), ("cpu", "znver4")],
)
def test_archive_built_for_something_else_is_ignored(tmp_path, root, field, value):
    manifest = dict(_jit.prebuilt_manifest(DIGEST), **{field: value})
    assert _names(_prepare(tmp_path, _install(tmp_path, "a"), manifest=manifest)) == []


def test_only_plain_cache_files_are_taken(tmp_path, root):
    files = {
        "../escape.nbi": b"no",
        "sub/deeper.nbc": b"no",
        "notes.txt": b"no",
        "ok-1.py311.nbi": b"yes",
    }
    assert _names(_prepare(tmp_path, _install(tmp_path, "a"), files=files)) == ["ok-1.py311.nbi"]
    assert not list(tmp_path.rglob("escape.nbi"))


def test_opt_out_and_broken_archive_mean_compiling_not_failing(tmp_path, root, monkeypatch):
    kernels = _install(tmp_path, "a")
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(b"not a tar file")
    target = root / "numba" / DIGEST[:16] / _cache.install_subpath(kernels)
    assert not _cache.seed(target, broken, _jit.prebuilt_manifest(DIGEST))
    monkeypatch.setenv("AISIM_NO_PREBUILT", "1")
    assert _names(_prepare(tmp_path, kernels)) == []


def _seed_in_child(target: str, archive: str, manifest: dict) -> None:
    _cache.seed(Path(target), Path(archive), manifest)


def test_processes_seeding_at_once_leave_one_complete_copy(tmp_path, root):
    files = {f"k{i}-1.py311.nbi": bytes(2000) for i in range(40)}
    archive = _archive(tmp_path / "a.tar.gz", _jit.prebuilt_manifest(DIGEST), files)
    target = root / "numba" / DIGEST[:16] / _cache.install_subpath(_install(tmp_path, "a"))
    ctx = multiprocessing.get_context("fork")
    procs = [
        ctx.Process(
            target=_seed_in_child, args=(str(target), str(archive), _jit.prebuilt_manifest(DIGEST))
        )
        for _ in range(6)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert _names(target) == sorted(files)
    assert [p.name for p in target.parent.iterdir()] == [target.name]


def test_pruning_removes_only_what_aisim_made(tmp_path, root):
    base = root / "numba"
    base.mkdir(parents=True)
    foreign = [base / n for n in ("photos", "0123456789abcdef", "deadbeefdeadbeef")]
    for i, folder in enumerate(foreign):
        folder.mkdir()
        (folder / f"keep{i}.txt").write_text("user data")
    ours = []
    for i in range(5):
        folder = base / f"{i:016x}"
        folder.mkdir()
        (folder / _cache.DIGEST_MARKER).write_text("{}")
        os.utime(folder, (1000 + i, 1000 + i))
        ours.append(folder)
    legacy = base / "aaaaaaaaaaaaaaaa"
    (legacy / ("kernels_" + "0" * 40)).mkdir(parents=True)
    os.utime(legacy, (1, 1))
    _cache.prune_digests(base, keep=3, current="ffffffffffffffff")
    assert all((f / f"keep{i}.txt").is_file() for i, f in enumerate(foreign))
    assert [f.exists() for f in ours] == [False, False, False, True, True]
    assert not legacy.exists()


def test_subpaths_of_removed_installs_are_pruned(tmp_path, root):
    gone = _install(tmp_path, "gone")
    kept = _install(tmp_path, "kept")
    folder = _prepare(tmp_path, gone).parent
    _prepare(tmp_path, kept)
    unmarked = folder / ("kernels_" + "1" * 40)
    unmarked.mkdir()
    shutil.rmtree(gone.parent)
    _prepare(tmp_path, kept)
    assert not (folder / _cache.install_subpath(gone)).exists()
    assert (folder / _cache.install_subpath(kept)).is_dir() and unmarked.is_dir()


def test_kernels_compile_for_a_generic_cpu():
    """Kernels compiled on this machine and the shipped ones are keyed alike (portable)."""
    import numba

    if os.environ.get("NUMBA_CPU_NAME"):
        pytest.skip("NUMBA_CPU_NAME set by the user")
    assert numba.config.CPU_NAME == _jit.PREBUILT_CPU
    assert numba.config.CPU_FEATURES == ""


def _shipped_manifest() -> tuple[dict, list[str]]:
    with tarfile.open(_jit.PREBUILT) as archive:
        return json.load(archive.extractfile("MANIFEST.json")), archive.getnames()


def test_shipped_archive_matches_these_kernel_sources():
    """After editing a kernel source, rebuild the archive (python bench/build_prebuilt.py): a
    stale one is ignored, and a fresh install then compiles for minutes instead of loading."""
    assert _jit.PREBUILT.is_file(), "kernels/prebuilt.tar.gz is missing"
    manifest, names = _shipped_manifest()
    assert manifest == _jit.prebuilt_manifest(_jit.kernel_digest()), (
        "kernels/prebuilt.tar.gz was built from other kernel sources: "
        "run python bench/build_prebuilt.py"
    )
    assert any(n.startswith("loop.run_aggregated") for n in names)
    assert any(n.startswith("loop_pd.run_disaggregated") for n in names)


_PREDICT_AND_COUNT = textwrap.dedent("""
    import json, sys, numba
    import aisim
    from aisim.kernels import _jit
    assert aisim.__file__.startswith(sys.argv[1]), aisim.__file__
    aisim.predict(sys.argv[2])
    hits = misses = 0
    for name, module in list(sys.modules.items()):
        if name.startswith("aisim.kernels."):
            for obj in vars(module).values():
                if isinstance(obj, numba.core.registry.CPUDispatcher):
                    hits += sum(obj.stats.cache_hits.values())
                    misses += sum(obj.stats.cache_misses.values())
    print(json.dumps({"hits": hits, "misses": misses, "cache": numba.config.CACHE_DIR}))
""")


def test_a_second_install_at_another_path_loads_the_shipped_kernels(tmp_path):
    """Two copies of the package share one cache root; the second one's first prediction loads
    compiled kernels (numba cache hits, no compiles) instead of compiling them again."""
    if _shipped_manifest()[0] != _jit.prebuilt_manifest(_jit.kernel_digest()):
        pytest.skip("the shipped archive is stale (see the test above)")
    env = dict(os.environ, AISIM_CACHE_DIR=str(tmp_path / "cache"), AISIM_NO_FAST_EXIT="1")
    for var in ("NUMBA_CACHE_DIR", "AISIM_NO_PREBUILT", "NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES"):
        env.pop(var, None)
    results = []
    for name in ("first", "second"):
        site = tmp_path / name
        shutil.copytree(
            REPO / "aisim", site / "aisim", ignore=shutil.ignore_patterns("__pycache__")
        )
        shutil.copytree(
            REPO / "kernels",
            site / "aisim" / "kernels",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        (site / "aisim" / "data").symlink_to(REPO / "data")
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                _PREDICT_AND_COUNT,
                str(site),
                str(REPO / "examples" / "quickstart.yaml"),
            ],
            env=dict(env, PYTHONPATH=str(site)),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert results[0]["cache"] == results[1]["cache"]
    for counts in results:
        assert counts["misses"] == 0 and counts["hits"] > 0, counts
    subpaths = [p for p in Path(results[0]["cache"]).iterdir() if p.is_dir()]
    assert len(subpaths) == 2
