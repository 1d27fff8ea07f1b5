"""connect(): creation, offline FTS, migrations once with sha256, SQL surface, embed UDF, bad files."""

import shutil
import subprocess
import sys
import textwrap

import duckdb
import numpy as np
import pytest

import lethe_sql.db as db
from lethe_sql import connect
from lethe_sql.errors import DatabaseCorrupt, DatabaseLocked, MigrationError
from lethe_sql.resources import resource_dir

# The public SQL surface. Changing it is a decision: update README.md with it.
SURFACE_MACROS = {
    "lethe_tokens", "lethe_bm25", "lethe_dense", "lethe_hybrid",   # first stage
    "lethe_stopwords", "lethe_query_terms", "lethe_content_query",  # the fused stage's query terms
    "lethe_bm25_ctx", "lethe_fused",                              # context field, z-scored fusion
    "lethe_maxsim", "lethe_span",                                 # late-interaction judge, its span width
    "lethe_cue", "lethe_suppression_at", "lethe_candidates",      # RIF
    "lethe_rif_lambda",                                           # RIF: the decay setting, from meta
    "lethe_as_of",                                                # revisions: what held at a time
    "lethe_affinity_after",                                       # the lifecycle's affinity rule
}
SURFACE_VIEWS = {"lethe_memories", "lethe_suppression", "lethe_lifecycle",
                 "lethe_revisions", "lethe_versions", "lethe_current"}
TABLES = {"meta", "entries", "entry_sources", "source_files", "schema_migrations", "token_vectors", "token_df",
          "query_log", "rif_centroids", "rif_suppression", "absorbed", "entry_context",
          "revisions", "revision_candidates", "section_marks", "forgotten", "entry_windows"}


def test_connect_creates_schema_and_loads_fts_offline(tmp_path):
    path = tmp_path / "sub" / "x.duckdb"
    con = connect(path)
    assert path.exists()
    tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'").fetchall()}
    assert TABLES <= tables
    fts = con.execute("SELECT loaded FROM duckdb_extensions() WHERE extension_name = 'fts'").fetchone()
    assert fts == (True,)
    assert db.load_fts(con).startswith("duckdb-extension-fts")
    con.close()


def test_public_sql_surface_is_pinned(tmp_path):
    con = connect(tmp_path / "x.duckdb")
    macros = {
        r[0]
        for r in con.execute(
            "SELECT function_name FROM duckdb_functions() WHERE function_name LIKE 'lethe_%' AND NOT internal"
        ).fetchall()
    }
    views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    assert macros == SURFACE_MACROS
    assert {v for v in views if v.startswith("lethe_")} == SURFACE_VIEWS
    con.close()


def test_migrations_apply_exactly_once_with_sha256(tmp_path):
    path = tmp_path / "x.duckdb"
    connect(path).close()
    con = connect(path)
    rows = con.execute("SELECT name, sha256 FROM schema_migrations ORDER BY name").fetchall()
    files = sorted(resource_dir("migrations").glob("*.sql"))
    assert [r[0] for r in rows] == [f.name for f in files]
    assert all(len(r[1]) == 64 for r in rows)
    assert db.migrate(con) == []
    con.close()


def _patched_migrations(monkeypatch, tmp_path):
    mig = tmp_path / "migrations"
    shutil.copytree(resource_dir("migrations"), mig)
    real = db.sql_files
    monkeypatch.setattr(db, "sql_files", lambda name: sorted(mig.glob("*.sql")) if name == "migrations" else real(name))
    return mig


def test_edited_applied_migration_is_an_error(tmp_path, monkeypatch):
    mig = _patched_migrations(monkeypatch, tmp_path)
    path = tmp_path / "x.duckdb"
    connect(path).close()
    first = sorted(mig.glob("*.sql"))[0]
    first.write_text(first.read_text() + "\n-- edited\n")
    with pytest.raises(MigrationError, match="edited after it was applied"):
        connect(path)


def test_new_migration_runs_once_and_failed_one_rolls_back(tmp_path, monkeypatch):
    mig = _patched_migrations(monkeypatch, tmp_path)
    path = tmp_path / "x.duckdb"
    connect(path).close()
    (mig / "900_extra.sql").write_text("CREATE TABLE extra (x INT); INSERT INTO extra VALUES (1);")
    connect(path).close()
    con = connect(path)
    assert con.execute("SELECT count(*) FROM extra").fetchone()[0] == 1
    con.close()
    (mig / "901_broken.sql").write_text("CREATE TABLE half (x INT); SELECT * FROM no_such_table;")
    with pytest.raises(duckdb.Error):
        connect(path)
    con = duckdb.connect(str(path))
    assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'half'").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM schema_migrations WHERE name = '901_broken.sql'").fetchone()[0] == 0
    con.close()


def test_sql_folder_is_reapplied_only_when_changed(tmp_path):
    con = connect(tmp_path / "x.duckdb")
    assert db.apply_sql(con) is False
    con.execute("DROP MACRO TABLE lethe_dense")
    con.execute("UPDATE meta SET value = 'stale' WHERE key = 'sql_sha256'")
    assert db.apply_sql(con) is True
    assert con.execute("SELECT count(*) FROM duckdb_functions() WHERE function_name = 'lethe_dense'").fetchone()[0] == 1
    con.close()


def test_embed_udf_returns_normalised_float384(tmp_path, embedder):
    con = connect(tmp_path / "x.duckdb", embedder=embedder)
    typ, norm = con.execute(
        "SELECT typeof(v), list_sum(list_transform(v::FLOAT[], x -> x * x)) FROM (SELECT embed('staging postgres port') AS v)"
    ).fetchone()
    assert typ == "FLOAT[384]"
    assert norm == pytest.approx(1.0, abs=1e-4)
    vec = con.execute("SELECT embed('staging postgres port')").fetchone()[0]
    assert np.allclose(np.array(vec, dtype=np.float32), embedder.encode(["staging postgres port"])[0], atol=1e-6)
    assert con.execute("SELECT embed(NULL) IS NULL").fetchone()[0] is True
    con.close()


def test_corrupt_database_is_a_clear_error_and_left_untouched(tmp_path):
    path = tmp_path / "bad.duckdb"
    junk = b"this is not a database" * 500
    path.write_bytes(junk)
    with pytest.raises(DatabaseCorrupt, match="not a readable DuckDB database"):
        connect(path)
    assert path.read_bytes() == junk


def test_locked_database_names_the_holder(tmp_path):
    path = tmp_path / "x.duckdb"
    connect(path).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import duckdb, sys
            con = duckdb.connect({str(path)!r})
            print('locked', flush=True)
            sys.stdin.read()
        """)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(DatabaseLocked, match=rf"locked by .*\(PID {holder.pid}\)"):
            connect(path, lock_timeout=0.3)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    connect(path, lock_timeout=5).close()


def test_read_only_open_needs_a_migrated_database(tmp_path):
    path = tmp_path / "x.duckdb"
    duckdb.connect(str(path)).close()
    with pytest.raises(MigrationError, match="no lethe schema"):
        connect(path, read_only=True)
    connect(path).close()
    con = connect(path, read_only=True)
    assert con.execute("SELECT count(*) FROM lethe_bm25('x', 5)").fetchone()[0] == 0
    with pytest.raises(duckdb.Error):
        con.execute("INSERT INTO meta VALUES ('a', 'b')")
    con.close()


def test_a_closing_writer_leaves_its_changes_in_the_wal_and_every_reader_sees_them(tmp_path):
    """connect() defers checkpoints (db.defer_checkpoints): closing a writer must not rewrite
    the indexes, and nothing committed may be lost to a reader, read-only or attached."""
    path = tmp_path / "x.duckdb"
    con = connect(path)
    con.execute("CHECKPOINT")
    con.execute("INSERT INTO meta VALUES ('wal_probe', 'kept')")
    con.close()
    wal = tmp_path / "x.duckdb.wal"
    assert wal.exists() and wal.stat().st_size > 0  # not checkpointed on close
    ro = duckdb.connect(str(path), read_only=True)
    assert ro.execute("SELECT value FROM meta WHERE key = 'wal_probe'").fetchone() == ("kept",)
    ro.close()
    other = duckdb.connect()
    other.execute(f"ATTACH '{path}' AS p (READ_ONLY)")
    assert other.execute("SELECT value FROM p.meta WHERE key = 'wal_probe'").fetchone() == ("kept",)
    other.close()
    con = connect(path)  # a writer reopens: replayed, then checkpointed on demand
    con.execute("CHECKPOINT")
    assert con.execute("SELECT value FROM meta WHERE key = 'wal_probe'").fetchone() == ("kept",)
    con.close()
    assert not wal.exists() or wal.stat().st_size == 0


def test_embeddings_are_stored_without_float_compression(tmp_path, embedder):
    """connect() turns ALP/ALP-RD off (db.DISABLED_COMPRESSION): the dense scan reads the
    vectors plain. A checkpoint after an insert must not have used either for them."""
    con = connect(tmp_path / "x.duckdb", embedder=embedder)
    con.execute(
        "INSERT INTO entries (id, content, text, embedding) SELECT printf('%016x', i), 'c' || i, 't' || i, "
        "embed('text number ' || (i % 7)) FROM range(3000) AS r(i)"
    )
    con.execute("CHECKPOINT")
    kinds = {r[0] for r in con.execute(
        "SELECT DISTINCT compression FROM pragma_storage_info('entries') WHERE column_name = 'embedding'").fetchall()}
    con.close()
    assert kinds and not kinds & {"ALP", "ALPRD"}, kinds


def test_missing_pandas_fails_fast_and_the_same_way():
    """db.skip_missing_pandas: without pandas, `import pandas` still raises ModuleNotFoundError."""
    import importlib
    import sys as _sys

    db.skip_missing_pandas()
    db.skip_missing_pandas()
    finders = [f for f in _sys.meta_path if isinstance(f, db._MissingPandas)]
    if not finders:
        pytest.skip("pandas is installed here")
    assert len(finders) == 1  # installed once
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("pandas")
    with pytest.raises(ModuleNotFoundError):
        exec("import pandas")
    import importlib.util

    assert importlib.util.find_spec("pandas") is None  # as without the finder


def test_vectors_an_older_version_compressed_are_rewritten_plain_once(tmp_path, embedder):
    """db.store_vectors_plain, run by MemoryStore.index: an index whose embeddings were
    checkpointed with ALP/ALP-RD (before DISABLED_COMPRESSION) is rewritten once, same values."""
    from lethe_sql import MemoryStore

    root = tmp_path / "p"
    store = MemoryStore(root, embedder=embedder)
    store.init()
    for i in range(40):
        store.memory_dir.joinpath(f"2026-01-{i % 28 + 1:02d}.md").open("a").write(
            f"## note {i}\nThe staging port {5400 + i} moved after incident {i * 7}; see runbook section {i}.\n")
    store.index()
    path = store.db_path
    store.close()
    old = duckdb.connect(str(path))  # as an older version left it: ALP allowed, no flag
    old.execute("UPDATE entries SET embedding = embedding")
    old.execute("DELETE FROM meta WHERE key = 'vectors_plain'")
    old.execute("CHECKPOINT")
    assert db.compressed_vector_tables(old) == ["entries"]
    before = dict(old.execute("SELECT id, embedding FROM entries").fetchall())
    old.close()
    store = MemoryStore(root, embedder=embedder)
    try:
        store.index()
        con = store.con
        assert db.compressed_vector_tables(con) == []
        assert dict(con.execute("SELECT id, embedding FROM entries").fetchall()) == before
        assert con.execute("SELECT value FROM meta WHERE key = 'vectors_plain'").fetchone() == ("1",)
        assert db.store_vectors_plain(con) == []  # once
    finally:
        store.close()


def test_transaction_commits_a_block_and_rolls_back_one_that_raises(tmp_path):
    con = duckdb.connect(str(tmp_path / "t.duckdb"))
    con.execute("CREATE TABLE t (x INTEGER)")
    with db.transaction(con):
        con.execute("INSERT INTO t VALUES (1)")
        con.execute("INSERT INTO t VALUES (2)")
    with pytest.raises(KeyError):
        with db.transaction(con):
            con.execute("INSERT INTO t VALUES (3)")
            raise KeyError("boom")
    with pytest.raises(duckdb.Error):
        with db.transaction(con):
            con.execute("INSERT INTO t VALUES (4)")
            con.execute("INSERT INTO missing VALUES (5)")
    # the connection is usable again, and only the first block's rows are there
    assert con.execute("SELECT list(x ORDER BY x) FROM t").fetchone()[0] == [1, 2]
    con.close()


def test_the_span_width_is_read_from_the_sql_that_defines_it(tmp_path):
    from lethe_sql.judges import SPAN

    con = connect(tmp_path / "x.duckdb")
    assert SPAN == con.execute("SELECT lethe_span()").fetchone()[0] == 254
    con.close()
