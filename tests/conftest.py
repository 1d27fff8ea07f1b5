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
# Every `lethe` the tests start runs its command in its own process (a service started by
# one test's command would outlive it); tests/test_service.py turns the service on itself.
os.environ["LETHE_SERVE"] = "0"
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


#: A short two-speaker conversation in three sessions (LoCoMo-like turns), for the tests
#: of the first stage, the blend and the prepared statements.
CONVERSATION = [
    ("s1", "Caroline: I went to the LGBTQ support group yesterday"),
    ("s1", "Melanie: That sounds powerful, how did it feel?"),
    ("s1", "Caroline: It felt like home, everyone shared their stories"),
    ("s1", "Melanie: I am so glad you found them"),
    ("s2", "Melanie: We went camping at the lake with the kids"),
    ("s2", "Caroline: Did they enjoy the campfire?"),
    ("s2", "Melanie: They roasted marshmallows all night"),
    ("s3", "Caroline: I am researching adoption agencies"),
    ("s3", "Melanie: Which agencies are you looking at?"),
    ("s3", "Caroline: One that supports LGBTQ parents"),
    ("s3", "Melanie: Painting helps me relax after work"),
    ("s3", "Caroline: I should try painting sometime"),
]


@pytest.fixture()
def conversation(tmp_path, embedder):
    """A store holding ``CONVERSATION``, one entry per turn, sessions as given."""
    from lethe_sql import MemoryStore
    from lethe_sql.markdown import Document

    store = MemoryStore(tmp_path / "p", embedder=embedder)
    store.put_documents("conv", [Document(content=t, session_id=sid) for sid, t in CONVERSATION])
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
