"""Cross-project search never writes to a project: the catalogs it attaches refuse every
write, and a `lethe search --all` leaves each project's database files byte for byte and
mtime for mtime as they were. Real DuckDB files, the real embedder, `lethe` as a process."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import duckdb
import pytest

from conftest import BIN, write

LETHE = str(BIN / "lethe")

MEMORIES = {
    "north": ["The north service stores invoices in Postgres 16.", "North deploys every Monday at noon."],
    "south": ["The south worker reads invoices from a Kafka topic.", "South keeps Postgres backups for 30 days."],
}


@pytest.fixture(scope="module")
def two_projects(tmp_path_factory, embedder):
    from lethe_sql import MemoryStore
    from lethe_sql.registry import Registry

    base = tmp_path_factory.mktemp("fedro")
    reg = Registry(base / "home" / "projects.json")
    projects = {}
    for name, texts in MEMORIES.items():
        root = base / name
        write(root / ".lethe" / "memory" / f"{name}.md", "".join(f"## note {i}\n\n{t}\n\n" for i, t in enumerate(texts)))
        with MemoryStore(root, embedder=embedder) as store:
            store.index()
            # one data change left in the WAL (a closing writer does not checkpoint): a
            # read-write attach would fold it into the database file when it detaches
            store.con.execute("UPDATE meta SET value = value WHERE key = 'embed_model'")
        projects[name] = reg.add(root)[0]
    env = dict(os.environ, LETHE_HOME=str(base / "home"), HOME=str(base / "userhome"),
               LETHE_CACHE=str(base / "cache"), LETHE_LOCK_TIMEOUT="0.3")
    env.pop("LETHE_DISABLE_GLOBAL_REGISTRY", None)
    return {"projects": projects, "env": env}


def _files(project) -> dict[str, tuple[str, int]]:
    """sha256 and mtime of each file of the project's index folder (database and WAL)."""
    folder = Path(project.db_path).parent
    return {p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(folder.iterdir()) if p.name.startswith("lethe.duckdb")}


WRITES = [
    "INSERT INTO {a}.main.meta VALUES ('x', 'y')",
    "UPDATE {a}.main.entries SET tier = 'apoptotic'",
    "DELETE FROM {a}.main.entries",
    "CREATE TABLE {a}.main.scratch (i INTEGER)",
    "DROP TABLE {a}.main.query_log",
    "INSERT INTO {a}.fts_main_entries.stats VALUES (1, 1.0)",
]


def test_the_attached_catalogs_refuse_every_write(two_projects):
    from lethe_sql import federation

    projects = list(two_projects["projects"].values())
    before = {p.slug: _files(p) for p in projects}
    with federation.Federation(projects) as fed:
        assert fed.aliases == ("north", "south") and not fed.skipped
        flags = dict(fed.con.execute(
            "SELECT database_name, readonly FROM duckdb_databases() WHERE database_name IN ('north', 'south')").fetchall())
        assert flags == {"north": True, "south": True}
        for alias in fed.aliases:
            n = fed.con.execute(f'SELECT count(*) FROM "{alias}".main.entries').fetchone()[0]
            for sql in WRITES:
                with pytest.raises(duckdb.Error, match="(?i)read.only"):
                    fed.con.execute(sql.format(a=f'"{alias}"'))
            assert fed.con.execute(f'SELECT count(*) FROM "{alias}".main.entries').fetchone()[0] == n == 2
    assert {p.slug: _files(p) for p in projects} == before


def test_attach_sql_says_read_only():
    from lethe_sql.federation import attach_sql

    assert attach_sql("/x/lethe.duckdb", "p").endswith("(READ_ONLY)")


def test_a_search_all_leaves_every_project_file_unchanged(two_projects):
    projects = two_projects["projects"]
    before = {n: _files(p) for n, p in projects.items()}
    assert all("lethe.duckdb" in f for f in before.values())
    p = subprocess.run([LETHE, "search", "where are invoices stored", "--all", "--json", "-k", "4"],
                       env=two_projects["env"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    hits = json.loads(p.stdout)
    assert {h["project"] for h in hits} == {"north", "south"}
    assert {n: _files(p) for n, p in projects.items()} == before
