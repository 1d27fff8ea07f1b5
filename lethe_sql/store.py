"""``MemoryStore``: a project's memory folder and its DuckDB index, as one object.

    with MemoryStore("~/code/myproject") as store:
        store.add("The staging DB is on port 5433, not 5432.")
        for hit in store.search("which port does staging use"):
            print(hit.rank, hit.source, hit.text)

Layout under the project root::

    .lethe/memory/YYYY-MM-DD.md     the memories (source of truth; commit them)
    .lethe/index/lethe.duckdb       the index (derived; rebuilt by `lethe index`)
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable, Iterable, Sequence

from .db import before_open, connect, store_vectors_plain, transaction
from .errors import LetheError, NotAProject, UsageError
from .ingest import IndexReport, Progress, apply_changes, check_model, memory_files, scan, token_index_add
from .locks import ProjectLock
from .markdown import Document
from .prepared import forget as forget_statements
from .search import SearchResult, clean_query, run_search
from .settings import check_count, load_settings

LETHE_DIR = ".lethe"
_HEADING_LINE = re.compile(r"^(#{1,3})(?=[ \t])", re.M)


def find_root(start: str | os.PathLike | None = None) -> Path:
    """The nearest directory at or above ``start`` holding ``.lethe/``, else ``start`` itself."""
    here = Path(start or os.getcwd()).expanduser().resolve()
    for d in (here, *here.parents):
        if (d / LETHE_DIR).is_dir():
            return d
    return here


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o777)
        else:  # a new file gets what open() would give it, not mkstemp's 0600
            mask = os.umask(0)
            os.umask(mask)
            os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def append_section(memory_dir: Path, path: Path, section: str, *, unless: str | None = None,
                   unless_section: tuple[str, Sequence[str]] | None = None) -> bool:
    """Append ``section`` to the memory file ``path`` (atomically, under the memory
    folder's lock, so concurrent writers lose nothing). ``unless``: skip when the
    file already holds this string (an anchor comment). ``unless_section``: (id,
    supersedes): skip when the file already holds a section ``lethe add`` wrote with
    that id and those markers (a retried add). Returns whether it wrote."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(memory_dir / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            old = path.read_bytes() if path.exists() else b""
            if unless and unless.encode("utf-8") in old:
                return False
            if unless_section and old:
                from .markdown import parse

                eid, sup = unless_section
                for c in parse(old.decode("utf-8", errors="replace"), path.name):
                    if c.id == eid and c.marks.origin == "add" and set(c.marks.supersedes) == set(sup):
                        return False
            sep = b"" if not old or old.endswith(b"\n\n") else (b"\n" if old.endswith(b"\n") else b"\n\n")
            _atomic_write(path, old + sep + section.encode("utf-8"))
            return True
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


#: how far ahead of the clock the newest memory may be for ``_after_latest`` to follow it
STAMP_AHEAD = timedelta(seconds=60)


def _after_latest(con, now: datetime) -> datetime:
    """The time ``lethe add`` stamps a memory with: ``now``, or one second after the newest
    memory stamped from ``now`` to ``STAMP_AHEAD`` ahead (one dated days ahead by hand is not
    followed). Two adds within one second ("port 5433", then "port 5434") would otherwise
    carry one time, and memories of one time are not ordered, so the second could never
    revise the first."""
    latest = con.execute("SELECT max(created_at) FROM entries WHERE created_at >= ? AND created_at < ?",
                         [now, now + STAMP_AHEAD]).fetchone()[0]
    return now if latest is None else latest.replace(microsecond=0) + timedelta(seconds=1)


def _as_section(text: str, when: datetime, heading: str | None, supersedes: Sequence[str] = ()) -> str:
    body = text.replace("\r\n", "\n").strip()
    # Headings inside a memory would split it on reindex: demote them to ####.
    body = _HEADING_LINE.sub("####", body)
    title = when.strftime("%Y-%m-%d %H:%M:%S")
    if heading:
        title += f" {' '.join(heading.split())}"
    marker = "<!-- lethe source=add" + (f" supersedes={','.join(supersedes)}" if supersedes else "") + " -->"
    return f"## {title}\n{marker}\n\n{body}\n"


@dataclass(frozen=True)
class AddResult:
    """What ``MemoryStore.add_memory`` did: ``status`` is ``added``, ``revises`` (added, and
    it supersedes ``revises``) or ``duplicate`` (``id`` already held these words)."""

    id: str
    status: str
    revises: tuple[str, ...] = ()
    redacted: int = 0
    written: bool = True      # whether a section was appended to the memory file

    def as_dict(self) -> dict:
        return {"id": self.id, "status": self.status, "revises": list(self.revises),
                "duplicate_of": self.id if self.status == "duplicate" else None,
                "redacted": self.redacted, "written": self.written}

    def message(self) -> str:
        if self.status == "duplicate":
            return f"duplicate of {self.id}" + ("" if self.written else " (already in memory: nothing written)")
        if self.revises:
            return f"added {self.id} (revises {', '.join(self.revises)})"
        return f"added {self.id}"


class MemoryStore:
    """The memory of one project.

    ``token_index`` (default on) stores each memory's token vectors for the
    late-interaction judge, and with them the vectors of a long memory's further windows
    (``entry_windows``); a store built without it reads each memory's first window only."""

    def __init__(
        self,
        root: str | os.PathLike = ".",
        *,
        db_path: str | os.PathLike | None = None,
        embedder=None,
        read_only: bool = False,
        create: bool = True,
        token_index: bool = True,
        settings=None,
    ) -> None:
        self.root = Path(root).expanduser().resolve()
        self.lethe_dir = self.root / LETHE_DIR
        self.memory_dir = self.lethe_dir / "memory"
        if db_path == ":memory:":
            self.db_path = db_path  # type: ignore[assignment]
        else:
            self.db_path = Path(db_path) if db_path else self.lethe_dir / "index" / "lethe.duckdb"
        self.read_only = read_only
        if not self.lethe_dir.is_dir():
            if not create or read_only:
                raise NotAProject(f"{self.root} has no .lethe folder; run `lethe init` there first")
            self.init()
        self.settings = load_settings(self.root) if settings is None else settings  # a bad one: said first
        if read_only and (self.db_path == ":memory:" or not Path(self.db_path).exists()):
            raise NotAProject(f"{self.root} has no index yet; run `lethe index` there first")
        self._embedder = embedder
        self.token_index = token_index
        self._reranker_src = False  # not resolved yet
        self._con = None
        self._lock = ProjectLock(Path(self.db_path).parent if self.db_path != ":memory:" else self.lethe_dir / "index")
        self._ready: dict[str, tuple] = {}  # text -> (vector, token vectors) embedded before the lock
        self._learned: list = []  # (learn.Update, Settings): a writer's searches not applied yet

    # -- lifecycle ---------------------------------------------------------
    def init(self) -> Path:
        """Create ``.lethe/memory`` and ``.lethe/index`` (idempotent)."""
        self.memory_dir.mkdir(parents=True, exist_ok=True)
        (self.lethe_dir / "index").mkdir(parents=True, exist_ok=True)
        ignore = self.lethe_dir / ".gitignore"
        if not ignore.exists():
            ignore.write_text("# the index is derived from memory/; rebuild it with `lethe index`\nindex/\n")
        return self.lethe_dir

    @property
    def embedder(self):
        if self._embedder is None:
            from .extend import make_embedder

            self._embedder = make_embedder()  # the registry's default, the shared MiniLM
        return self._embedder

    @property
    def con(self):
        """The DuckDB connection, opened on first use under the project lock (shared for a
        read-only store, exclusive otherwise; ``locks.py``) and held until ``close()``."""
        if self._con is None:
            self._con = self._open()
        return self._con

    def _connect(self, read_only: bool):
        from lethe_sql.udfs.embed import LazyEmbedder

        emb = self._embedder if self._embedder is not None else LazyEmbedder(lambda: self.embedder)
        reranker = None
        if self.settings.judge in ("auto", "cross-encoder") and self._reranker_source() is not None:
            from lethe_sql.udfs.rerank import CrossEncoder, LazyReranker

            src = self._reranker_source()
            reranker = LazyReranker(lambda: CrossEncoder(src))
        return connect(self.db_path, read_only=read_only, embedder=emb, reranker=reranker)

    def _open(self):
        from .errors import DatabaseCorrupt, MigrationError

        if self.db_path == ":memory:":
            return self._connect(self.read_only)
        before_open(self.db_path, self)  # in `lethe serve`: its kept reader of this file closes first
        self._lock.acquire(exclusive=not self.read_only)
        try:
            if self.read_only:
                try:
                    return self._connect(True)
                except (DatabaseCorrupt, MigrationError) as exc:
                    if isinstance(exc, MigrationError) and "newer" in str(exc):
                        raise
                # an index to repair or to migrate: once, as a writer, then read as before
                self._lock.release()
                with MemoryStore(self.root, db_path=self.db_path, embedder=self._embedder,
                                 token_index=self.token_index, settings=self.settings) as writer:
                    writer.con  # recovers or migrates
                self._lock.acquire(exclusive=False)
                return self._connect(True)
            try:
                con = self._connect(False)
            except DatabaseCorrupt as exc:
                con = self._recover(exc)
            from .learn import apply_pending

            apply_pending(con, self.settings, Path(self.db_path).parent)
            return con
        except BaseException:
            self._lock.release()
            raise

    def _recover(self, exc):
        """The index cannot be read: move it aside (with its WAL), build a new one from the
        markdown, and say once what was lost (what it had learned; the memories themselves
        are all in the markdown files)."""
        import warnings

        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        db = Path(self.db_path)
        aside = db.with_name(f"{db.name}.corrupt-{stamp}")
        for src, dst in ((db, aside), (db.with_name(db.name + ".wal"), aside.with_name(aside.name + ".wal"))):
            if src.exists() or src.is_symlink():
                os.replace(src, dst)
        warnings.warn(
            f"the index could not be read ({exc}); it was moved to {aside.name} and is being rebuilt from "
            "the markdown files. Every memory is kept; what the index had learned from searches "
            "(query clusters, suppression, tiers) starts over",
            UserWarning, stacklevel=2,
        )
        self._con = self._connect(False)
        self.index()
        return self._con

    def flush_learning(self) -> int:
        """Apply what this (read-write) store's searches learned and have not applied yet
        (``learn.WRITER_BATCH``); returns how many updates. ``close()`` calls it."""
        from .learn import apply

        queued, self._learned = self._learned, []
        if not queued or self._con is None:
            return 0
        k = 0
        while k < len(queued):  # consecutive searches under equal settings: one run
            j = k
            while j < len(queued) and queued[j][1] == queued[k][1]:
                j += 1
            apply(self._con, queued[k][1], [u for u, _ in queued[k:j]])
            k = j
        return len(queued)

    def close(self) -> None:
        if self._con is not None:
            try:
                try:
                    self.flush_learning()
                except Exception as exc:  # noqa: BLE001 - learning only; the store still closes
                    import warnings

                    warnings.warn(f"what the last searches learned was not saved: {exc}", UserWarning, stacklevel=2)
                self._con.close()
            finally:
                self._con = None
                self._lock.release()

    def __enter__(self) -> "MemoryStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- writing -----------------------------------------------------------
    def _require_writable(self) -> None:
        if self.read_only:
            raise UsageError("this store was opened read-only")

    def index(self, *, progress: Progress | None = None, rebuild: bool = False) -> IndexReport:
        """Bring the index up to date with the memory folder (incremental)."""
        self._require_writable()
        t0 = time.perf_counter()
        report = IndexReport()
        con = self.con
        if rebuild:
            self._rebuild(progress)
        if con.execute("SELECT value FROM meta WHERE key = 'privacy'").fetchone() is None:
            # An index built before privacy.py existed: read every file once more so that
            # sections holding private spans or secrets are replaced by their scrubbed form.
            con.execute("DELETE FROM source_files")
            con.execute("INSERT OR REPLACE INTO meta VALUES ('privacy', '1')")
        from .revisions import model_changed

        # once per new revision model: links an older version detected are detected again
        redetect_all = self.settings.revisions and model_changed(con)
        store_vectors_plain(con)  # once: vectors an older version stored compressed (db.DISABLED_COMPRESSION)
        self._read_long_entries(progress)  # once: long texts an older version read only in part
        prefix = self.memory_dir.relative_to(self.root).as_posix() + "/"
        changed, report.files_seen, report.files_unchanged, report.files_skipped = scan(
            con, self.memory_dir, prefix, report.warnings
        )
        report.files_removed = sum(1 for facts, _ in changed.values() if facts is None)
        report.files_indexed = len(changed) - report.files_removed
        report.redacted = sum(c.redacted for _, chunks in changed.values() for c in chunks)
        if changed:
            report.entries_added, report.entries_removed = apply_changes(
                con, self._embed, changed, progress, settings=self.settings, report=report
            )
        from .dedup import restore_distinct

        report.entries_restored = restore_distinct(self)  # once: what an older dedup rule hid
        if rebuild or redetect_all:
            from .revisions import record_model, redetect

            with transaction(con):
                report.revisions_detected = redetect(con, report.warnings)
                record_model(con)
        if changed or rebuild or redetect_all or report.entries_restored:
            forget_statements(con)  # prepared search statements plan again, against the new data
            if self.db_path != ":memory:":
                from .revisions import write_sidecar

                write_sidecar(con, Path(self.db_path).parent)
                report.compacted = self.compact_if_needed(progress)
        report.entries_total = self.con.execute("SELECT count(*) FROM entries").fetchone()[0]
        report.seconds = time.perf_counter() - t0
        return report

    #: compact when the index (file and WAL) is at least this big...
    COMPACT_MIN_BYTES = 16 * 2**20
    #: ...and this many times the size it had after its last compaction (or first build)
    COMPACT_GROWTH = 1.5

    def compact_if_needed(self, progress: Progress | None = None, *, force: bool = False) -> bool:
        """Rewrite the index into a fresh file when churn has bloated it.

        DuckDB reuses few of the blocks that deletes free, so an index that keeps
        changing grows: a 1,000-entry index went from 30 to 73 MB in four reindexes at
        25% churn. The size of the index after its last compaction (or its first build)
        is kept in ``meta.compact_base``; when the file and its WAL reach
        ``COMPACT_GROWTH`` times that, and at least ``COMPACT_MIN_BYTES``, ``COPY FROM
        DATABASE`` writes everything (tables, macros, views, learned state) to a new file,
        which takes the old one's place: back to the size of a fresh build (0.3 s at 1,000
        entries). Growth by new memories also triggers it, and then costs one copy per
        50% of growth. Runs under the write lock; a crash leaves the old file whole.
        Returns whether it ran."""
        con = self.con
        db = Path(self.db_path)
        wal = db.with_name(db.name + ".wal")
        size = db.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
        row = con.execute("SELECT value FROM meta WHERE key = 'compact_base'").fetchone()
        if row is None:
            con.execute("INSERT OR REPLACE INTO meta VALUES ('compact_base', ?)", [str(size)])
            return False
        if not force and (size < self.COMPACT_MIN_BYTES or size < self.COMPACT_GROWTH * int(row[0])):
            return False
        name = con.execute("SELECT current_database()").fetchone()[0]
        self.flush_learning()  # the connection closes below
        if progress:
            progress("compacting", 0, 1)
        db = Path(self.db_path)
        tmp = db.with_name(db.name + ".compact")
        for f in (tmp, tmp.with_name(tmp.name + ".wal")):
            f.unlink(missing_ok=True)
        con.execute("CHECKPOINT")
        from .federation import attach_sql  # the path as a quoted literal, built by sqlglot

        con.execute(attach_sql(str(tmp), "lethe_compact", read_only=False))
        try:
            con.execute(f'COPY FROM DATABASE "{name}" TO lethe_compact')
            con.execute("CHECKPOINT lethe_compact")
        finally:
            con.execute("DETACH lethe_compact")
        forget_statements(con)
        con.close()
        self._con = None
        wal = db.with_name(db.name + ".wal")
        wal.unlink(missing_ok=True)  # empty after the checkpoint; must not be replayed on the new file
        os.replace(tmp, db)
        self._con = self._connect(False)
        self._con.execute("INSERT OR REPLACE INTO meta VALUES ('compact_base', ?)", [str(db.stat().st_size)])
        if progress:
            progress("compacting", 1, 1)
        return True

    def _embed(self, texts: list[str], tick: Callable[[int], None] | None = None):
        """Sentence vectors, plus token vectors when the embedder gives them. Texts embedded
        ahead (``_embed_ahead``: before the lock was taken) are not embedded again."""
        emb = self.embedder
        check_model(self.con, emb.model_id)
        full = self.token_index and hasattr(emb, "encode_full")
        if self._ready and all(t in self._ready for t in texts):
            import numpy as np

            if tick:
                tick(len(texts))
            vecs = np.stack([self._ready[t][0] for t in texts]) if texts else np.zeros((0, 384), np.float32)
            return vecs, ([self._ready[t][1] for t in texts] if full else None)
        if full:
            return emb.encode_full(texts, tick)
        return emb.encode(texts, progress=tick), None

    def _embed_ahead(self, texts: list[str]) -> None:
        """Embed ``texts`` now, before the index is opened: a writer then holds the lock
        only for the write, not for loading the model and running it."""
        emb = self.embedder
        if self.token_index and hasattr(emb, "encode_full"):
            vecs, toks = emb.encode_full(texts)
        else:
            vecs, toks = emb.encode(texts), [None] * len(texts)
        for t, v, k in zip(texts, vecs, toks):
            self._ready[t] = (v, k)

    def _read_long_entries(self, progress: Progress | None) -> int:
        """Once per index (``meta.windows_read``): entries an older version read only up to
        the model's window (their token vectors fill it) are read again whole, so their
        further windows (``entry_windows``) and token vectors join the index. Returns how
        many were read."""
        from .ingest import token_index_delete

        con = self.con
        if con.execute("SELECT value FROM meta WHERE key = 'windows_read'").fetchone() is not None:
            return 0
        emb = self.embedder
        full = self.token_index and hasattr(emb, "encode_full")
        width = getattr(emb, "max_length", 256) - 2
        rows = con.execute(
            """SELECT e.id, e.text FROM entries AS e
               WHERE e.id IN (SELECT id FROM token_vectors GROUP BY id HAVING count(*) >= ?)
                 AND e.id NOT IN (SELECT id FROM entry_windows)
               ORDER BY e.id""", [width]).fetchall() if full else []
        tokens = None
        if rows:
            check_model(con, emb.model_id)
            done = [0]

            def tick(n: int) -> None:
                done[0] += n
                if progress:
                    progress("reading long memories", done[0], len(rows))

            _, tokens = emb.encode_full([t for _, t in rows], tick)
        with transaction(con):
            if rows:
                ids = [i for i, _ in rows]
                token_index_delete(con, ids)
                token_index_add(con, ids, tokens)
            con.execute("INSERT OR REPLACE INTO meta VALUES ('windows_read', '1')")
        return len(rows)

    def _rebuild(self, progress: Progress | None) -> None:
        """Re-embed every entry and rebuild the FTS tables; learned state is kept."""
        from .db import load_fts, rebuild_fts
        from .fts import fts_add_all
        from .mirror import bump

        con = self.con
        rows = con.execute("SELECT id, text FROM entries ORDER BY id").fetchall()
        con.execute("DELETE FROM meta WHERE key = 'embed_model'")
        done = [0]

        def tick(n: int) -> None:
            done[0] += n
            if progress:
                progress("re-embedding", done[0], len(rows))

        vecs, tokens = self._embed([t for _, t in rows], tick) if rows else (None, None)
        with transaction(con):
            con.execute("DELETE FROM token_vectors")
            con.execute("DELETE FROM token_df")
            con.execute("DELETE FROM entry_windows")
            if rows and tokens is not None:
                token_index_add(con, [i for i, _ in rows], tokens)
            if rows:
                import pyarrow as pa

                con.register(
                    "_lethe_vecs",
                    pa.table(
                        {
                            "id": [i for i, _ in rows],
                            "embedding": pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1)), 384),
                        }
                    ),
                )
                con.execute("UPDATE entries SET embedding = v.embedding FROM _lethe_vecs AS v WHERE entries.id = v.id")
                con.unregister("_lethe_vecs")
            con.execute("DELETE FROM source_files")
        if load_fts(con):
            rebuild_fts(con)
            con.execute("CHECKPOINT")  # the rebuild is DDL: keep it out of the WAL (db.defer_checkpoints)
        else:
            for t in ("docs", "terms", "dict"):
                con.execute(f"DELETE FROM fts_main_entries.{t}")
            bump(con)
            fts_add_all(con)

    def add(self, text: str, *, heading: str | None = None, when: datetime | None = None,
            supersedes: Sequence[str] = ()) -> str:
        """Append ``text`` as a timestamped section of today's file and index it; returns
        the id of the memory that holds it (``add_memory`` says more)."""
        return self.add_memory(text, heading=heading, when=when, supersedes=supersedes).id

    def add_memory(
        self, text: str, *, heading: str | None = None, when: datetime | None = None,
        supersedes: Sequence[str] = (),
    ) -> AddResult:
        """``add``, saying what happened (``AddResult``). ``supersedes``: ids (or prefixes)
        of memories this one replaces, written as a marker in its section. The same text
        as a memory already indexed writes nothing (a retried add is one memory)."""
        self._require_writable()
        if text is None or not text.strip():
            raise UsageError("nothing to add: the memory text is empty")
        from .markdown import parse
        from .privacy import scrub

        # lethe writes this file itself: private spans and secrets never reach it (privacy.py)
        body = scrub(text)
        head = scrub(heading) if heading else None
        text, heading = body.text, (head.text if head else heading)
        redacted = body.count + (head.count if head else 0)
        if not text.strip():
            raise UsageError("nothing to add: the memory is empty once its <private> spans are removed")
        stamped = when is None  # lethe stamps the time itself (to the second)
        when = when or datetime.now().replace(microsecond=0)
        path = self.memory_dir / f"{when:%Y-%m-%d}.md"
        probe = parse(_as_section(text, when, heading), path.name)
        if not probe:
            raise UsageError("nothing to add: the memory holds no indexable text")
        new_id = probe[-1].id
        if self._con is None and self.db_path != ":memory:":
            from lethe_sql.udfs.models import ModelMissing

            try:
                self._embed_ahead([probe[-1].text])  # the model runs before the lock is taken
            except ModelMissing:
                pass  # the memory is still written below; indexing then says what is missing
        con = self.con
        old = self._supersede_targets(new_id, supersedes)
        if not old and con.execute("SELECT count(*) FROM entries WHERE id = ?", [new_id]).fetchone()[0]:
            return AddResult(new_id, "duplicate", (), redacted, written=False)
        if stamped:
            when = _after_latest(con, when)
            path = self.memory_dir / f"{when:%Y-%m-%d}.md"
        self.memory_dir.mkdir(parents=True, exist_ok=True)
        # A retry of an add whose first attempt wrote its section (and then failed to index)
        # finds it in today's file written by `lethe add`: it is not written twice.
        section = _as_section(text, when, heading, old)
        append_section(self.memory_dir, path, section, unless_section=(new_id, old))
        self.index()
        con = self.con  # index() may have compacted the file and opened it anew
        holder = con.execute("SELECT into_id FROM absorbed WHERE id = ?", [new_id]).fetchone()
        if holder is not None:
            return AddResult(holder[0], "duplicate", (), redacted)
        if not con.execute("SELECT count(*) FROM entries WHERE id = ?", [new_id]).fetchone()[0]:
            raise LetheError("the memory was written but is not in the index; run `lethe index`")
        revises = tuple(r[0] for r in con.execute(
            "SELECT old_id FROM revisions WHERE new_id = ? ORDER BY old_id", [new_id]).fetchall())
        return AddResult(new_id, "revises" if revises else "added", revises, redacted)

    def _supersede_targets(self, new_id: str, refs: Sequence[str]) -> tuple[str, ...]:
        """The ids ``refs`` name, checked: each names one memory, none is ``new_id``, and no
        link would close a revision cycle. UsageError otherwise, before anything is written."""
        from . import revisions

        out: list[str] = []
        problems: list[str] = []
        for ref in refs:
            hit = revisions.resolve(self.con, ref)
            if len(hit) != 1:
                problems.append(f"{ref!r} names no memory" if not hit else f"{ref!r} matches more than one memory")
            elif hit[0] == new_id:
                problems.append(f"{hit[0]} has the same words as the new memory; a memory cannot supersede itself")
            elif revisions.would_cycle(self.con, hit[0], new_id):
                problems.append(f"{new_id} cannot supersede {hit[0]}: {hit[0]} already supersedes it (a revision cycle)")
            else:
                out.append(hit[0])
        if problems:
            raise UsageError("; ".join(problems))
        return tuple(dict.fromkeys(out))

    def put_documents(
        self,
        source: str,
        documents: Sequence[Document],
        *,
        progress: Progress | None = None,
        report: IndexReport | None = None,
    ) -> tuple[int, int]:
        """Make ``source`` hold exactly ``documents`` (a non-markdown source: a transcript,
        a benchmark corpus). Same path as markdown indexing: content-hash ids, unchanged
        entries kept, vanished ones removed, near-duplicates merged (``settings.dedup``;
        ``report``, when given, receives the absorbed count and warnings; see
        ``absorbed_map``). Returns (entries added, entries removed)."""
        self._require_writable()
        chunks = [d.to_chunk(i, source) for i, d in enumerate(documents)]
        if report is not None:
            report.redacted += sum(c.redacted for c in chunks)
        counts = apply_changes(
            self.con, self._embed, {source: (None, chunks)}, progress, settings=self.settings, report=report
        )
        forget_statements(self.con)  # prepared search statements plan again, against the new data
        return counts

    def absorbed_map(self) -> dict[str, str]:
        """Absorbed entry id -> id of the live entry that holds it (near-duplicate merging,
        chains followed). An id written to this store and found neither in ``entries``
        nor here was never indexed."""
        from .dedup import absorbed_map

        return absorbed_map(self.con)

    # -- curating (lethe_sql/curate.py) -------------------------------------
    def forget(self, ids: Iterable[str] = (), *, query: str | None = None, dry_run: bool = False):
        """Forget memories by id (or prefix) or by ``query`` (those holding every word of
        it): removed from the files lethe wrote, tombstoned in a person's; out of search
        for good. Returns a ``curate.ForgetReport``; ``undo_forget`` takes it back."""
        self._require_writable()
        from .curate import forget

        return forget(self, ids, query, dry_run=dry_run)

    def undo_forget(self):
        """Undo the last ``forget``; returns a ``curate.ForgetReport`` of what came back."""
        self._require_writable()
        from .curate import undo

        return undo(self)

    def list_memories(self, *, since=None, limit: int = 20) -> list[dict]:
        """The newest memories first (``since``: a date), with their revision state."""
        from .curate import list_memories

        return list_memories(self, since=since, limit=limit)

    def revisions(self, ident: str) -> list[dict]:
        """Every version connected to memory ``ident`` (id or prefix) by revision links,
        oldest first, each with what supersedes it."""
        from . import revisions

        eid = self._one_id(ident)
        ids = revisions.chain(self.con, eid)
        links = revisions.links(self.con, ids)
        rows = self.con.execute(
            "SELECT id, created_at, source, heading, text FROM entries WHERE list_contains(CAST(? AS VARCHAR[]), id)",
            ["[" + ",".join(ids) + "]"],
        ).fetchall()
        meta = {r[0]: r[1:] for r in rows}
        out = []
        for i in ids:
            at, source, heading, text = meta[i]
            out.append({
                "id": i, "created_at": at.isoformat() if at else None, "source": source, "heading": heading,
                "text": text, "current": not any(link.old_id == i for link in links),
                "supersedes": [{"id": link.old_id, "origin": link.origin, "reason": link.reason}
                               for link in links if link.new_id == i],
                "superseded_by": [link.new_id for link in links if link.old_id == i],
            })
        return out

    def link(self, new: str, old: str) -> list[str]:
        """Declare that memory ``new`` supersedes ``old`` (a marker in ``new``'s section);
        returns the files changed."""
        self._require_writable()
        from .curate import add_marker

        n, o = self._one_id(new), self._one_id(old)
        self._supersede_targets(n, [o])
        files = add_marker(self, n, "supersedes", o)
        self.index()
        return files

    def unlink(self, a: str, b: str) -> list[str]:
        """Remove the revision link between memories ``a`` and ``b`` (either direction): a
        declared link loses its marker, a detected one gets a ``distinct=`` veto in the
        newer memory's section. Returns the files changed."""
        self._require_writable()
        from .curate import add_marker, drop_marker

        x, y = self._one_id(a), self._one_id(b)
        rows = self.con.execute(
            "SELECT old_id, new_id, origin FROM revisions WHERE (old_id = $1 AND new_id = $2) OR (old_id = $2 AND new_id = $1)",
            [x, y],
        ).fetchall()
        if not rows:
            raise UsageError(f"{x} and {y} are not linked; `lethe revisions {x}` shows its links")
        files: list[str] = []
        for old, new, origin in rows:
            if origin == "declared":
                files += drop_marker(self, new, "supersedes", {old})
            else:
                files += add_marker(self, new, "distinct", old)
        self.index()
        return sorted(set(files))

    def _one_id(self, ident: str) -> str:
        from . import revisions

        hit = revisions.resolve(self.con, ident)
        if len(hit) != 1:
            raise UsageError(f"no memory with id {ident!r}" if not hit else f"{ident!r} matches more than one memory")
        return hit[0]

    # -- reading -----------------------------------------------------------
    def embed_query(self, query: str):
        return self.embedder.encode([query])[0]

    # -- the judge -------------------------------------------------------------
    def judge(self, name: str | None = None):
        """The judge a search uses, by name through the registry (lethe_sql.extend): ``auto``
        picks the cross-encoder when one is installed, else late interaction over the token
        index, else none."""
        from .extend import JudgeContext, make_judge

        return make_judge(name or self.settings.judge, JudgeContext(self.con, self._reranker_source))

    def _reranker_source(self):
        if self._reranker_src is False:
            from lethe_sql.udfs.models import resolve_reranker

            self._reranker_src = resolve_reranker()
        return self._reranker_src

    def search_outcome(
        self,
        query: str,
        *,
        top_k: int | None = None,
        judge: str | None = None,
        learn: bool | None = None,
        settings=None,
    ):
        """The full pipeline (first stage, judge, adaptive depth, learning) with its trace."""
        from .judges import encode_query
        from .pipeline import run

        q = clean_query(query)
        s = (settings or self.settings).with_(top_k=None if top_k is None else check_count("top_k", top_k))
        enc = encode_query(self.embedder, q)  # the model runs before the index is opened
        j = self.judge(judge)
        if learn is False:
            return run(self.con, enc, s, j, learn=False)
        if self.read_only:
            # A reader cannot write: the learning update waits in a file for the next writer
            # (learn.record_pending / apply_pending), so a search never needs the write lock.
            from .learn import record_pending

            index_dir = Path(self.db_path).parent if self.db_path != ":memory:" else None
            return run(self.con, enc, s, j, learn=index_dir is not None,
                       defer=(lambda u: record_pending(index_dir, u)) if index_dir else None)
        # A writer queues what it learns and applies it in runs (learn.WRITER_BATCH)
        from .learn import WRITER_BATCH

        out = run(self.con, enc, s, j, learn=True, defer=lambda u: self._learned.append((u, s)),
                  queued=len(self._learned))
        if len(self._learned) >= WRITER_BATCH:
            self.flush_learning()
        return out

    def search(
        self,
        query: str,
        *,
        top_k: int | None = None,
        mode: str = "default",
        depth: int | None = None,
        judge: str | None = None,
        learn: bool | None = None,
    ) -> list[SearchResult]:
        """Ranked memories for ``query``.

        ``mode="default"`` runs the whole pipeline (first stage, judge, learning unless
        ``learn=False``; a read-write store applies what it learns every
        ``learn.WRITER_BATCH`` searches and when it closes (``flush_learning``), a read-only
        one defers it to the next writer: ``learn.record_pending``). ``hybrid``, ``bm25`` and ``dense`` run one first-stage
        macro alone and change nothing. ``top_k`` and ``depth`` are integers from 1 to
        ``settings.MAX_COUNT`` (1000); others are a UsageError.
        """
        k = check_count("top_k", self.settings.top_k if top_k is None else top_k)
        d = check_count("depth", self.settings.depth if depth is None else depth)
        if mode != "default":
            q = clean_query(query)
            qvec = self.embed_query(q) if mode in ("hybrid", "dense") else None
            return run_search(self.con, q, qvec, mode=mode, top_k=k, depth=d)
        out = self.search_outcome(query, top_k=k, judge=judge, learn=learn)
        return [
            SearchResult(
                rank=c.final_rank, id=c.id,
                score=c.judge_score if out.judge else c.adjusted,
                content=c.content, text=c.text, source=c.source, heading=c.heading,
                created_at=c.created_at, session_id=c.session_id, tier=c.tier,
                bm25_rank=c.bm25_rank, bm25_score=c.bm25_score,
                dense_rank=c.dense_rank, dense_score=c.dense_score,
                judge=out.judge, judge_score=c.judge_score, fused=c.fused,
                suppression=c.suppression, pool_rank=c.pool_rank,
                superseded_by=c.superseded.heads if c.superseded else (),
                superseded_at=c.superseded.since if c.superseded else None,
            )
            for c in out.results
        ]

    def status(self) -> dict:
        """Counts and facts about this store, for ``lethe status``."""
        con = self.con
        n_entries, n_vec = con.execute(
            "SELECT count(*), count(embedding) FROM entries"
        ).fetchone()
        n_files = con.execute("SELECT count(*) FROM source_files").fetchone()[0]
        tiers = dict(con.execute("SELECT tier, count(*) FROM entries GROUP BY tier ORDER BY tier").fetchall())
        meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
        on_disk = memory_files(self.memory_dir)  # what `lethe index` reads (links out of the folder left out)
        from lethe_sql.udfs.models import ModelMissing, resolve_embedder

        try:
            src = resolve_embedder()
            model = {"name": src.name, "origin": src.origin, "path": str(src.onnx_path)}
        except ModelMissing as exc:
            model = {"missing": str(exc)}
        rr = self._reranker_source()
        reranker = {"name": rr.name, "origin": rr.origin, "path": str(rr.onnx_path)} if rr else None
        judge = self.judge()
        return {
            "root": str(self.root),
            "database": str(self.db_path),
            "database_bytes": Path(self.db_path).stat().st_size if self.db_path != ":memory:" and Path(self.db_path).exists() else 0,
            "memory_files": len(on_disk),
            "indexed_files": n_files,
            "entries": n_entries,
            "entries_with_vectors": n_vec,
            "absorbed": con.execute("SELECT count(*) FROM absorbed").fetchone()[0],
            "tiers": tiers,
            "embed_model": meta.get("embed_model"),
            "search_step": int(meta.get("search_step", 0)),
            "embedder": model,
            "reranker": reranker,
            "judge": judge.name if judge else None,
            "token_vectors": con.execute("SELECT count(*) FROM token_vectors").fetchone()[0],
        }
