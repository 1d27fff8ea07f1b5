"""Incremental indexing of memory files into ``entries`` and the FTS tables.

One pass:

1. list the memory files; a file whose size and mtime match ``source_files``
   is skipped unread, one whose bytes hash the same only has its mtime updated;
2. parse each changed file into chunks (``markdown.parse``);
3. embed only the chunks whose ids are not in ``entries`` yet (outside any
   transaction, with progress), then, in one transaction: replace the changed
   files' occurrences, insert the new entries, delete entries no occurrence
   holds any more, and update the FTS tables incrementally;
4. duplicates (``dedup.py``): a new entry with the same words as a live entry or
   an earlier new one (``markdown.dedup_key``) is not inserted but recorded in
   ``absorbed``; an absorbed id is not re-inserted while its keeper lives, and comes
   back when its keeper goes;
5. revisions (``revisions.py``): the sections' markers are stored, declared links
   re-derived from them, and each new entry is checked against its nearest older
   memories for a detected link.

Entries whose text did not change keep their row, and with it their learned
state. Unreadable input never stops the pass: a binary or oversized file is
skipped with a warning, invalid UTF-8 is decoded with replacement characters
and reported. The markdown files themselves are only ever read here.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from .db import transaction
from .fts import context_refresh, context_sync, fts_add, fts_delete
from .markdown import Chunk, dedup_key, sections

#: the largest memory file indexed unless LETHE_MAX_FILE_BYTES says otherwise (max_file_bytes)
MAX_FILE_BYTES = 16 * 1024 * 1024
BINARY_SNIFF = 8192

Progress = Callable[[str, int, int], None]


@dataclass
class IndexReport:
    files_seen: int = 0
    files_unchanged: int = 0
    files_indexed: int = 0
    files_removed: int = 0
    files_skipped: int = 0
    entries_added: int = 0
    entries_removed: int = 0
    entries_total: int = 0
    entries_absorbed: int = 0      # duplicates (same words) merged into another entry by this pass
    entries_restored: int = 0      # memories an older near-duplicate rule had merged away, brought back
    revisions_declared: int = 0    # links from supersedes= markers, after this pass
    revisions_detected: int = 0    # links detected for this pass's new entries
    compacted: bool = False        # the index file was rewritten to drop free space
    redacted: int = 0              # secrets redacted + private spans removed in what this pass read
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class SourceText:
    """A readable memory file: its text plus what to record in ``source_files``."""

    rel: str
    text: str
    size: int
    mtime: float
    sha256: str
    forgotten: tuple[str, ...] = ()   # ids of its tombstoned sections (filled by scan)


def max_file_bytes() -> int:
    """LETHE_MAX_FILE_BYTES, read when a pass runs (never at import: a bad value must not
    break `lethe --help`); a value that is not a positive integer is a UsageError."""
    from .settings import env_value

    return env_value("LETHE_MAX_FILE_BYTES", "int", MAX_FILE_BYTES, least=1)


def read_memory_file(path: Path, rel: str, warnings: list[str], limit: int | None = None) -> SourceText | None:
    """Read one memory file defensively; ``None`` (with a warning) when it must be skipped.
    ``limit``: the largest size read (default ``max_file_bytes()``)."""
    limit = max_file_bytes() if limit is None else limit
    try:
        st = path.stat()
        if st.st_size > limit:
            warnings.append(
                f"skipped {rel}: {st.st_size / 2**20:.1f} MiB is over the {limit / 2**20:.0f} MiB "
                "limit for a memory file (LETHE_MAX_FILE_BYTES)"
            )
            return None
        data = path.read_bytes()
    except OSError as exc:
        warnings.append(f"skipped {rel}: cannot read it ({exc.strerror or exc})")
        return None
    if b"\x00" in data[:BINARY_SNIFF]:
        warnings.append(f"skipped {rel}: looks binary (NUL bytes), not a markdown memory file")
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        text = data.decode("utf-8", errors="replace")
        warnings.append(
            f"{rel}: invalid UTF-8 at byte {exc.start}; decoded with replacement characters"
        )
    return SourceText(rel, text, st.st_size, st.st_mtime, hashlib.sha256(data).hexdigest())


def display_name(rel: str) -> str:
    """``rel`` fit to print: a name that is not valid UTF-8 shows U+FFFD where its bad bytes are."""
    return rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def memory_files(memory_dir: Path, warnings: list[str] | None = None, prefix: str = "") -> list[Path]:
    """Markdown files under ``memory_dir`` (recursively), hidden files and folders excluded.

    Links never lead out of the memory folder: a symlinked file is indexed (under its own
    name) only when its target lies inside the folder, and a symlinked folder is never
    entered (the files of one that points inside are indexed under their real path). A
    link that leads out, or that cannot be resolved, is skipped with a warning (in
    ``warnings``, naming the file as ``prefix`` + its path in the folder)."""
    if not memory_dir.is_dir():
        return []
    warn = warnings.append if warnings is not None else (lambda _msg: None)
    base = memory_dir.resolve()

    def refused(link: Path) -> str | None:
        """Why ``link`` is not followed, or None."""
        try:
            target = link.resolve(strict=True)
        except FileNotFoundError:
            return "a link to nothing"
        except (OSError, RuntimeError):  # a loop, or no permission to follow it
            return "a link that cannot be followed"
        return None if target.is_relative_to(base) else "a link that leads outside the memory folder"

    def unreadable(exc: OSError) -> None:
        warn(f"skipped {display_name(str(exc.filename))}: cannot read it ({exc.strerror or exc})")

    out = []
    # followlinks=False: a linked folder is never entered
    for dirpath, dirnames, filenames in os.walk(memory_dir, onerror=unreadable):
        d = Path(dirpath)
        dirnames[:] = [n for n in dirnames if not n.startswith(".")]
        for n in dirnames:
            why = refused(d / n) if (d / n).is_symlink() else None
            if why:
                warn(f"skipped {prefix}{display_name((d / n).relative_to(memory_dir).as_posix())}: {why}")
        for n in filenames:
            if n.startswith(".") or not n.endswith(".md"):
                continue
            p = d / n
            why = refused(p) if p.is_symlink() else None
            if why:
                warn(f"skipped {prefix}{display_name(p.relative_to(memory_dir).as_posix())}: {why}")
            elif p.is_file():
                out.append(p)
    return sorted(out)


def _stage_entries(chunks: Sequence[tuple[str, Chunk]], vectors: np.ndarray):
    import pyarrow as pa

    from lethe_sql.udfs.embed import EMBED_DIM

    return pa.table(
        {
            "id": [c.id for _, c in chunks],
            "content": [c.content for _, c in chunks],
            "text": [c.text for _, c in chunks],
            "source": [src for src, _ in chunks],
            "heading": [c.heading for _, c in chunks],
            "session_id": [c.session_id for _, c in chunks],
            "position": pa.array([c.position for _, c in chunks], pa.int32()),
            "created_at": pa.array([c.created_at for _, c in chunks], pa.timestamp("us")),
            "dedup_key": [dedup_key(c.text) for _, c in chunks],
            "embedding": pa.FixedSizeListArray.from_arrays(
                pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1)), EMBED_DIM
            ),
        }
    )


def quantize(vecs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int8 rows with one float scale per row: ``v ~= q * scale``."""
    scale = np.maximum(np.abs(vecs).max(axis=1), 1e-12) / 127.0
    q = np.clip(np.rint(vecs / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale.astype(np.float32)


def _stage_tokens(ids: Sequence[str], tokens: Sequence):
    import pyarrow as pa

    from lethe_sql.udfs.embed import EMBED_DIM

    rows = [(i, t) for i, t in zip(ids, tokens) if t is not None and len(t.ids)]
    if not rows:
        return None
    all_vecs = np.concatenate([t.vecs for _, t in rows])
    q, scale = quantize(all_vecs)
    return pa.table(
        {
            "id": [i for i, t in rows for _ in range(len(t.ids))],
            "pos": pa.array(np.concatenate([np.arange(len(t.ids)) for _, t in rows]).astype(np.int16)),
            "token": pa.array(np.concatenate([t.ids for _, t in rows]).astype(np.int32)),
            "v": pa.FixedSizeListArray.from_arrays(pa.array(q.reshape(-1)), EMBED_DIM),
            "scale": pa.array(scale),
        }
    )


def token_index_add(con, ids: Sequence[str], tokens: Sequence) -> None:
    """Store token vectors of new entries and count their wordpieces into ``token_df``."""
    staged = _stage_tokens(ids, tokens)
    if staged is None:
        return
    con.register("_lethe_tok", staged)
    con.execute("INSERT INTO token_vectors SELECT id, pos, token, v, scale FROM _lethe_tok")
    con.execute(
        """INSERT INTO token_df AS d (token, df)
           SELECT token, count(DISTINCT id) FROM _lethe_tok GROUP BY token
           ON CONFLICT (token) DO UPDATE SET df = d.df + excluded.df"""
    )
    con.unregister("_lethe_tok")
    windows = _stage_windows(ids, tokens)
    if windows is not None:
        con.register("_lethe_win", windows)
        con.execute("INSERT OR REPLACE INTO entry_windows SELECT id, n, embedding FROM _lethe_win")
        con.unregister("_lethe_win")


def _stage_windows(ids: Sequence[str], tokens: Sequence):
    """The further windows' vectors of long texts (``TokenVectors.windows``) as rows of
    ``entry_windows``; None when no text has any."""
    import pyarrow as pa

    from lethe_sql.udfs.embed import EMBED_DIM

    rows = [(i, t.windows) for i, t in zip(ids, tokens)
            if t is not None and getattr(t, "windows", None) is not None and len(t.windows)]
    if not rows:
        return None
    return pa.table({
        "id": [i for i, w in rows for _ in range(len(w))],
        "n": pa.array([k + 1 for _, w in rows for k in range(len(w))], pa.int16()),
        "embedding": pa.FixedSizeListArray.from_arrays(
            pa.array(np.concatenate([w for _, w in rows]).astype(np.float32).reshape(-1)), EMBED_DIM),
    })


def token_index_delete(con, ids: Sequence[str]) -> None:
    """Drop the token vectors of ``ids`` and uncount their wordpieces."""
    con.execute(
        """UPDATE token_df SET df = token_df.df - c.n
           FROM (SELECT token, count(DISTINCT id) AS n FROM token_vectors
                 WHERE id IN (SELECT unnest(?::VARCHAR[])) GROUP BY token) AS c
           WHERE token_df.token = c.token""",
        [list(ids)],
    )
    con.execute("DELETE FROM token_df WHERE df <= 0")
    con.execute("DELETE FROM token_vectors WHERE id IN (SELECT unnest(?::VARCHAR[]))", [list(ids)])
    con.execute("DELETE FROM entry_windows WHERE id IN (SELECT unnest(?::VARCHAR[]))", [list(ids)])


def insert_entries(
    con, new: Sequence[tuple[str, Chunk]], vectors: np.ndarray, tokens: Sequence | None, *, context: bool = True
) -> None:
    """Insert new entries with their vectors, index them for BM25 and store their token
    vectors (inside the caller's transaction). The one insert path: indexing and
    ``lethe dedupe --restore`` both use it. ``context``: build their context field now
    (``apply_changes`` passes False and syncs every context it touched at the end)."""
    if not new:
        return
    con.register("_lethe_new", _stage_entries(new, vectors))
    con.execute(
        "INSERT INTO entries (id, content, text, source, heading, session_id, position, created_at, dedup_key, embedding) "
        "SELECT id, content, text, source, heading, session_id, position, created_at, dedup_key, embedding FROM _lethe_new"
    )
    con.unregister("_lethe_new")
    fts_add(con, [c.id for _, c in new])
    if context:
        context_refresh(con, [c.id for _, c in new])
    if tokens is not None:
        token_index_add(con, [c.id for _, c in new], tokens)


def _absorbed_state(con, sources: list[str]) -> tuple[set[str], list[tuple[str, Chunk]]]:
    """Before a pass (``_lethe_wanted`` holds the ids the changed sources will hold):
    (absorbed ids to skip because their keeper stays live, absorbed entries to bring
    back because their keeper goes while they still occur in a source this pass
    leaves alone). A wanted absorbed id whose keeper goes is simply not skipped."""
    rows = con.execute(
        """WITH ids AS MATERIALIZED (SELECT id FROM absorbed UNION SELECT into_id FROM absorbed),
           -- only the absorbed ids and their keepers matter: never hash all entries
           post_occ AS (
               SELECT id FROM entry_sources
               WHERE id IN (SELECT id FROM ids) AND source NOT IN (SELECT unnest($1::VARCHAR[]))
               UNION SELECT id FROM _lethe_wanted WHERE id IN (SELECT id FROM ids)),
           live AS (SELECT id FROM entries WHERE id IN (SELECT id FROM post_occ)),
           present AS (SELECT id FROM entries WHERE id IN (SELECT id FROM ids))
           SELECT a.id, a.into_id IN (SELECT id FROM live) AS keeper_live,
                  a.id IN (SELECT id FROM _lethe_wanted) AS is_wanted,
                  a.id IN (SELECT id FROM post_occ) AS occurs,
                  a.id IN (SELECT id FROM present) AS is_entry
           FROM absorbed AS a""",
        [sources],
    ).fetchall()
    skip = {r[0] for r in rows if r[1]}
    back = [r[0] for r in rows if not r[1] and r[3] and not r[2] and not r[4]]
    revive: list[tuple[str, Chunk]] = []
    if back:
        rows = con.execute(
            """SELECT a.id, o.source, o.position, o.heading, a.text, a.content, a.session_id, a.created_at
               FROM absorbed AS a JOIN (
                   SELECT id, arg_min(source, (source, position)) AS source,
                          arg_min(position, (source, position)) AS position,
                          arg_min(heading, (source, position)) AS heading
                   FROM entry_sources WHERE id IN (SELECT unnest($1::VARCHAR[]))
                     AND source NOT IN (SELECT unnest($2::VARCHAR[]))
                   GROUP BY id) AS o USING (id)
               ORDER BY a.id""",
            [back, sources],
        ).fetchall()
        for i, src, pos, heading, text, content, session_id, created_at in rows:
            revive.append((src, Chunk(pos, heading, content or text, text, i, created_at, session_id)))
    return skip, revive


_LIVE = ("(id IN (SELECT id FROM entry_sources WHERE source NOT IN (SELECT unnest(?::VARCHAR[]))) "
         "OR id IN (SELECT id FROM _lethe_wanted))")


def _duplicates(
    con, sources: list[str], new: Sequence[tuple[str, Chunk]]
) -> tuple[list[tuple[str, Chunk]], list[tuple[str, Chunk, str, float]]]:
    """Split ``new`` into (entries to insert, duplicates to record as absorbed: (source,
    chunk, keeper id, 1.0)). A duplicate has the ``dedup_key`` of a live entry (one the
    changed sources or any other source still holds after this pass; ``_lethe_wanted``
    holds the wanted ids), or of an earlier new entry; the existing entry is always the
    keeper, and an exempt id (``lethe dedupe --restore``) is never a duplicate."""
    from . import dedup
    from .judges import ids_literal

    keys = [dedup_key(c.text) for _, c in new]
    wanted_keys = sorted({k for k in keys if k})
    if not wanted_keys:
        return list(new), []
    keeper: dict[str, str] = {
        k: i for i, k in con.execute(
            f"""SELECT min(id), dedup_key FROM entries
                WHERE dedup_key IN (SELECT unnest(CAST(? AS VARCHAR[]))) AND {_LIVE} GROUP BY dedup_key""",
            [ids_literal(wanted_keys), sources],
        ).fetchall()
    }
    exempt = dedup.exempt_ids(con) if keeper or len(wanted_keys) < len([k for k in keys if k]) else set()
    keep: list[tuple[str, Chunk]] = []
    dups: list[tuple[str, Chunk, str, float]] = []
    for (src, c), k in zip(new, keys):
        if k is None or c.id in exempt:
            keep.append((src, c))
        elif k in keeper and keeper[k] != c.id:
            dups.append((src, c, keeper[k], 1.0))
        else:
            keeper.setdefault(k, c.id)
            keep.append((src, c))
    return keep, dups


def backfill_dedup_keys(con) -> int:
    """Once per index: the ``dedup_key`` of entries written before migration 006."""
    if con.execute("SELECT value FROM meta WHERE key = 'dedup_keys'").fetchone() is not None:
        return 0
    import pyarrow as pa

    rows = con.execute("SELECT id, text FROM entries WHERE dedup_key IS NULL").fetchall()
    with transaction(con):
        if rows:
            con.register("_lethe_keys", pa.table({"id": [r[0] for r in rows],
                                                  "k": [dedup_key(r[1]) for r in rows]}))
            con.execute("UPDATE entries SET dedup_key = k.k FROM _lethe_keys AS k WHERE entries.id = k.id")
            con.unregister("_lethe_keys")
        con.execute("INSERT OR REPLACE INTO meta VALUES ('dedup_keys', '1')")
    return len(rows)


def _record_absorbed_new(con, rows: Sequence[tuple[str, Chunk, str, float]]) -> None:
    """``absorbed`` rows for new entries merged before insertion: (source, chunk, into_id, similarity)."""
    import pyarrow as pa

    con.register(
        "_lethe_absorbed_new",
        pa.table(
            {
                "id": [c.id for _, c, _, _ in rows],
                "into_id": [k for _, _, k, _ in rows],
                "similarity": pa.array([float(x) for _, _, _, x in rows], pa.float64()),
                "text": [c.text for _, c, _, _ in rows],
                "source": [src for src, _, _, _ in rows],
                "content": [c.content for _, c, _, _ in rows],
                "heading": [c.heading for _, c, _, _ in rows],
                "session_id": [c.session_id for _, c, _, _ in rows],
                "created_at": pa.array([c.created_at for _, c, _, _ in rows], pa.timestamp("us")),
                "position": pa.array([c.position for _, c, _, _ in rows], pa.int32()),
            }
        ),
    )
    con.execute(
        """INSERT OR REPLACE INTO absorbed
               (id, into_id, similarity, text, source, absorbed_at, content, heading, session_id, created_at, position)
           SELECT id, into_id, similarity, text, source, current_timestamp, content, heading, session_id,
                  created_at, position FROM _lethe_absorbed_new"""
    )
    con.unregister("_lethe_absorbed_new")


def check_model(con, model_id: str) -> None:
    """Vectors from two models must never mix in one database."""
    from .errors import LetheError

    row = con.execute("SELECT value FROM meta WHERE key = 'embed_model'").fetchone()
    if row is None:
        con.execute("INSERT OR REPLACE INTO meta VALUES ('embed_model', ?)", [model_id])
    elif row[0] != model_id:
        raise LetheError(
            f"this index was embedded with {row[0]} but the current model is {model_id}; "
            "run `lethe index --rebuild` to re-embed"
        )


def apply_changes(
    con,
    embed: Callable[[list[str], Callable[[int], None] | None], tuple[np.ndarray, list | None]],
    changed: dict[str, tuple[SourceText | None, list[Chunk]]],
    progress: Progress | None = None,
    *,
    settings=None,
    report: IndexReport | None = None,
) -> tuple[int, int]:
    """Replace the occurrences of ``changed`` sources and sync ``entries`` with them.

    ``changed`` maps a source name to (its file facts, its chunks). Facts are None
    for a source that is not a file (``MemoryStore.put_documents``) and for a
    removed file (with no chunks); either way no ``source_files`` row remains.
    ``settings.dedup`` turns duplicate merging on (``dedup.py``); ``report`` receives
    ``entries_absorbed``, the revision counts and warnings. Returns (entries inserted,
    entries removed); absorbed entries count in neither.
    """
    from . import dedup, revisions

    backfill_dedup_keys(con)
    wanted: dict[str, tuple[str, Chunk]] = {}
    for src, (_, chunks) in changed.items():
        for c in chunks:
            wanted.setdefault(c.id, (src, c))
    sources = list(changed)
    have = set()
    if wanted:
        have = {
            r[0]
            for r in con.execute(
                "SELECT id FROM entries WHERE id IN (SELECT unnest(?::VARCHAR[]))", [list(wanted)]
            ).fetchall()
        }
    dedup_on = dedup.enabled(settings)
    any_absorbed = con.execute("SELECT count(*) FROM absorbed").fetchone()[0] > 0
    skip: set[str] = set()
    revive: list[tuple[str, Chunk]] = []
    absorbed_new: list[tuple[str, Chunk, str, float]] = []
    if any_absorbed or dedup_on:
        import pyarrow as pa

        con.register("_lethe_wanted", pa.table({"id": pa.array(list(wanted), pa.string())}))
    try:
        if any_absorbed:
            skip, revive = _absorbed_state(con, sources)
        new = [wanted[i] for i in wanted if i not in have and i not in skip] + revive
        if new and dedup_on:
            new, absorbed_new = _duplicates(con, sources, new)
    finally:
        if any_absorbed or dedup_on:
            con.unregister("_lethe_wanted")
    if new:
        total = len(new)
        done = [0]

        def tick(n: int) -> None:
            done[0] += n
            if progress:
                progress("embedding", done[0], total)

        vectors, tokens = embed([c.text for _, c in new], tick)
    else:
        vectors, tokens = np.zeros((0, 384), dtype=np.float32), None
    if report is not None:
        report.entries_absorbed += len(absorbed_new)
    occ_rows = [
        (src, c.position, c.id, c.heading) for src, (_, chunks) in changed.items() for c in chunks
    ]
    warnings = report.warnings if report is not None else []
    horizon = datetime.now() + revisions.FUTURE_SLACK
    for src, (_, chunks) in changed.items():
        future = max((c.created_at for c in chunks if c.created_at and c.created_at > horizon), default=None)
        if future is not None:
            warnings.append(f"{src}: dated {future:%Y-%m-%d}, in the future; indexed as written, but no revision "
                            "is detected to or from it (a supersedes marker still declares one)")
    with transaction(con):
        before = {(r[0], r[1]): r[2] for r in con.execute(
            "SELECT source, position, id FROM entry_sources WHERE source IN (SELECT unnest(?::VARCHAR[]))",
            [sources]).fetchall()}
        con.execute("DELETE FROM entry_sources WHERE source IN (SELECT unnest(?::VARCHAR[]))", [sources])
        if occ_rows:
            import pyarrow as pa

            occ = pa.table(
                {
                    "source": [r[0] for r in occ_rows],
                    "position": pa.array([r[1] for r in occ_rows], pa.int32()),
                    "id": [r[2] for r in occ_rows],
                    "heading": [r[3] for r in occ_rows],
                }
            )
            con.register("_lethe_occ", occ)
            con.execute("INSERT INTO entry_sources SELECT source, position, id, heading FROM _lethe_occ")
            con.unregister("_lethe_occ")
        insert_entries(con, new, vectors, tokens, context=False)
        if absorbed_new:
            _record_absorbed_new(con, absorbed_new)
        # Kept entries whose home section moved: follow their first remaining occurrence.
        con.execute(
            """UPDATE entries SET source = o.source, position = o.position, heading = o.heading
               FROM (SELECT id, arg_min(source, (source, position)) AS source,
                            arg_min(position, (source, position)) AS position,
                            arg_min(heading, (source, position)) AS heading
                     FROM entry_sources
                     WHERE id IN (SELECT id FROM entries WHERE source IN (SELECT unnest(?::VARCHAR[])))
                     GROUP BY id) AS o
               WHERE entries.id = o.id
                 AND entries.source IN (SELECT unnest(?::VARCHAR[]))
                 AND (entries.source <> o.source OR entries.position <> o.position
                      OR entries.heading IS DISTINCT FROM o.heading)""",
            [sources, sources],
        )
        gone = [
            r[0]
            for r in con.execute(
                """SELECT id FROM entries
                   WHERE source IN (SELECT unnest(?::VARCHAR[]))
                     AND id NOT IN (SELECT id FROM entry_sources)""",
                [sources],
            ).fetchall()
        ]
        if gone:
            fts_delete(con, gone)
            token_index_delete(con, gone)
            con.execute("DELETE FROM entries WHERE id IN (SELECT unnest(?::VARCHAR[]))", [gone])
        if any_absorbed or absorbed_new:
            # An absorbed text no file holds any more is forgotten with it; one whose
            # keeper is gone was brought back above (re-inserted or absorbed anew).
            con.execute(
                "DELETE FROM absorbed WHERE id NOT IN (SELECT id FROM entry_sources) "
                "OR into_id NOT IN (SELECT id FROM entries)"
            )
        # The context field of every entry whose home is or was in these sources.
        after = {(r[0], r[1]): r[2] for r in occ_rows}
        moved: dict[str, set] = {}
        for key in set(before) | set(after):
            if before.get(key) != after.get(key):
                moved.setdefault(key[0], set()).add(key[1])
        context_sync(con, sources, [c.id for _, c in new], moved)
        revisions.replace_marks(
            con, sources, [(src, c) for src, (_, chunks) in changed.items() for c in chunks],
            [(src, f) for src, (facts, _) in changed.items() if facts is not None for f in facts.forgotten],
        )
        counts = revisions.sync(con, sources=sources, new=new, vectors=vectors, warnings=warnings,
                                detect=getattr(settings, "revisions", True))
        if report is not None:
            report.revisions_declared = counts["declared"]
            report.revisions_detected += counts["detected"]
        for src, (facts, _) in changed.items():
            if facts is None:
                con.execute("DELETE FROM source_files WHERE path = ?", [src])
            else:
                con.execute(
                    "INSERT OR REPLACE INTO source_files (path, size, mtime, sha256, indexed_at) "
                    "VALUES (?, ?, ?, ?, ?)",
                    [src, facts.size, facts.mtime, facts.sha256, datetime.now()],
                )
    return len(new), len(gone)


def scan(
    con, memory_dir: Path, source_prefix: str, warnings: list[str], only: Iterable[Path] | None = None
) -> tuple[dict[str, tuple[SourceText | None, list[Chunk]]], int, int, int]:
    """Find what changed under ``memory_dir``: (changed, seen, unchanged, skipped)."""
    known = {
        r[0]: (r[1], r[2], r[3])
        for r in con.execute(
            "SELECT path, size, mtime, sha256 FROM source_files WHERE starts_with(path, ?)",
            [source_prefix],
        ).fetchall()
    }
    paths = memory_files(memory_dir, warnings, source_prefix) if only is None else [Path(p) for p in only]
    limit = max_file_bytes()
    changed: dict[str, tuple[SourceText | None, list[Chunk]]] = {}
    seen = unchanged = skipped = 0
    present = set()
    for p in paths:
        rel = source_prefix + p.relative_to(memory_dir).as_posix()
        seen += 1
        try:
            rel.encode("utf-8")
        except UnicodeEncodeError:  # the name is not valid UTF-8: it cannot be a source name
            warnings.append(f"skipped {display_name(rel)}: its name is not valid UTF-8; rename the file to index it")
            skipped += 1
            continue
        present.add(rel)
        try:
            st = p.stat()
        except OSError as exc:
            warnings.append(f"skipped {rel}: {exc.strerror or exc}")
            skipped += 1
            continue
        prev = known.get(rel)
        if prev and prev[0] == st.st_size and prev[1] == st.st_mtime:
            unchanged += 1
            continue
        facts = read_memory_file(p, rel, warnings, limit)
        if facts is None:
            skipped += 1
            continue
        if prev and prev[2] == facts.sha256:
            con.execute("UPDATE source_files SET mtime = ? WHERE path = ?", [facts.mtime, rel])
            unchanged += 1
            continue
        secs = sections(facts.text, rel)
        facts.forgotten = tuple(dict.fromkeys(x.chunk.id for x in secs if x.forgotten))
        changed[rel] = (facts, [x.chunk for x in secs if not x.forgotten])
    if only is None:
        for rel in known:
            if rel not in present:
                changed[rel] = (None, [])
    return changed, seen, unchanged, skipped
