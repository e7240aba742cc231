"""The compiled kernels shipped in the package (kernels/prebuilt.tar.gz, kernels/_jit.py)."""

import io
import json
import os
import tarfile
from pathlib import Path

import pytest
from numba.core.caching import _CacheLocator

from aisim.kernels import _jit


def _archive(path: Path, manifest: dict, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        entries = {"MANIFEST.json": json.dumps(manifest).encode(), **files}
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def _where_numba_looks(folder: Path) -> Path:
    return folder / _CacheLocator.get_suitable_cache_subpath(_jit.__file__)


def test_archive_for_these_kernels_fills_the_folder_numba_reads(tmp_path, monkeypatch):
    monkeypatch.delenv("AISIM_NO_PREBUILT", raising=False)
    digest = "ab" * 32
    files = {"loop.run_aggregated-40.py311.nbi": b"index",
             "loop.run_aggregated-40.py311.1.nbc": b"x"}
    archive = _archive(tmp_path / "a.tar.gz", _jit.prebuilt_manifest(digest), files)
    folder = tmp_path / "cache" / digest[:16]
    _jit.seed_from_prebuilt(str(folder), digest, archive)
    placed = _where_numba_looks(folder)
    assert sorted(p.name for p in placed.iterdir()) == sorted(files)
    assert (placed / "loop.run_aggregated-40.py311.1.nbc").read_bytes() == b"x"
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".seed-")]


@pytest.mark.parametrize("field, value", [("kernel_digest", "cd" * 32), ("numba", "0.0.1"),
                                          ("python", "3.99"), ("cpu", "znver4")])
def test_archive_built_for_something_else_is_ignored(tmp_path, monkeypatch, field, value):
    monkeypatch.delenv("AISIM_NO_PREBUILT", raising=False)
    digest = "ab" * 32
    manifest = dict(_jit.prebuilt_manifest(digest), **{field: value})
    archive = _archive(tmp_path / "a.tar.gz", manifest, {"f-1.py311.nbi": b"index"})
    folder = tmp_path / "cache" / digest[:16]
    _jit.seed_from_prebuilt(str(folder), digest, archive)
    assert not folder.exists()


def test_only_plain_cache_files_are_taken(tmp_path, monkeypatch):
    monkeypatch.delenv("AISIM_NO_PREBUILT", raising=False)
    digest = "ab" * 32
    files = {"../escape.nbi": b"no", "sub/deeper.nbc": b"no", "notes.txt": b"no",
             "ok-1.py311.nbi": b"yes"}
    archive = _archive(tmp_path / "a.tar.gz", _jit.prebuilt_manifest(digest), files)
    folder = tmp_path / "cache" / digest[:16]
    _jit.seed_from_prebuilt(str(folder), digest, archive)
    assert [p.name for p in _where_numba_looks(folder).iterdir()] == ["ok-1.py311.nbi"]
    assert not (tmp_path / "cache" / "escape.nbi").exists()


def test_existing_folder_and_opt_out_are_left_alone(tmp_path, monkeypatch):
    digest = "ab" * 32
    archive = _archive(tmp_path / "a.tar.gz", _jit.prebuilt_manifest(digest), {"f.nbi": b"i"})
    folder = tmp_path / "cache" / digest[:16]
    folder.mkdir(parents=True)
    _jit.seed_from_prebuilt(str(folder), digest, archive)
    assert list(folder.iterdir()) == []
    other = tmp_path / "cache" / "other"
    monkeypatch.setenv("AISIM_NO_PREBUILT", "1")
    _jit.seed_from_prebuilt(str(other), digest, archive)
    assert not other.exists()


def test_broken_archive_means_compiling_not_failing(tmp_path, monkeypatch):
    monkeypatch.delenv("AISIM_NO_PREBUILT", raising=False)
    broken = tmp_path / "a.tar.gz"
    broken.write_bytes(b"not a tar file")
    folder = tmp_path / "cache" / "x"
    _jit.seed_from_prebuilt(str(folder), "ab" * 32, broken)
    assert not folder.exists()


def test_kernels_compile_for_a_generic_cpu():
    """Kernels compiled on this machine and the shipped ones are keyed alike (portable)."""
    import numba

    if os.environ.get("NUMBA_CPU_NAME"):
        pytest.skip("NUMBA_CPU_NAME set by the user")
    assert numba.config.CPU_NAME == _jit.PREBUILT_CPU
    assert numba.config.CPU_FEATURES == ""


def test_shipped_archive_matches_these_kernel_sources():
    """After editing kernels/*.py, rebuild the archive (python bench/build_prebuilt.py): a stale
    one is ignored, and a fresh install then compiles for minutes instead of loading."""
    assert _jit.PREBUILT.is_file(), "kernels/prebuilt.tar.gz is missing"
    with tarfile.open(_jit.PREBUILT) as archive:
        manifest = json.load(archive.extractfile("MANIFEST.json"))
        names = archive.getnames()
    assert manifest == _jit.prebuilt_manifest(_jit.kernel_digest()), (
        "kernels/prebuilt.tar.gz was built from other kernel sources: "
        "run python bench/build_prebuilt.py")
    assert any(n.startswith("loop.run_aggregated") for n in names)
    assert any(n.startswith("loop_pd.run_disaggregated") for n in names)
