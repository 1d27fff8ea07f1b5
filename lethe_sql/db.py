"""Open a lethe database: lock-aware open, FTS, migrations, UDFs, SQL surface.

``connect(path)`` is the one way the package opens a database. It

1. opens the file, retrying briefly with jittered backoff while a process outside
   lethe holds DuckDB's lock, then fails with a message naming the holder;
2. applies every file of ``migrations/`` exactly once, recording its sha256
   (an applied migration whose file changed is an error);
3. creates the FTS tables for ``entries`` if they are missing, loading the FTS
   extension from the ``duckdb-extension-fts`` wheel for that (no network; falling
   back to ``LOAD fts`` / ``INSTALL fts``): searches never need it;
4. re-applies ``sql/`` (macros and views, ``CREATE OR REPLACE``) when its
   content changed since the last open;
5. registers the ``embed`` UDF (the model loads on first call).

Opening waits for nothing: lethe processes queue on the project lock
(``locks.ProjectLock``) before they get here.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import duckdb

from .errors import DatabaseCorrupt, DatabaseLocked, DatabaseUnwritable, MigrationError
from .resources import sql_files


@contextmanager
def transaction(con):
    """One explicit transaction on ``con``: committed when the block ends, rolled back
    (and the error raised again) when it raises. Every multi-statement write uses it."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


FTS_SCHEMA = "fts_main_entries"
FTS_OPTIONS = (
    "stemmer='none', stopwords='none', ignore='[^a-z0-9_]+', strip_accents=0, lower=1, overwrite=1"
)

_LOCK_RE = re.compile(r"Conflicting lock is held in (?P<proc>\S+) \(PID (?P<pid>\d+)\)")


#: how long ``open_duckdb`` retries when a process outside lethe's lock holds the file
#: (a plain DuckDB client); lethe's own processes queue on ``locks.ProjectLock`` first
OPEN_RETRY_SECONDS = 5.0

# What DuckDB says when a file cannot be a database (truncated, overwritten, a folder).
_CORRUPT = ("not a valid DuckDB database", "Could not read enough bytes", "Is a directory",
            "Could not read from file", "corrupt", "Corrupt", "checksum", "Checksum")


#: set by ``lethe serve``: called with a database file (and the store opening it, if one)
#: before this process opens or attaches it, so that the service first closes the
#: read-only reader it keeps on that file (DuckDB lets one process open a file one way)
BEFORE_OPEN = None


def before_open(path: str | os.PathLike, opener=None) -> None:
    if BEFORE_OPEN is not None and str(path) != ":memory:":
        BEFORE_OPEN(Path(path), opener)


def open_duckdb(path: str | os.PathLike, *, read_only: bool = False, timeout: float | None = None):
    """``duckdb.connect`` with a bounded, jittered retry on lock conflicts; every failure
    is a one-line LetheError (``DatabaseCorrupt``, ``DatabaseLocked``, ``DatabaseUnwritable``)."""
    target = str(path)
    if target != ":memory:" and not read_only:
        try:
            Path(target).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DatabaseUnwritable(f"cannot create the index folder {Path(target).parent}: {exc.strerror or exc}") from None
    deadline = time.monotonic() + (OPEN_RETRY_SECONDS if timeout is None else timeout)
    delay = 0.02
    while True:
        try:
            return duckdb.connect(target, read_only=read_only)
        except duckdb.IOException as exc:
            msg = str(exc)
            if "Permission denied" in msg or "Read-only file system" in msg:
                raise DatabaseUnwritable(
                    f"cannot {'read' if read_only else 'write'} the index {target}: permission denied "
                    "(check the file's and its folder's permissions)"
                ) from None
            if any(k in msg for k in _CORRUPT):
                raise DatabaseCorrupt(f"{target} is not a readable DuckDB database ({msg.splitlines()[0][:160]})") from exc
            m = _LOCK_RE.search(msg)
            if m is None and "Could not set lock" not in msg:
                raise DatabaseCorrupt(f"{target} cannot be opened ({msg.splitlines()[0][:160]})") from exc
            if time.monotonic() >= deadline:
                holder = f"{m['proc']} (PID {m['pid']})" if m else "another process"
                raise DatabaseLocked(
                    f"{target} is locked by {holder}, a program outside lethe that holds it for writing; "
                    "retry when it finishes"
                ) from None
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.5)
        except (duckdb.SerializationException, duckdb.InternalException) as exc:
            raise DatabaseCorrupt(f"{target} cannot be read: {str(exc).splitlines()[0][:160]}") from exc


def load_fts(con) -> str:
    """Load FTS without network when possible; returns how it was loaded, or '' if it was not."""
    try:
        import duckdb_extension_fts

        pkg = Path(duckdb_extension_fts.__file__).parent
        version = duckdb.__version__
        candidates = sorted(pkg.glob(f"extensions/v{version}/fts.duckdb_extension")) or sorted(
            pkg.glob("extensions/*/fts.duckdb_extension")
        )
        for binary in candidates:
            try:
                con.execute(f"LOAD '{binary.as_posix()}'")
                return f"duckdb-extension-fts ({binary})"
            except duckdb.Error:
                continue
    except ImportError:
        pass
    try:
        con.execute("LOAD fts")
        return "duckdb extension directory"
    except duckdb.Error:
        pass
    try:
        con.execute("INSTALL fts")
        con.execute("LOAD fts")
        return "INSTALL fts (network)"
    except duckdb.Error:
        return ""


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def migrate(con) -> list[str]:
    """Apply pending migrations, each in its own transaction; returns the names applied."""
    con.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " name VARCHAR PRIMARY KEY, sha256 VARCHAR NOT NULL,"
        " applied_at TIMESTAMP NOT NULL DEFAULT current_timestamp)"
    )
    applied = dict(con.execute("SELECT name, sha256 FROM schema_migrations").fetchall())
    files = sql_files("migrations")
    known = {f.name for f in files}
    unknown = sorted(set(applied) - known)
    if unknown:
        raise MigrationError(
            f"database was migrated by a newer lethe-sql (unknown migrations: {', '.join(unknown)}); "
            "upgrade lethe-sql"
        )
    done = []
    for f in files:
        text = f.read_text(encoding="utf-8")
        digest = _sha256(text)
        if f.name in applied:
            if applied[f.name] != digest:
                raise MigrationError(
                    f"migration {f.name} was edited after it was applied "
                    f"(recorded sha256 {applied[f.name][:12]}, file {digest[:12]}); "
                    "add a new migration instead of editing an applied one"
                )
            continue
        with transaction(con):
            con.execute(text)
            con.execute("INSERT INTO schema_migrations (name, sha256) VALUES (?, ?)", [f.name, digest])
        done.append(f.name)
    return done


def check_migrated(con) -> None:
    """For read-only opens: the schema must be exactly what this version expects."""
    try:
        applied = {r[0] for r in con.execute("SELECT name FROM schema_migrations").fetchall()}
    except duckdb.CatalogException:
        raise MigrationError("database has no lethe schema yet; run `lethe index` first") from None
    expected = {f.name for f in sql_files("migrations")}
    if applied != expected:
        if applied - expected:
            raise MigrationError("database was written by a newer lethe-sql; upgrade lethe-sql")
        raise MigrationError("database schema is older than this lethe-sql; open it read-write once (`lethe index`)")


def fts_schema_exists(con, catalog: str | None = None) -> bool:
    q = "SELECT count(*) FROM duckdb_tables() WHERE schema_name = ? AND table_name = 'docs'"
    params: list = [FTS_SCHEMA]
    if catalog:
        q += " AND database_name = ?"
        params.append(catalog)
    return con.execute(q, params).fetchone()[0] > 0


def rebuild_fts(con) -> None:
    """Full rebuild of the FTS tables from ``entries.text`` (PRAGMA create_fts_index)."""
    con.execute(f"PRAGMA create_fts_index('entries', 'id', 'text', {FTS_OPTIONS})")
    from .mirror import bump

    bump(con)  # the in-process first stage's copy is out of date (lethe_sql.mirror)


_FTS_FALLBACK_DDL = f"""
CREATE SCHEMA IF NOT EXISTS {FTS_SCHEMA};
CREATE TABLE IF NOT EXISTS {FTS_SCHEMA}.docs (docid BIGINT, name VARCHAR, len BIGINT);
CREATE TABLE IF NOT EXISTS {FTS_SCHEMA}.terms (docid BIGINT, fieldid BIGINT, termid BIGINT);
CREATE TABLE IF NOT EXISTS {FTS_SCHEMA}.dict (termid BIGINT, term VARCHAR, df BIGINT);
CREATE TABLE IF NOT EXISTS {FTS_SCHEMA}.stats (num_docs BIGINT, avgdl DOUBLE);
CREATE TABLE IF NOT EXISTS {FTS_SCHEMA}.fields (fieldid BIGINT, field VARCHAR);
INSERT INTO {FTS_SCHEMA}.stats SELECT 0, NULL WHERE NOT EXISTS (SELECT 1 FROM {FTS_SCHEMA}.stats);
INSERT INTO {FTS_SCHEMA}.fields SELECT 0, 'text' WHERE NOT EXISTS (SELECT 1 FROM {FTS_SCHEMA}.fields);
"""


def ensure_fts(con) -> bool:
    """Create the FTS tables for ``entries`` if missing (with the extension when it loads);
    returns whether it did. The search never needs the extension (its BM25 reads the FTS
    tables directly), so it is loaded only here and for a rebuild: 25 ms an open saved."""
    if fts_schema_exists(con):
        return False
    if load_fts(con):
        rebuild_fts(con)
    else:
        # Same tables the extension builds; BM25 in sql/ needs only these.
        con.execute(_FTS_FALLBACK_DDL)
        from .fts import fts_add_all

        fts_add_all(con)
    return True


def apply_sql(con) -> bool:
    """Re-apply ``sql/`` when its content changed; returns whether it ran."""
    files = sql_files("sql")
    texts = [f.read_text(encoding="utf-8") for f in files]
    digest = _sha256("\n".join(f"-- {f.name}\n{t}" for f, t in zip(files, texts)))
    row = con.execute("SELECT value FROM meta WHERE key = 'sql_sha256'").fetchone()
    if row and row[0] == digest:
        return False
    with transaction(con):
        for text in texts:
            con.execute(text)
        con.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('sql_sha256', ?)", [digest]
        )
    return True


#: WAL size at which a commit checkpoints (DuckDB's default is 16 MB).
CHECKPOINT_THRESHOLD = "8MB"


def defer_checkpoints(con) -> None:
    """Do not checkpoint when a writing connection closes; checkpoint when the WAL reaches
    ``CHECKPOINT_THRESHOLD`` instead.

    A checkpoint writes out every primary-key index of a table that changed, whatever the
    size of the change. At 200,000 entries that took 1.3-3 s at the close of every
    ``lethe add`` or learning ``lethe search`` process, for about 30 KiB of WAL. Now a
    process leaves its changes in ``lethe.duckdb.wal`` (durable, and replayed by every
    opener, read-only ones and ``ATTACH ... (READ_ONLY)`` included), and one commit in a
    hundred or more pays the checkpoint. DuckDB decides by its own estimate of a commit's
    WAL, far above what it writes: at 1-2 MB it checkpointed at every ``lethe add`` (53 ms
    each at 400 entries, and the file grew by a megabyte a time), for 23 KiB of real WAL.
    Replaying costs an opener about 65 ms per MB of WAL at 400 entries, 25 ms per MB at
    200,000: ``lethe serve`` keeps the index open between the commands of a busy spell, so
    it replays seldom. The index is ``lethe.duckdb`` together with ``lethe.duckdb.wal``:
    copy both, or run ``CHECKPOINT`` first.
    """
    con.execute("PRAGMA disable_checkpoint_on_shutdown")
    con.execute(f"SET checkpoint_threshold = '{CHECKPOINT_THRESHOLD}'")


#: Float compression DuckDB would otherwise pick for the FLOAT[384] embedding columns.
#: ALP-RD saves about 10% of their space, and decompressing it doubled the cost of the
#: dense scan (10,000 entries: 8.5 ms against 4.1 ms uncompressed); the dense list runs
#: on every search, so the vectors are stored plain. Global to the DuckDB instance; it
#: applies to what a checkpoint writes from now on; an index written before is rewritten
#: once by the next `lethe index` (``store_vectors_plain``).
DISABLED_COMPRESSION = "alp,alprd"


def tune_instance(con) -> None:
    """Per-instance settings of a writing connection (see ``DISABLED_COMPRESSION``)."""
    con.execute(f"SET disabled_compression_methods = '{DISABLED_COMPRESSION}'")


#: Tables whose FLOAT[384] ``embedding`` column the dense list scans.
VECTOR_TABLES = ("entries", "enrichment", "entry_windows")


def compressed_vector_tables(con) -> list[str]:
    """The tables of ``VECTOR_TABLES`` with embedding segments stored ALP/ALP-RD compressed."""
    out = []
    for t in VECTOR_TABLES:
        kinds = {r[0] for r in con.execute(
            "SELECT DISTINCT compression FROM pragma_storage_info(?) WHERE column_name = 'embedding'", [t]
        ).fetchall()}
        if kinds & {"ALP", "ALPRD"}:
            out.append(t)
    return out


def store_vectors_plain(con) -> list[str]:
    """Once per index: rewrite embedding columns that an older version checkpointed with
    ALP/ALP-RD (``UPDATE ... SET embedding = embedding``; the checkpoint after it writes
    them plain: 0.5 s at 10,000 entries), then record it in ``meta`` (``vectors_plain``).
    Returns the tables rewritten. Called by ``MemoryStore.index``."""
    if con.execute("SELECT value FROM meta WHERE key = 'vectors_plain'").fetchone() is not None:
        return []
    tables = compressed_vector_tables(con)
    with transaction(con):
        for t in tables:
            con.execute(f"UPDATE {t} SET embedding = embedding WHERE embedding IS NOT NULL")
        con.execute("INSERT OR REPLACE INTO meta VALUES ('vectors_plain', '1')")
    if tables:
        con.execute("CHECKPOINT")
    return tables


class _MissingPandas:
    """A ``sys.meta_path`` finder that fails ``import pandas`` at once. Only an import
    statement is answered (the import system's ``_find_and_load_unlocked`` asking);
    ``importlib.util.find_spec("pandas")`` still gets None from the usual search, as
    without this finder."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "pandas":
            caller = sys._getframe(2) if hasattr(sys, "_getframe") else None
            if caller is not None and caller.f_code.co_name == "_find_and_load_unlocked":
                raise ModuleNotFoundError("No module named 'pandas'", name="pandas")
        return None


def skip_missing_pandas() -> None:
    """DuckDB's Python client tries ``import pandas`` (twice) on every statement it binds
    parameters for; without pandas each failed import searches ``sys.path`` again, about
    0.35 ms per statement, several per search. When pandas is not installed, a finder
    first on ``sys.meta_path`` fails that import at once, with the error it would raise
    anyway."""
    import importlib.util

    if any(isinstance(f, _MissingPandas) for f in sys.meta_path) or "pandas" in sys.modules:
        return
    if importlib.util.find_spec("pandas") is None:
        sys.meta_path.insert(0, _MissingPandas())


def connect(
    path: str | os.PathLike = ":memory:",
    *,
    read_only: bool = False,
    embedder=None,
    reranker=None,
    lock_timeout: float | None = None,
):
    """Open (creating if needed) a lethe database and return the DuckDB connection.

    ``embedder`` is an :class:`udfs.Embedder`, a ``LazyEmbedder``, or ``None``
    for the default model, loaded lazily on the first ``embed()`` call.
    ``reranker`` (a ``CrossEncoder`` or ``LazyReranker``), when given, is
    registered as ``rerank(query, passage)``.
    """
    from lethe_sql.udfs.embed import Embedder, LazyEmbedder, register_embed

    skip_missing_pandas()
    con = open_duckdb(path, read_only=read_only, timeout=lock_timeout)
    try:
        if not read_only:
            defer_checkpoints(con)
            tune_instance(con)
        if read_only:
            check_migrated(con)
        else:
            ddl = bool(migrate(con))
            ddl = ensure_fts(con) or ddl
            ddl = apply_sql(con) or ddl
            if ddl:
                # Never leave schema changes in the WAL: DuckDB 1.5 cannot replay some of
                # them (our table macros), so the next open would fail. Data changes only.
                con.execute("CHECKPOINT")
        if embedder is None:
            embedder = LazyEmbedder(Embedder)
        register_embed(con, embedder)
        if reranker is not None:
            from lethe_sql.udfs.rerank import register_rerank

            register_rerank(con, reranker)
    except Exception:
        con.close()
        raise
    return con
