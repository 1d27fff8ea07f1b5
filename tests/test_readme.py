"""The README stays true: its two commands come first, and its SQL session runs, as
written, in the plain DuckDB CLI on a project built from the bundled sample."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from conftest import BIN, REPO

README = (REPO / "README.md").read_text(encoding="utf-8")


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, re.S)


def test_first_screen_has_the_two_commands():
    first = "\n".join(README.splitlines()[:20])
    assert "make demo" in first and "make test" in first
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_readme_sql_session_runs_in_the_plain_duckdb_cli(tmp_path, embedder):
    duckdb_cli = BIN / "duckdb"
    if not duckdb_cli.exists():
        duckdb_cli = shutil.which("duckdb")
    if not duckdb_cli:
        pytest.fail("the duckdb CLI (package duckdb-cli) is not installed next to this Python")
    from lethe_sql import MemoryStore
    from lethe_sql.resources import sample_memory_dir

    with MemoryStore(tmp_path, embedder=embedder) as store:
        shutil.copytree(sample_memory_dir(), store.memory_dir, dirs_exist_ok=True)
        store.index()
        db = store.db_path
    sql = _blocks("sql")[0]
    assert "lethe_bm25(" in sql and "lethe_dense(" in sql and "lethe_hybrid(" in sql
    r = subprocess.run([str(duckdb_cli), "-readonly", str(db)], input=sql, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "Error" not in r.stderr, r.stderr
    # the memories the README shows are the ones the session finds
    for heading in ("09:41 staging deploy failed", "14:05 postgres port clash",
                    "09:20 pgbouncer in the dev compose, postgres moved", ".lethe/memory/2026-10-26.md"):
        assert heading in r.stdout
    assert r.stdout.count("┌") == len(re.findall(r"^SELECT", sql, re.M))  # one result table per statement
