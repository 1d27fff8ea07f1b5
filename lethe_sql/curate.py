"""Curating memory in its markdown: forget (and undo), declare or remove revision links, list.

The markdown folder is the source of truth, so every curation is an edit of a memory
file, made under the memory folder's lock with an atomic write, followed by an
incremental index of what changed:

* **forget** a memory: a section lethe wrote (``<!-- lethe source=add|hook|transcript
  ... -->``: ``lethe add``, the agent hooks, ``lethe mine``) is removed from its file;
  a section a person wrote keeps its prose and gets a tombstone line
  ``<!-- lethe forgotten -->`` after its heading, so it is never indexed again. Either
  way the memory leaves search at once and stays out after ``lethe index --rebuild``
  and ``lethe mine`` (a mined file is only ever appended to, ``mine.py``). Every
  occurrence of the memory is forgotten, and so are its duplicates (``dedup.py``).
* **undo** the last forget: each file it edited is put back as it was when nothing
  has changed it since, else the removed sections are appended again and the
  tombstones taken out. What a forget removed is kept for undo in
  ``.lethe/trash/`` (git-ignored, never indexed; the last ``TRASH_KEEP`` forgets).
* **link / unlink** a revision: ``supersedes=OLD`` / ``distinct=OLD`` marker lines in
  the newer memory's section (``revisions.py``).

Only whole-line ``<!-- lethe ... -->`` comments are ever added to or taken from a file
a person wrote; its prose is never rewritten.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Callable, Iterable

from .errors import LetheError, UsageError
from .markdown import Section, editable_sections

TRASH_KEEP = 20
_TOMBSTONE = "<!-- lethe forgotten -->\n"
_MARKER_LINE = re.compile(r"^\s*+<!--\s*+lethe\b(?P<attrs>[^<>]*)-->\s*$")  # attributes as markdown._MARKER


# -- editing memory files ------------------------------------------------------------


@contextlib.contextmanager
def memory_lock(memory_dir: Path):
    """The memory folder's write lock (shared with ``store.append_section``)."""
    memory_dir.mkdir(parents=True, exist_ok=True)
    with open(memory_dir / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _file_of(store, source: str) -> Path:
    """The memory file behind an ``entry_sources.source``; refuses anything outside
    ``.lethe/memory`` (a document source put by the API, a link leading out)."""
    path = (store.root / source)
    try:
        real = path.resolve()
        real.relative_to(store.memory_dir.resolve())
    except (ValueError, OSError):
        raise LetheError(f"{source} is not a memory file under {store.memory_dir}; edit its source instead") from None
    if not real.is_file():
        raise LetheError(f"{source} is gone; run `lethe index` first")
    return real


def _write(path: Path, data: bytes) -> None:
    from .store import _atomic_write

    _atomic_write(path, data)


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="surrogateescape")


def _encode(text: str) -> bytes:
    return text.encode("utf-8", errors="surrogateescape")


def _after_heading(sec: Section, lines: list[str]) -> int:
    """Where a marker line goes in a section: after its heading line and any marker lines
    right below it (the preamble: at its start)."""
    i = sec.start + (1 if sec.chunk.heading is not None else 0)
    while i < sec.end and _MARKER_LINE.match(lines[i]):
        i += 1
    return i


def _eol(lines: list[str]) -> str:
    return "\r\n" if any(line.endswith("\r\n") for line in lines[:5]) else "\n"


# -- forget ------------------------------------------------------------------------


@dataclass
class Forgotten:
    id: str
    source: str
    heading: str | None
    action: str          # 'removed' (lethe wrote it) | 'tombstoned' (a person wrote it)
    text: str = ""       # a glimpse, for the dry-run listing only


@dataclass
class ForgetReport:
    forgotten: list[Forgotten] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    dry_run: bool = False
    undo: str | None = None       # the trash record that undoes it

    @property
    def ids(self) -> list[str]:
        return sorted({f.id for f in self.forgotten})

    def as_dict(self) -> dict:
        return {"dry_run": self.dry_run, "ids": self.ids, "files": self.files, "undo": self.undo,
                "forgotten": [f.__dict__ for f in self.forgotten]}


def targets_for(store, refs: Iterable[str]) -> list[str]:
    """Entry or absorbed ids for ``refs`` (ids or prefixes of at least 4 hex digits).
    Unknown, ambiguous and already forgotten ids raise one UsageError naming them all."""
    con = store.con
    out, problems = [], []
    for raw in refs:
        ref = (raw or "").strip().lower()
        if not re.fullmatch(r"[0-9a-f]{4,16}", ref):
            problems.append(f"{raw!r} is not a memory id")
            continue
        rows = {r[0] for r in con.execute(
            """SELECT id FROM entries WHERE starts_with(id, $1)
               UNION SELECT id FROM absorbed WHERE starts_with(id, $1) AND id IN (SELECT id FROM entry_sources)
               LIMIT 3""", [ref]).fetchall()}
        if ref in rows:
            rows = {ref}
        if len(rows) == 1:
            out.append(rows.pop())
        elif rows:
            problems.append(f"{ref} matches more than one memory; give more of the id")
        elif con.execute("SELECT count(*) FROM forgotten WHERE starts_with(id, ?)", [ref]).fetchone()[0] \
                or _in_trash(store, ref):
            problems.append(f"{ref} is already forgotten")
        else:
            problems.append(f"no memory with id {ref} (`lethe list` shows ids)")
    if problems:
        raise UsageError("; ".join(problems))
    return sorted(set(out))


def matching(store, query: str, limit: int = 1000) -> list[str]:
    """Ids of the memories holding every word of ``query`` (stopwords aside; case and
    punctuation ignored), best BM25 match first: what ``lethe forget --query`` forgets."""
    from .search import clean_query

    q = clean_query(query)
    rows = store.con.execute(
        """SELECT b.id FROM lethe_bm25(lethe_content_query($1), $2) AS b JOIN entries AS e USING (id)
           WHERE list_has_all(lethe_tokens(e.text), lethe_query_terms($1)) ORDER BY b.rank""",
        [q, limit],
    ).fetchall()
    return [r[0] for r in rows]


def _closure(con, ids: list[str]) -> list[str]:
    """``ids`` with every duplicate absorbed into them: forgetting a memory forgets the
    texts that say the same thing."""
    from .judges import ids_literal

    dup = [r[0] for r in con.execute(
        "SELECT id FROM absorbed WHERE list_contains(CAST(? AS VARCHAR[]), into_id)", [ids_literal(ids)]
    ).fetchall()] if ids else []
    return sorted(set(ids) | set(dup))


def forget(store, ids: Iterable[str] = (), query: str | None = None, *, dry_run: bool = False) -> ForgetReport:
    """Forget memories by id (or prefix) or by ``query`` (``matching``). See the module
    docstring. ``dry_run`` lists what would happen and changes nothing."""
    ids = list(ids)
    if bool(ids) == bool(query):
        raise UsageError("give memory ids or --query, not both and not neither")
    con = store.con
    chosen = targets_for(store, ids) if ids else matching(store, query)
    if query is not None and not chosen:
        raise UsageError(f"no memory holds every word of {query!r}; nothing forgotten")
    every = _closure(con, chosen)
    from .judges import ids_literal

    occ = con.execute(
        """SELECT o.source, o.position, o.id, o.heading, coalesce(e.text, a.text)
           FROM entry_sources AS o LEFT JOIN entries AS e USING (id) LEFT JOIN absorbed AS a USING (id)
           WHERE list_contains(CAST(? AS VARCHAR[]), o.id) ORDER BY o.source, o.position""",
        [ids_literal(every)],
    ).fetchall()
    by_file: dict[str, set[str]] = {}
    for source, _, eid, _, _ in occ:
        by_file.setdefault(source, set()).add(eid)
    paths = {source: _file_of(store, source) for source in by_file}  # refuses non-files before any edit
    report = ForgetReport(dry_run=dry_run)
    records = []
    with memory_lock(store.memory_dir):
        for source, want in by_file.items():
            path = paths[source]
            before = path.read_bytes()
            lines, secs = editable_sections(_decode(before), source)
            hit = [s for s in secs if not s.forgotten and s.chunk.id in want]
            eol = _eol(lines)
            for sec in sorted(hit, key=lambda s: -s.start):
                action = "removed" if sec.chunk.marks.lethe_wrote else "tombstoned"
                report.forgotten.append(Forgotten(sec.chunk.id, source, sec.chunk.heading, action,
                                                  " ".join(sec.chunk.text.split())[:120]))
                if action == "removed":
                    del lines[sec.start:sec.end]
                else:
                    lines.insert(_after_heading(sec, lines), _TOMBSTONE.replace("\n", eol))
            if not hit:
                continue
            report.files.append(source)
            if dry_run:
                continue
            after = _encode("".join(lines))
            records.append({"file": source, "before": base64.b64encode(before).decode(),
                            "after_sha256": hashlib.sha256(after).hexdigest(),
                            "ids": sorted({s.chunk.id for s in hit})})
            _write(path, after)
    report.forgotten.sort(key=lambda f: (f.source, f.id))
    if dry_run or not records:
        return report
    report.undo = _push_trash(store, records)
    store.index()
    store.con.execute("DELETE FROM enrichment WHERE list_contains(CAST(? AS VARCHAR[]), id)", [ids_literal(every)])
    for f in report.forgotten:
        f.text = ""  # forgotten: not repeated in the report
    return report


# -- the trash (undo) --------------------------------------------------------------


def trash_dir(store) -> Path:
    return store.lethe_dir / "trash"


def _trash_records(store) -> list[Path]:
    """The kept forgets, oldest first."""
    d = trash_dir(store)
    return sorted(d.glob("*.json")) if d.is_dir() else []


def _in_trash(store, ref: str) -> bool:
    """Whether a kept forget (``.lethe/trash``) took a memory whose id starts with ``ref``."""
    for p in _trash_records(store):
        try:
            files = json.loads(p.read_text(encoding="utf-8")).get("files", [])
        except (OSError, ValueError, AttributeError):
            continue
        if any(str(i).startswith(ref) for f in files if isinstance(f, dict) for i in f.get("ids", [])):
            return True
    return False


def _push_trash(store, records: list[dict]) -> str:
    d = trash_dir(store)
    d.mkdir(parents=True, exist_ok=True)
    ignore = store.lethe_dir / ".gitignore"
    try:
        text = ignore.read_text() if ignore.exists() else ""
        if "trash/" not in text.split():
            ignore.write_text(text + ("" if text.endswith("\n") or not text else "\n") + "trash/\n")
    except OSError:
        pass
    name = f"{datetime.now():%Y%m%dT%H%M%S%f}.json"
    tmp = d / f".{name}.tmp"
    tmp.write_text(json.dumps({"at": datetime.now().isoformat(), "files": records}))
    os.chmod(tmp, 0o600)
    os.replace(tmp, d / name)
    for p in _trash_records(store)[:-TRASH_KEEP]:
        with contextlib.suppress(OSError):
            p.unlink()
    return name


def undo(store) -> ForgetReport:
    """Undo the last forget (see the module docstring); UsageError when there is none."""
    records = _trash_records(store)
    if not records:
        raise UsageError("nothing to undo: no forget is kept in .lethe/trash")
    last = records[-1]
    try:
        data = json.loads(last.read_text())
    except (OSError, ValueError):
        raise LetheError(f"{last} is unreadable; nothing undone") from None
    report = ForgetReport(undo=last.name)
    with memory_lock(store.memory_dir):
        for rec in data.get("files", []):
            path = store.root / rec["file"]
            before = base64.b64decode(rec["before"])
            now = path.read_bytes() if path.exists() else None
            if now is None or hashlib.sha256(now).hexdigest() == rec["after_sha256"]:
                path.parent.mkdir(parents=True, exist_ok=True)
                _write(path, before)
            else:
                _merge_back(path, before, now, rec["file"], set(rec.get("ids", ())))
            report.files.append(rec["file"])
            for eid in rec.get("ids", ()):
                report.forgotten.append(Forgotten(eid, rec["file"], None, "restored"))
    last.unlink()
    store.index()
    return report


def _merge_back(path: Path, before: bytes, now: bytes, source: str, ids: set[str]) -> None:
    """The file changed since the forget: take our tombstones out of the sections that
    hold them, and append the removed sections again at the end."""
    old_lines, old_secs = editable_sections(_decode(before), source)
    lines, secs = editable_sections(_decode(now), source)
    present = {s.chunk.id for s in secs}
    for sec in sorted((s for s in secs if s.forgotten and s.chunk.id in ids), key=lambda s: -s.start):
        for i in range(sec.end - 1, sec.start - 1, -1):
            if _MARKER_LINE.match(lines[i]) and re.search(r"\bforgotten\b", lines[i]):
                del lines[i]
    tail = []
    for sec in old_secs:
        if sec.chunk.id in ids and sec.chunk.id not in present:
            tail.append("".join(old_lines[sec.start:sec.end]))
    text = "".join(lines)
    for block in tail:
        text += ("" if text.endswith("\n\n") or not text else ("\n" if text.endswith("\n") else "\n\n")) + block
        if not text.endswith("\n"):
            text += "\n"
    _write(path, _encode(text))


# -- revision markers ---------------------------------------------------------------


def _edit_sections(store, eid: str, edit: Callable[[list[str], Section], bool]) -> list[str]:
    """Apply ``edit(lines, section)`` to every section holding memory ``eid`` (each file
    rewritten once); returns the files changed."""
    con = store.con
    sources = [r[0] for r in con.execute(
        "SELECT DISTINCT source FROM entry_sources WHERE id = ? ORDER BY source", [eid]).fetchall()]
    if not sources:
        raise LetheError(f"{eid} occurs in no memory file")
    paths = {s: _file_of(store, s) for s in sources}
    changed = []
    with memory_lock(store.memory_dir):
        for source, path in paths.items():
            before = path.read_bytes()
            lines, secs = editable_sections(_decode(before), source)
            did = False
            for sec in sorted((s for s in secs if s.chunk.id == eid and not s.forgotten), key=lambda s: -s.start):
                did = edit(lines, sec) or did
            if did:
                _write(path, _encode("".join(lines)))
                changed.append(source)
    return changed


def add_marker(store, eid: str, key: str, value: str) -> list[str]:
    """Add ``<!-- lethe key=value -->`` to the sections of ``eid``; returns files changed."""
    line = f"<!-- lethe {key}={value} -->"

    def edit(lines: list[str], sec: Section) -> bool:
        have = getattr(sec.chunk.marks, key, ())
        if value in have:
            return False
        lines.insert(_after_heading(sec, lines), line + _eol(lines))
        return True

    return _edit_sections(store, eid, edit)


def drop_marker(store, eid: str, key: str, targets: set[str]) -> list[str]:
    """Take ``key=`` values naming any of ``targets`` (ids; prefixes written in the marker
    count) out of the marker lines of ``eid``'s sections; a marker line left with nothing
    goes. Returns files changed."""

    def names(v: str) -> bool:
        return any(t.startswith(v) for t in targets)

    def edit(lines: list[str], sec: Section) -> bool:
        did = False
        for i in range(sec.end - 1, sec.start - 1, -1):
            m = _MARKER_LINE.match(lines[i])
            if not m or f"{key}=" not in m["attrs"]:
                continue
            kept, removed = [], False
            for part in m["attrs"].split():
                if part.startswith(f"{key}="):
                    vals = [v for v in part[len(key) + 1:].strip('"').split(",") if v]
                    left = [v for v in vals if not names(v.lower())]
                    removed = removed or len(left) < len(vals)
                    if left:
                        kept.append(f"{key}={','.join(left)}")
                else:
                    kept.append(part)
            if removed:
                did = True
                eol = "\r\n" if lines[i].endswith("\r\n") else ("\n" if lines[i].endswith("\n") else "")
                if kept:
                    lines[i] = f"<!-- lethe {' '.join(kept)} -->{eol}"
                else:
                    del lines[i]
        return did

    return _edit_sections(store, eid, edit)


# -- list ----------------------------------------------------------------------------


def list_memories(store, *, since: date | None = None, limit: int = 20) -> list[dict]:
    """The newest memories first (undated last), with their revision state."""
    if limit < 1:
        raise UsageError("--limit must be at least 1")
    rows = store.con.execute(
        """SELECT v.id, e.created_at, e.source, e.heading, e.text, v.superseded_by, v.valid_to, e.tier
           FROM lethe_versions AS v JOIN entries AS e USING (id)
           WHERE $1::TIMESTAMP IS NULL OR e.created_at >= $1::TIMESTAMP
           ORDER BY e.created_at DESC NULLS LAST, e.source DESC, e.position DESC
           LIMIT $2""",
        [datetime.combine(since, datetime.min.time()) if since else None, int(limit)],
    ).fetchall()
    return [
        {"id": r[0], "created_at": r[1].isoformat() if r[1] else None, "source": r[2], "heading": r[3],
         "text": r[4], "superseded_by": r[5], "superseded_at": r[6].isoformat() if r[6] else None, "tier": r[7]}
        for r in rows
    ]


# -- restore (apoptotic entries) -------------------------------------------------------


def restore_apoptotic(store, ids: Iterable[str]) -> list[str]:
    """Bring apoptotic entries back into search (``lethe restore``): tier ``naive``, affinity
    0.5, last retrieved now. Their files never lost them; ids that are not apoptotic are left
    alone. Returns the ids restored."""
    from .learn import current_step

    con = store.con
    step = current_step(con)
    out: list[str] = []
    for i in ids:
        out += [r[0] for r in con.execute(
            "UPDATE entries SET tier = 'naive', affinity = 0.5, last_retrieval_step = ? "
            "WHERE id = ? AND tier = 'apoptotic' RETURNING id", [step, i]
        ).fetchall()]
    return out
