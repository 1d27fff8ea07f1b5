"""Duplicate memories: one entry for the same words, never for different facts.

Exact duplicates never reach this module: an entry id is the content hash of its
indexed text, so the same text written twice is one entry with two rows in
``entry_sources``.

A **duplicate** is a text with the same words in the same order as another, ignoring
case, punctuation, whitespace, markdown formatting and the articles a/an/the
(``markdown.dedup_key``): "Staging DB: `port 5433`." and "the staging db port 5433"
are duplicates. Two texts that differ in anything else (a number, a version, an
identifier, a name, a date, a path, a negation, any word) are different memories,
however close their embeddings: "... listens on port 5433" and "... port 5434" have a
cosine of 0.986, and both are kept (the newer one is a revision of the older,
``revisions.py``). An earlier version of this module merged at cosine >= 0.95 and
hid such updates; the first ``lethe index`` with this version brings back every
memory it merged that this rule keeps apart (:func:`restore_distinct`).

Of duplicates, the entry already in the store is kept (it keeps its learned state);
the newcomer is *absorbed*:

* its row in ``absorbed`` keeps everything needed to bring it back (text, content,
  source, heading, session, created_at) and ``into_id``, the live entry holding it;
* it is not in ``entries``, the FTS tables, ``token_vectors`` or ``token_df``;
* its occurrences stay in ``entry_sources``: the markdown files are never touched,
  and a reindex skips an absorbed id as long as its ``into_id`` is live.

Invariant: every ``absorbed.into_id`` is a live entry. When a keeper disappears (its
section deleted or edited), the entries it absorbed come back in the same
``apply_changes`` pass. An absorbed text that no source holds any more is dropped from
``absorbed`` with it. ``dedup = false`` merges nothing new and un-merges nothing:
``lethe dedupe --restore ID`` does that, and marks the entry exempt (``dedup_exempt``,
migration 003): it is never absorbed again.

``lethe dedupe`` applies the same rule to the whole store (it finds something only
where entries were written with ``dedup = false``): the oldest of each group is kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .db import transaction

TIER_RANK_SQL = "CASE {t} WHEN 'memory' THEN 3 WHEN 'gc' THEN 2 WHEN 'naive' THEN 1 ELSE 0 END"


def enabled(settings) -> bool:
    """Whether writes merge duplicates (``Settings.dedup``)."""
    return settings is not None and bool(getattr(settings, "dedup", True))


# -- reading and writing the store ------------------------------------------------


def fetch_vectors(con, where: str = "TRUE", params: Sequence = ()) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(ids, text lengths, embedding matrix) of the entries matching ``where``, via arrow."""
    tbl = con.execute(
        f"SELECT id, length(text)::BIGINT AS n, embedding FROM entries WHERE embedding IS NOT NULL AND ({where})",
        list(params),
    ).to_arrow_table()
    ids = tbl.column("id").to_pylist()
    lens = tbl.column("n").to_numpy()
    emb = tbl.column("embedding").combine_chunks()
    if len(ids):
        mat = emb.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False).reshape(len(ids), -1)
    else:
        mat = np.zeros((0, 384), dtype=np.float32)
    return ids, lens, mat


def exempt_ids(con) -> set[str]:
    return {r[0] for r in con.execute("SELECT id FROM dedup_exempt").fetchall()}


def absorb_existing(con, merges: Sequence[tuple[str, str, float]]) -> None:
    """Absorb live entries into live keepers: ``merges`` rows are (loser, keeper, similarity).

    Runs inside the caller's transaction; keepers must be in ``entries``. The keeper
    takes the better of both learned states; links to the loser move to the keeper.
    """
    if not merges:
        return
    import pyarrow as pa

    from .fts import fts_delete
    from .ingest import token_index_delete

    losers = [m[0] for m in merges]
    con.register(
        "_lethe_absorb",
        pa.table(
            {
                "id": losers,
                "into_id": [m[1] for m in merges],
                "similarity": pa.array([float(m[2]) for m in merges], pa.float64()),
            }
        ),
    )
    try:
        con.execute(
            """INSERT OR REPLACE INTO absorbed
                   (id, into_id, similarity, text, source, absorbed_at, content, heading, session_id, created_at, position)
               SELECT a.id, a.into_id, a.similarity, e.text, e.source, current_timestamp,
                      e.content, e.heading, e.session_id, e.created_at, e.position
               FROM _lethe_absorb AS a JOIN entries AS e USING (id)"""
        )
        rank_e = TIER_RANK_SQL.format(t="e.tier")
        rank_k = TIER_RANK_SQL.format(t="entries.tier")
        con.execute(
            f"""UPDATE entries SET
                   retrieval_count = greatest(entries.retrieval_count, g.rc),
                   affinity = greatest(entries.affinity, g.aff),
                   last_retrieval_step = CASE WHEN g.step IS NULL THEN entries.last_retrieval_step
                                              ELSE greatest(coalesce(entries.last_retrieval_step, g.step), g.step) END,
                   tier = CASE WHEN g.tier_rank > {rank_k} THEN g.tier ELSE entries.tier END
               FROM (SELECT a.into_id, max(e.retrieval_count) AS rc, max(e.affinity) AS aff,
                            max(e.last_retrieval_step) AS step, max({rank_e}) AS tier_rank,
                            arg_max(e.tier, {rank_e}) AS tier
                     FROM _lethe_absorb AS a JOIN entries AS e USING (id) GROUP BY a.into_id) AS g
               WHERE entries.id = g.into_id"""
        )
        # What the losers held moves to their keepers.
        con.execute(
            """UPDATE absorbed SET into_id = m.into_id
               FROM _lethe_absorb AS m WHERE absorbed.into_id = m.id"""
        )
        for col in ("old_id", "new_id"):
            con.execute(
                f"""INSERT OR IGNORE INTO revisions (old_id, new_id, origin, reason, score, linked_at)
                    SELECT {'m.into_id' if col == 'old_id' else 'r.old_id'}, {'r.new_id' if col == 'old_id' else 'm.into_id'},
                           r.origin, r.reason, r.score, r.linked_at
                    FROM revisions AS r JOIN _lethe_absorb AS m ON r.{col} = m.id"""
            )
        con.execute(
            "DELETE FROM revisions WHERE old_id IN (SELECT id FROM _lethe_absorb) OR new_id IN (SELECT id FROM _lethe_absorb)"
        )
        con.execute("DELETE FROM revisions WHERE old_id = new_id")
        con.execute("DELETE FROM rif_suppression WHERE id IN (SELECT id FROM _lethe_absorb)")
    finally:
        con.unregister("_lethe_absorb")
    fts_delete(con, losers)
    token_index_delete(con, losers)
    con.execute("DELETE FROM entries WHERE id IN (SELECT unnest(?::VARCHAR[]))", [losers])


def absorbed_map(con) -> dict[str, str]:
    """absorbed id -> the live entry holding it (chains followed, cycles cut)."""
    direct = dict(con.execute("SELECT id, into_id FROM absorbed").fetchall())
    out: dict[str, str] = {}
    for a in direct:
        seen = {a}
        t = direct[a]
        while t in direct and t not in seen:
            seen.add(t)
            t = direct[t]
        out[a] = t
    return out


# -- the whole-store pass (`lethe dedupe`) -------------------------------------------


@dataclass
class Pair:
    kept: str
    absorbed: str
    similarity: float
    kept_text: str
    absorbed_text: str


def plan(con) -> list[Pair]:
    """Duplicates (same ``dedup_key``) among the live entries, as ``lethe dedupe`` would
    merge them: in each group the oldest entry is kept (no date counts as oldest; then
    the smaller id). Exempt entries are never absorbed."""
    rows = con.execute(
        """SELECT id, dedup_key, text FROM entries
           WHERE dedup_key IN (SELECT dedup_key FROM entries WHERE dedup_key IS NOT NULL
                               GROUP BY dedup_key HAVING count(*) > 1)
           ORDER BY dedup_key, created_at NULLS FIRST, id"""
    ).fetchall()
    ex = exempt_ids(con)
    pairs: list[Pair] = []
    keeper: dict[str, tuple[str, str]] = {}
    for eid, key, text in rows:
        if key not in keeper:
            keeper[key] = (eid, text)
        elif eid not in ex:
            pairs.append(Pair(keeper[key][0], eid, 1.0, keeper[key][1], text))
    pairs.sort(key=lambda p: (p.kept, p.absorbed))
    return pairs


def apply_plan(con, pairs: Sequence[Pair]) -> int:
    """Absorb the planned losers in one transaction; returns how many were absorbed."""
    if not pairs:
        return 0
    with transaction(con):
        absorb_existing(con, [(p.absorbed, p.kept, p.similarity) for p in pairs])
    return len(pairs)


def list_absorbed(con) -> list[dict]:
    rows = con.execute(
        """SELECT a.id, a.into_id, a.similarity, a.text, a.source, a.absorbed_at,
                  a.id IN (SELECT id FROM entry_sources) AS in_files
           FROM absorbed AS a ORDER BY a.absorbed_at, a.id"""
    ).fetchall()
    return [
        dict(id=r[0], into_id=r[1], similarity=r[2], text=r[3], source=r[4], absorbed_at=r[5], in_files=r[6])
        for r in rows
    ]


def _bring_back(store, rows, *, exempt: bool) -> list[dict]:
    """Re-insert absorbed entries ``rows`` ((id, into_id, text, content, session_id,
    created_at)) at their first occurrence, in one transaction."""
    from .errors import LetheError
    from .fts import context_refresh
    from .ingest import insert_entries
    from .markdown import Chunk

    con = store.con
    todo, out = [], []
    for eid, into_id, text, content, session_id, created_at in rows:
        occ = con.execute(
            "SELECT source, position, heading FROM entry_sources WHERE id = ? ORDER BY source, position LIMIT 1", [eid]
        ).fetchone()
        if occ is None:
            raise LetheError(f"{eid} cannot be restored: no memory file holds its text any more")
        live = con.execute("SELECT count(*) FROM entries WHERE id = ?", [eid]).fetchone()[0] > 0
        todo.append((eid, occ, Chunk(occ[1], occ[2], content or text, text, eid, created_at, session_id), live))
        out.append({"id": eid, "was_in": into_id, "source": occ[0], "exempt": exempt})
    fresh = [(occ[0], chunk) for _, occ, chunk, live in todo if not live]
    vectors, tokens = store._embed([c.text for _, c in fresh]) if fresh else (None, None)
    with transaction(con):
        for eid, *_ in todo:
            con.execute("DELETE FROM absorbed WHERE id = ?", [eid])
            if exempt:
                con.execute("INSERT OR REPLACE INTO dedup_exempt (id, exempt_at) VALUES (?, current_timestamp)", [eid])
        if fresh:
            insert_entries(con, fresh, vectors, tokens, context=False)
            context_refresh(con, [c.id for _, c in fresh])
            from . import revisions

            revisions.sync(con, sources=[], new=fresh, vectors=vectors, warnings=[])
    return out


def restore(store, ident: str) -> dict:
    """Bring an absorbed entry back (``lethe dedupe --restore``): re-embedded and
    re-inserted through the normal insert path, removed from ``absorbed``, and marked
    exempt so that no later write or ``lethe dedupe`` absorbs it again.
    ``ident`` is its id or an unambiguous prefix of it."""
    from .errors import UsageError

    con = store.con
    rows = con.execute(
        """SELECT id, into_id, text, content, session_id, created_at FROM absorbed
           WHERE id = $1 OR (length($1) >= 4 AND starts_with(id, $1)) ORDER BY id""",
        [ident],
    ).fetchall()
    exact = [r for r in rows if r[0] == ident]
    rows = exact or rows
    if not rows:
        raise UsageError(f"no absorbed entry {ident!r}; `lethe dedupe --list` shows them")
    if len(rows) > 1:
        raise UsageError(f"{ident!r} matches {len(rows)} absorbed entries; give more of the id")
    return _bring_back(store, rows[:1], exempt=True)[0]


def restore_distinct(store) -> int:
    """Bring back every absorbed entry whose words differ from its keeper's: what an
    older rule (cosine >= 0.95) merged, this rule keeps apart. Runs once per store
    (``meta.dedup_rule``); returns how many came back."""
    from .markdown import dedup_key

    con = store.con
    if con.execute("SELECT value FROM meta WHERE key = 'dedup_rule'").fetchone() is not None:
        return 0
    rows = con.execute(
        """SELECT a.id, a.into_id, a.text, a.content, a.session_id, a.created_at, k.text
           FROM absorbed AS a JOIN entries AS k ON k.id = a.into_id
           WHERE a.id IN (SELECT id FROM entry_sources) ORDER BY a.id"""
    ).fetchall()
    back = [r[:6] for r in rows if dedup_key(r[2]) != dedup_key(r[6])]
    if back:
        _bring_back(store, back, exempt=False)
    con.execute("INSERT OR REPLACE INTO meta VALUES ('dedup_rule', 'words')")
    return len(back)
