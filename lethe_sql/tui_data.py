"""What the terminal UI (``lethe tui``, ``lethe_sql/tui.py``) reads and changes, without Textual.

Every call opens what it needs and closes it before returning: other processes (the
agents' hooks, ``lethe add``) write the same database, and DuckDB lets one process write
only while no other holds the file. Searches, lists, the status and a memory's detail
open the index read-only and learn nothing (``learn=False``); a curation (forget, undo,
supersedes, unlink, restore) opens it read-write for that one operation. The embedding
model is the only thing kept between calls (it holds no file).

Calls are serialised by one lock: the UI runs them in worker threads, and a search the
user has typed past still finishes before the next one starts (its results are dropped).
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Iterator

from .errors import LetheError, UsageError

#: results a search shows (and recent memories listed); a date filter asks the pipeline for more
SEARCH_K = 20
FILTERED_K = 100
RECENT_K = 50


@dataclass(frozen=True)
class Scope:
    """Where a search looks: ``project`` (this one), ``all`` registered projects, or a
    ``subset`` of them (``slugs``)."""

    kind: str = "project"
    slugs: tuple[str, ...] = ()

    def label(self) -> str:
        if self.kind == "all":
            return "all projects"
        if self.kind == "subset":
            return "projects: " + ",".join(self.slugs)
        return "this project"

    @property
    def federated(self) -> bool:
        return self.kind != "project"


@dataclass
class Row:
    """One memory in a list: a search result (``rank``, ``score``) or a recent one."""

    id: str
    root: str
    project: str | None           # the registered slug, for cross-project lists
    created_at: datetime | None
    source: str | None
    heading: str | None
    text: str
    tier: str = "naive"
    rank: int | None = None
    score: float | None = None
    superseded_by: tuple[str, ...] = ()
    superseded_at: datetime | None = None

    @property
    def apoptotic(self) -> bool:
        return self.tier == "apoptotic"

    @property
    def path(self) -> Path | None:
        return Path(self.root) / self.source if self.source else None


@dataclass
class Listing:
    """What the results list shows: ``query`` ("" for recent memories), its rows, the
    search's trace (``pipeline.Outcome`` or ``federation.FedOutcome``, for explain) and
    notes (projects skipped)."""

    query: str
    rows: list[Row]
    outcome: object | None = None
    notes: list[str] = field(default_factory=list)
    hidden: bool = False          # the apoptotic list


def parse_since(text: str, today: date | None = None) -> date | None:
    """``YYYY-MM-DD``, ``Nd`` (N days ago) or ``Nw``; empty: no filter."""
    t = (text or "").strip().lower()
    if not t:
        return None
    today = today or date.today()
    if t[:-1].isdigit() and t[-1:] in ("d", "w"):
        n = int(t[:-1]) * (7 if t.endswith("w") else 1)
        return today - timedelta(days=n)
    try:
        return date.fromisoformat(t)
    except ValueError:
        raise UsageError(f"a date filter is YYYY-MM-DD, Nd or Nw (7d, 2w), not {text!r}") from None


def _dt(v) -> datetime | None:
    if v is None or isinstance(v, datetime):
        return v
    return datetime.fromisoformat(str(v))


def _after(row: Row, since: date | None) -> bool:
    return since is None or (row.created_at is not None and row.created_at.date() >= since)


def stale_files(store) -> int:
    """Memory files changed (size or mtime), added or removed since the last index."""
    from .ingest import memory_files

    prefix = store.memory_dir.relative_to(store.root).as_posix() + "/"
    known = {r[0]: (r[1], r[2]) for r in store.con.execute(
        "SELECT path, size, mtime FROM source_files WHERE starts_with(path, ?)", [prefix]).fetchall()}
    n, seen = 0, set()
    for p in memory_files(store.memory_dir):
        rel = prefix + p.relative_to(store.memory_dir).as_posix()
        seen.add(rel)
        try:
            st = p.stat()
        except OSError:
            continue
        if known.get(rel) != (st.st_size, st.st_mtime):
            n += 1
    return n + len(set(known) - seen)


class Backend:
    """The project at ``root`` (and the registered ones, for cross-project scopes)."""

    def __init__(self, root: str | Path, *, embedder=None) -> None:
        self.root = Path(root).expanduser().resolve()
        self._embedder = embedder
        self._lock = threading.RLock()        # one store operation at a time
        self._emb_lock = threading.Lock()     # the model loads while a store opens
        self._write_lock = threading.Lock()
        self._closed = False

    # -- opening and closing -------------------------------------------------------
    @property
    def embedder(self):
        with self._emb_lock:
            if self._embedder is None:
                from lethe_sql.udfs.embed import Embedder

                self._embedder = Embedder()
            return self._embedder

    @contextlib.contextmanager
    def reading(self, root: str | Path | None = None) -> Iterator:
        """A read-only store of ``root`` (default: this project), closed on exit."""
        from .store import MemoryStore

        with self._lock:
            store = MemoryStore(root or self.root, read_only=True, create=False, embedder=self._embedder)
            try:
                yield store
            finally:
                store.close()

    @contextlib.contextmanager
    def writing(self, root: str | Path | None = None) -> Iterator:
        """A read-write store of ``root`` for one curation, closed on exit."""
        from .store import MemoryStore

        with self._write_lock, self._lock:
            if self._closed:
                raise LetheError("the UI is closing; nothing changed")
            store = MemoryStore(root or self.root, create=False, embedder=self._embedder)
            if not Path(store.db_path).exists():
                raise LetheError(f"{store.root} has no index yet; run `lethe index` there first")
            try:
                yield store
            finally:
                store.close()

    def close(self) -> None:
        """Wait for a curation in progress to finish; refuse new ones (the UI is quitting)."""
        with self._write_lock:
            self._closed = True

    def prefetch(self, query: str, scope: Scope, since: date | None) -> Future:
        """Start ``search`` (or ``recent``) in a thread now; the UI takes the result when it
        is up (``lethe tui --query``: the search runs while Textual loads, and the model
        loads in a second thread while the index opens)."""
        fut: Future = Future()
        if query.strip() and self._embedder is None:
            threading.Thread(target=lambda: self.embedder, name="lethe-model", daemon=True).start()

        def go() -> None:
            try:
                if query.strip():
                    fut.set_result(self.search(query, scope, since))
                else:
                    fut.set_result(self.recent(scope, since))
            except BaseException as exc:  # handed to the UI, which shows it
                fut.set_exception(exc)

        threading.Thread(target=go, name="lethe-prefetch", daemon=True).start()
        return fut

    # -- reading -------------------------------------------------------------------
    def projects(self) -> list:
        from .registry import Registry

        return Registry().projects()

    def _selected(self, scope: Scope) -> list:
        from .registry import Registry

        return Registry().select(None if scope.kind == "all" else list(scope.slugs))

    def search(self, query: str, scope: Scope = Scope(), since: date | None = None) -> Listing:
        """Ranked memories for ``query``; nothing is learned, nothing written."""
        k = FILTERED_K if since else SEARCH_K
        if scope.federated:
            from . import federation
            from .settings import load_settings

            projects = self._selected(scope)
            emb = self.embedder
            with self._lock:
                out = federation.search(projects, query, embedder=emb, top_k=k,
                                        settings=load_settings(self.root if (self.root / ".lethe").is_dir() else None))
            rows = [self._row(c, out.judge, project=c.project, root=c.root) for c in out.results]
            notes = [f"project {slug} skipped: {why}" for slug, why in out.skipped]
        else:
            with self.reading() as store:
                store.con  # noqa: B018 - open the index while the model may still be loading
                store._embedder = self.embedder  # loaded once, handed to each short-lived store
                out = store.search_outcome(query, top_k=k, learn=False)
            rows = [self._row(c, out.judge, project=None, root=str(self.root)) for c in out.results]
            notes = list(out.notes)
        rows = [r for r in rows if _after(r, since)][:SEARCH_K]
        return Listing(query, rows, out, notes)

    @staticmethod
    def _row(c, judge, *, project, root) -> Row:
        sup = getattr(c, "superseded", None)
        return Row(
            id=c.id, root=str(root), project=project, created_at=c.created_at, source=c.source,
            heading=c.heading, text=c.text, tier=c.tier, rank=c.final_rank,
            score=c.judge_score if judge else c.adjusted,
            superseded_by=tuple(sup.heads) if sup else (), superseded_at=sup.since if sup else None,
        )

    def recent(self, scope: Scope = Scope(), since: date | None = None, *, hidden: bool = False,
               limit: int = RECENT_K) -> Listing:
        """The newest memories (``hidden``: only apoptotic ones, which search leaves out)."""
        if not scope.federated:
            with self.reading() as store:
                rows = self._list(store, None, since, limit, hidden)
            return Listing("", rows, hidden=hidden)
        rows, notes = [], []
        for p in self._selected(scope):
            try:
                with self.reading(p.root) as store:
                    rows += self._list(store, p.slug, since, limit, hidden)
            except LetheError as exc:
                notes.append(f"project {p.slug} skipped: {exc}")
        rows.sort(key=lambda r: (r.created_at or datetime.min, r.project or "", r.id), reverse=True)
        return Listing("", rows[:limit], notes=notes, hidden=hidden)

    @staticmethod
    def _list(store, project, since, limit, hidden) -> list[Row]:
        if hidden:
            got = store.con.execute(
                """SELECT v.id, e.created_at, e.source, e.heading, e.text, v.superseded_by, v.valid_to, e.tier
                   FROM lethe_versions AS v JOIN entries AS e USING (id)
                   WHERE e.tier = 'apoptotic' AND ($1::TIMESTAMP IS NULL OR e.created_at >= $1::TIMESTAMP)
                   ORDER BY e.created_at DESC NULLS LAST, e.source DESC, e.position DESC LIMIT $2""",
                [datetime.combine(since, datetime.min.time()) if since else None, int(limit)]).fetchall()
            raw = [{"id": r[0], "created_at": r[1], "source": r[2], "heading": r[3], "text": r[4],
                    "superseded_by": r[5], "superseded_at": r[6], "tier": r[7]} for r in got]
        else:
            raw = store.list_memories(since=since, limit=limit)
        return [
            Row(id=r["id"], root=str(store.root), project=project, created_at=_dt(r["created_at"]),
                source=r["source"], heading=r["heading"], text=r["text"], tier=r["tier"],
                superseded_by=(r["superseded_by"],) if r["superseded_by"] else (),
                superseded_at=_dt(r["superseded_at"]))
            for r in raw
        ]

    def memory(self, row: Row) -> dict:
        """The whole memory: its entry, file and revision chain (``store.revisions``)."""
        with self.reading(row.root) as store:
            got = store.con.execute(
                "SELECT id, content, text, source, heading, created_at, tier FROM entries WHERE id = ?", [row.id]
            ).fetchone()
            if got is None:
                raise LetheError(f"{row.id} is no longer in the index (forgotten, or its file changed)")
            versions = store.revisions(row.id)
            files = [r[0] for r in store.con.execute(
                "SELECT DISTINCT source FROM entry_sources WHERE id = ? ORDER BY source", [row.id]).fetchall()]
        return {"id": got[0], "content": got[1], "text": got[2], "source": got[3], "heading": got[4],
                "created_at": got[5], "tier": got[6], "root": row.root, "project": row.project,
                "files": [str(Path(row.root) / f) for f in files], "versions": versions}

    def status(self) -> dict:
        """``store.status()`` of this project, with ``stale``: files changed since the last index."""
        with self.reading() as store:
            info = store.status()
            info["stale"] = stale_files(store)
        return info

    # -- curating (read-write, one operation each) ---------------------------------
    def forget(self, row: Row):
        with self.writing(row.root) as store:
            return store.forget([row.id])

    def undo(self, root: str | Path | None = None):
        with self.writing(root) as store:
            return store.undo_forget()

    def link(self, root: str | Path, new: str, old: str) -> list[str]:
        with self.writing(root) as store:
            return store.link(new, old)

    def unlink(self, root: str | Path, a: str, b: str) -> list[str]:
        with self.writing(root) as store:
            return store.unlink(a, b)

    def restore(self, row: Row) -> list[str]:
        from .curate import restore_apoptotic

        with self.writing(row.root) as store:
            return restore_apoptotic(store, [row.id])
