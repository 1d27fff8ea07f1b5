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
    # the README's shown output is what the session prints: the same rows in the same order
    # (first and last cell of each row: rank or source, heading or count; scores may vary in
    # their last digits between machines)
    shown = _blocks("text")[0]
    assert _rows(r.stdout) == _rows(shown) and len(_rows(shown)) == 12
    assert r.stdout.count("┌") == shown.count("┌") == len(re.findall(r"^SELECT", sql, re.M))


def _rows(table_text: str) -> list[tuple[str, str]]:
    """(first cell, last cell) of every data row of DuckDB's box-drawn tables: header and
    type rows left out (their first cell is a column name or a type)."""
    out = []
    for line in table_text.splitlines():
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.strip("│").split("│")]
        if cells[0] in ("rank", "source", "int64", "varchar"):
            continue
        out.append((cells[0], cells[-1]))
    return out
