"""Shared fixtures: real DuckDB files, the real FTS extension, the real embedder.

The bi-encoder (int8 all-MiniLM-L6-v2) is installed offline by `make test`,
so tests use it as is; it is loaded once per session.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
BIN = Path(sys.executable).parent


@pytest.fixture(scope="session")
def embedder():
    from lethe_sql.udfs.embed import Embedder

    return Embedder()


@pytest.fixture()
def project(tmp_path, embedder):
    """An initialised project root with an open store on the real embedder."""
    from lethe_sql import MemoryStore

    root = tmp_path / "proj"
    root.mkdir()
    store = MemoryStore(root, embedder=embedder)
    yield store
    store.close()


@pytest.fixture()
def cli_env(tmp_path):
    """Environment for `lethe` subprocesses: no network, a private home and cache."""
    env = dict(os.environ)
    env["HOME"] = str(tmp_path / "home")
    env["LETHE_CACHE"] = str(tmp_path / "cache")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path
