"""Session-wide test setup."""

from __future__ import annotations

import shutil
import tempfile

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_tempdir():
    """Keep the temporary files of every test (cached config files included) in one folder
    that is removed when the session ends, so a test run leaves nothing in the system's."""
    folder = tempfile.mkdtemp(prefix="aisim-tests-")
    saved = tempfile.tempdir
    tempfile.tempdir = folder
    try:
        yield folder
    finally:
        tempfile.tempdir = saved
        shutil.rmtree(folder, ignore_errors=True)
