"""Near-duplicate memories: detection (blockwise numpy) and merging.

Exact duplicates never reach this module: an entry id is the content hash of
its indexed text, so the same words written twice are one entry with two rows
in ``entry_sources``.

Near-duplicates are pairs whose embeddings (L2-normalised FLOAT[384]) have an
inner product >= ``Settings.dedup_threshold`` (0.95; 0 or >= 1 disables, as does
``dedup = false``). Of a pair, the LONGER text is kept (ties: the existing entry,
then the older one, then the smaller id); the other is *absorbed*:

* its row in ``absorbed`` keeps everything needed to bring it back (text, content,
  source, heading, session, created_at) and ``into_id``, the live entry holding it;
* it is not in ``entries``, the FTS tables, ``token_vectors`` or ``token_df``;
* its occurrences stay in ``entry_sources``: the markdown files are never touched,
  and a reindex skips an absorbed id as long as its ``into_id`` is live.

Invariant: every ``absorbed.into_id`` is a live entry. When a keeper is itself
absorbed, the rows pointing at it move to the new keeper (an absorbed row keeps
no vector, so its similarity stays the one measured at its merge). When a keeper
disappears (its section deleted or edited), the entries it absorbed come back in
the same ``apply_changes`` pass, re-embedded and checked again against what is
live then. An absorbed text that no source holds any more is dropped from
``absorbed`` with it. Turning dedup off later merges nothing new but un-merges
nothing either: ``--restore`` does that, one entry at a time.

Caution, measured with MiniLM: short texts that differ in one number score at or
above 0.95 ("... listens on port 5433" / "... port 5432": 0.974; "parallel memory
number 2" / "... 3": 0.964). With equal lengths the existing entry is kept, so
such an update is absorbed (reported by ``lethe index``, listed by
``lethe dedupe --list``, never lost from the files).

Learned state, kept simple: when an existing entry is absorbed, its keeper takes
the max of the two ``retrieval_count``/``affinity``/``last_retrieval_step`` and
the better tier (memory > gc > naive > apoptotic); the absorbed entry's
``rif_suppression`` rows are dropped. An entry that comes back starts fresh.

``lethe dedupe --restore ID`` re-inserts an absorbed entry and records its id in
``dedup_exempt`` (migration 003): an exempt entry is never absorbed again, by
writes or by ``lethe dedupe``.

Cost: detection is one arrow fetch of the live embedding matrix (about 3 us a
row: 0.15-0.25 s at 50k entries) and a blockwise float32 matmul, O(N_new x N_live)
for a write and O(N^2 / 2) for ``lethe dedupe``. Measured on the 2-core dev
machine (OpenBLAS, other jobs running): 10k new vectors, empty store 1.0 s;
10k new against 10k live 1.3-1.6 s; 50k new, empty store 14-16 s; 50k against
50k 48 s; 20k against 200k 30-50 s. A write batch of more than ``dedup_max_batch``
(20,000) new entries (the first index of a benchmark corpus) therefore skips
on-write detection with a warning in the ``IndexReport``; ``lethe dedupe`` does
the whole-store pass on demand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

BLOCK_ROWS = 2048   # query rows per matmul block
CHUNK_ROWS = 8192   # base rows per matmul block (2048 x 8192 float32 = 64 MiB of scores)

TIER_RANK_SQL = "CASE {t} WHEN 'memory' THEN 3 WHEN 'gc' THEN 2 WHEN 'naive' THEN 1 ELSE 0 END"


def active_threshold(settings) -> float | None:
    """The threshold in force, or None when dedup is off."""
    if settings is None or not getattr(settings, "dedup", True):
        return None
    t = getattr(settings, "dedup_threshold", None)
    if t is None or not (0.0 < float(t) < 1.0):
        return None
    return float(t)


def near_pairs(
    q: np.ndarray, base: np.ndarray, threshold: float, *, self_pairs: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i, j, similarity) with ``q[i] . base[j] >= threshold``, computed blockwise.

    ``self_pairs``: ``base`` is ``q``; only pairs with ``j > i`` are returned.
    """
    q = np.ascontiguousarray(q, dtype=np.float32)
    base = np.ascontiguousarray(base, dtype=np.float32)
    out_i, out_j, out_s = [], [], []
    nq, nb = len(q), len(base)
    if nq == 0 or nb == 0:
        e = np.zeros(0, dtype=np.int64)
        return e, e, np.zeros(0, dtype=np.float32)
    thr = np.float32(threshold)
    for i0 in range(0, nq, BLOCK_ROWS):
        qb = q[i0 : i0 + BLOCK_ROWS]
        j_start = i0 if self_pairs else 0  # self pairs: only the upper triangle
        for j0 in range(j_start, nb, CHUNK_ROWS):
            s = qb @ base[j0 : j0 + CHUNK_ROWS].T
            # np.nonzero over the whole block costs more than the matmul: look only
            # at the rows whose best score reaches the threshold.
            rows = np.flatnonzero(s.max(axis=1) >= thr)
            if len(rows) == 0:
                continue
            ri, jj = np.nonzero(s[rows] >= thr)
            ii = rows[ri]
            gi, gj = ii + i0, jj + j0
            if self_pairs:
                keep = gj > gi
                ii, jj, gi, gj = ii[keep], jj[keep], gi[keep], gj[keep]
            out_i.append(gi)
            out_j.append(gj)
            out_s.append(s[ii, jj])
    if not out_i:
        e = np.zeros(0, dtype=np.int64)
        return e, e, np.zeros(0, dtype=np.float32)
    return np.concatenate(out_i), np.concatenate(out_j), np.concatenate(out_s)


def resolve(
    pi: np.ndarray,
    pj: np.ndarray,
    ps: np.ndarray,
    key: Callable[[int], tuple],
    exempt: Callable[[int], bool],
    sim: Callable[[int, int], float],
) -> dict[int, tuple[int, float]]:
    """Greedy merge of candidate pairs, most similar first: loser -> (final keeper, similarity).

    A pair merges only while both sides are still live; the side with the larger
    ``key`` keeps; an ``exempt`` loser blocks the merge. When a keeper is absorbed
    later, what it held moves to its own keeper (similarity recomputed with ``sim``).
    """
    into: dict[int, tuple[int, float]] = {}
    held: dict[int, list[int]] = {}
    for k in np.argsort(-ps, kind="stable"):
        a, b, s = int(pi[k]), int(pj[k]), float(ps[k])
        if a in into or b in into:
            continue
        keeper, loser = (a, b) if key(a) > key(b) else (b, a)
        if exempt(loser):
            continue
        into[loser] = (keeper, s)
        moved = held.pop(loser, [])
        for c in moved:
            into[c] = (keeper, sim(c, keeper))
        held.setdefault(keeper, []).extend([loser, *moved])
    return into


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


# Batches up to this size look for their near-duplicates with one scan in SQL and
# fetch only those vectors; larger ones fetch every vector and compare in numpy.
SQL_PREFILTER_MAX = 64
# Slack under the threshold for the SQL prefilter: DuckDB and numpy may round a
# float32 dot product differently; the exact decision is numpy's, on the fetched rows.
_PREFILTER_SLACK = 1e-4


def candidate_ids(con, vectors: np.ndarray, threshold: float) -> list[str]:
    """Ids of entries within ``threshold`` (less a little slack) of any of ``vectors``,
    found by one scan in SQL; the caller re-checks them exactly."""
    from .vectors import vec_literal

    thr = float(threshold) - _PREFILTER_SLACK
    lits = [vec_literal(v) for v in np.asarray(vectors, dtype=np.float32)]
    if not lits:
        return []
    if len(lits) == 1:  # a constant vector: the cast folds once, one plain filtered scan
        rows = con.execute(
            "SELECT id FROM entries WHERE embedding IS NOT NULL "
            "AND array_inner_product(embedding, CAST(? AS FLOAT[384])) >= ?",
            [lits[0], thr],
        ).fetchall()
    else:
        rows = con.execute(
            """WITH n AS MATERIALIZED (SELECT CAST(v AS FLOAT[384]) AS v FROM (SELECT unnest(?::VARCHAR[]) AS v))
               SELECT DISTINCT e.id FROM entries AS e, n
               WHERE e.embedding IS NOT NULL AND array_inner_product(e.embedding, n.v) >= ?""",
            [lits, thr],
        ).fetchall()
    return [r[0] for r in rows]


def exempt_ids(con) -> set[str]:
    return {r[0] for r in con.execute("SELECT id FROM dedup_exempt").fetchall()}


def absorb_existing(con, merges: Sequence[tuple[str, str, float]]) -> None:
    """Absorb live entries into live keepers: ``merges`` rows are (loser, keeper, similarity).

    Runs inside the caller's transaction; keepers must be in ``entries``.
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
        # What the losers held moves to their keepers (absorbed rows keep no vector:
        # their similarity stays the one measured when they were merged).
        con.execute(
            """UPDATE absorbed SET into_id = m.into_id
               FROM _lethe_absorb AS m WHERE absorbed.into_id = m.id"""
        )
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


def plan(con, threshold: float) -> list[Pair]:
    """Near-duplicate pairs over every live entry, as ``lethe dedupe`` would merge them."""
    ids, lens, mat = fetch_vectors(con)
    if len(ids) < 2:
        return []
    pi, pj, ps = near_pairs(mat, mat, threshold, self_pairs=True)
    if len(pi) == 0:
        return []
    involved = sorted({int(x) for x in np.concatenate([pi, pj])})
    meta = {
        r[0]: (r[1], r[2])
        for r in con.execute(
            "SELECT id, epoch(created_at), text FROM entries WHERE id IN (SELECT unnest(?::VARCHAR[]))",
            [[ids[i] for i in involved]],
        ).fetchall()
    }
    ex = exempt_ids(con)

    def key(i: int) -> tuple:
        created = meta[ids[i]][0]
        # longer wins; then older (no date counts as oldest); then the smaller id
        return (int(lens[i]), -(created if created is not None else float("-inf")), tuple(-ord(c) for c in ids[i]))

    into = resolve(pi, pj, ps, key, lambda i: ids[i] in ex, lambda a, b: float(mat[a] @ mat[b]))
    pairs = [
        Pair(ids[k], ids[loser], s, meta[ids[k]][1], meta[ids[loser]][1]) for loser, (k, s) in into.items()
    ]
    pairs.sort(key=lambda p: (-p.similarity, p.kept, p.absorbed))
    return pairs


def apply_plan(con, pairs: Sequence[Pair]) -> int:
    """Absorb the planned losers in one transaction; returns how many were absorbed."""
    if not pairs:
        return 0
    con.execute("BEGIN TRANSACTION")
    try:
        absorb_existing(con, [(p.absorbed, p.kept, p.similarity) for p in pairs])
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
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


def restore(store, ident: str) -> dict:
    """Bring an absorbed entry back (``lethe dedupe --restore``): re-embedded and
    re-inserted through the normal insert path, removed from ``absorbed``, and marked
    exempt so that no later write or ``lethe dedupe`` absorbs it again.
    ``ident`` is its id or an unambiguous prefix of it."""
    from .errors import LetheError, UsageError
    from .ingest import insert_entries
    from .markdown import Chunk

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
    eid, into_id, text, content, session_id, created_at = rows[0]
    occ = con.execute(
        """SELECT source, position, heading FROM entry_sources WHERE id = ?
           ORDER BY source, position LIMIT 1""",
        [eid],
    ).fetchone()
    if occ is None:
        raise LetheError(f"{eid} cannot be restored: no memory file holds its text any more")
    live = con.execute("SELECT count(*) FROM entries WHERE id = ?", [eid]).fetchone()[0] > 0
    chunk = Chunk(occ[1], occ[2], content or text, text, eid, created_at, session_id)
    vectors, tokens = store._embed([text]) if not live else (None, None)
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute("DELETE FROM absorbed WHERE id = ?", [eid])
        con.execute("INSERT OR REPLACE INTO dedup_exempt (id, exempt_at) VALUES (?, current_timestamp)", [eid])
        if not live:
            insert_entries(con, [(occ[0], chunk)], vectors, tokens)
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    return {"id": eid, "was_in": into_id, "source": occ[0], "exempt": True}
