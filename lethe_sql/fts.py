"""Incremental maintenance of the FTS tables of ``entries``.

``PRAGMA create_fts_index`` builds ``fts_main_entries.{docs,terms,dict,stats}``
once and never updates them. These statements keep the same tables current
as entries come and go, so BM25 never needs a full rebuild: new documents get
the next docids, new terms the next termids, document frequencies move by the
number of documents added or removed, and the stats row is recomputed.
``tests/test_fts_incremental.py`` checks that scores after any series of adds
and deletes equal those of a full rebuild.

Both functions take ids from a temporary table the caller filled, and run
inside the caller's transaction.
"""

from __future__ import annotations

from .db import FTS_SCHEMA
from .mirror import bump

S = FTS_SCHEMA
CTX = "lethe_ctx"  # the context field's index (migrations/004_context.sql)


def _add_statements(schema: str, table: str) -> list[str]:
    """Index the rows of ``table`` (id, text) whose ids are in ``_fts_ids`` into ``schema``."""
    return [
        "DROP TABLE IF EXISTS _fts_tok",
        f"""CREATE TEMP TABLE _fts_tok AS
            SELECT e.id,
                   (SELECT coalesce(max(docid), -1) FROM {schema}.docs) + row_number() OVER (ORDER BY e.id) AS docid,
                   lethe_tokens(e.text) AS toks
            FROM {table} AS e
            WHERE e.id IN (SELECT id FROM _fts_ids)
              AND e.id NOT IN (SELECT name FROM {schema}.docs)""",
        f"INSERT INTO {schema}.docs (docid, name, len) SELECT docid, id, len(toks) FROM _fts_tok",
        "DROP TABLE IF EXISTS _fts_occ",
        "CREATE TEMP TABLE _fts_occ AS SELECT docid, unnest(toks) AS term FROM _fts_tok",
        f"""INSERT INTO {schema}.dict (termid, term, df)
            SELECT (SELECT coalesce(max(termid), -1) FROM {schema}.dict) + row_number() OVER (ORDER BY term), term, 0
            FROM (SELECT DISTINCT term FROM _fts_occ) AS n
            WHERE NOT EXISTS (SELECT 1 FROM {schema}.dict AS d WHERE d.term = n.term)""",
        f"""INSERT INTO {schema}.terms (docid, fieldid, termid)
            SELECT o.docid, 0, d.termid FROM _fts_occ AS o JOIN {schema}.dict AS d USING (term)""",
        f"""UPDATE {schema}.dict SET df = dict.df + c.n
            FROM (SELECT term, count(DISTINCT docid) AS n FROM _fts_occ GROUP BY term) AS c
            WHERE dict.term = c.term""",
        "DROP TABLE _fts_occ",
        "DROP TABLE _fts_tok",
    ]


def _delete_statements(schema: str) -> list[str]:
    return [
        "DROP TABLE IF EXISTS _fts_gone",
        f"CREATE TEMP TABLE _fts_gone AS SELECT docid FROM {schema}.docs WHERE name IN (SELECT id FROM _fts_ids)",
        f"""UPDATE {schema}.dict SET df = dict.df - c.n
            FROM (SELECT termid, count(DISTINCT docid) AS n FROM {schema}.terms
                  WHERE docid IN (SELECT docid FROM _fts_gone) GROUP BY termid) AS c
            WHERE dict.termid = c.termid""",
        f"DELETE FROM {schema}.terms WHERE docid IN (SELECT docid FROM _fts_gone)",
        f"DELETE FROM {schema}.docs WHERE docid IN (SELECT docid FROM _fts_gone)",
        f"DELETE FROM {schema}.dict WHERE df <= 0",
        "DROP TABLE _fts_gone",
    ]


def _stats(schema: str) -> str:
    return f"""UPDATE {schema}.stats SET
    num_docs = (SELECT count(*) FROM {schema}.docs),
    avgdl = (SELECT avg(len) FROM {schema}.docs)"""


_ADD = _add_statements(S, "entries")
_DELETE = _delete_statements(S)


def _with_ids(con, ids, statements, schema: str = S) -> None:
    con.execute("DROP TABLE IF EXISTS _fts_ids")
    con.execute("CREATE TEMP TABLE _fts_ids (id VARCHAR)")
    if ids:
        con.execute("INSERT INTO _fts_ids SELECT unnest(?::VARCHAR[])", [list(ids)])
        for stmt in statements:
            con.execute(stmt)
        con.execute(_stats(schema))
        bump(con)  # the in-process first stage's copy is out of date (lethe_sql.mirror)
    con.execute("DROP TABLE _fts_ids")


def fts_add(con, ids) -> None:
    """Index the entries ``ids`` (already inserted into ``entries``)."""
    _with_ids(con, list(ids), _ADD)


def fts_delete(con, ids) -> None:
    """Remove ``ids`` from the index (call before or after deleting them from ``entries``),
    their context rows and their context-field postings with them."""
    ids = list(ids)
    _with_ids(con, ids, _DELETE)
    context_delete(con, ids)


def fts_add_all(con) -> None:
    """Index every entry not yet in the FTS tables."""
    ids = [r[0] for r in con.execute("SELECT id FROM entries").fetchall()]
    fts_add(con, ids)


# -- the context field --------------------------------------------------------
#
# An entry's context is its own text with the texts of its neighbours: the
# occurrences up to two positions before and after its home occurrence
# (entries.source, entries.position) in entry_sources, kept only when they belong
# to the same session (an entry without a session has no neighbours). The window
# (2) was chosen on the tune half of LoCoMo dev7 (1: .586, 2: .603, 3: .594 NDCG@10
# for the default search); changing it needs context_rebuild(). An id is the hash of
# its text, so a context changes only when the entry's home moves or the
# occurrences around it change: both happen only to the sources a pass rewrites.
# ``context_sync`` recomputes exactly those; deletions go through ``fts_delete``.
# ``tests/test_context.py`` checks incremental maintenance == a rebuild.

#: the context window: the occurrences this many positions before and after an entry's home
CONTEXT_WINDOW = 2

_CONTEXT_ROWS = f"""
WITH
    home AS (SELECT id, source, position, session_id, text FROM entries
             WHERE id IN (SELECT id FROM _fts_ids)),
    parts AS (
        SELECT h.id, o.position - h.position AS off, coalesce(e.text, a.text) AS text
        FROM home AS h
        JOIN entry_sources AS o
          ON o.source = h.source AND o.position BETWEEN h.position - {CONTEXT_WINDOW} AND h.position + {CONTEXT_WINDOW}
             AND o.position <> h.position
        LEFT JOIN entries AS e ON e.id = o.id
        LEFT JOIN absorbed AS a ON a.id = o.id
        WHERE h.session_id IS NOT NULL
          AND coalesce(e.session_id, a.session_id) = h.session_id
          AND coalesce(e.text, a.text) IS NOT NULL
        UNION ALL
        SELECT id, 0 AS off, text FROM home
        UNION ALL  -- `lethe enrich` (migrations/005_enrichment.sql): indexed beside the text
        SELECT x.id, 3 AS off, arg_max(x.text, x.created_at) FROM enrichment AS x
        WHERE x.id IN (SELECT id FROM home) GROUP BY x.id
    )
SELECT h.id, h.source, h.position, string_agg(p.text, chr(10) ORDER BY p.off) AS text
FROM home AS h JOIN parts AS p USING (id)
GROUP BY h.id, h.source, h.position"""

_CTX_DELETE = _delete_statements(CTX) + ["DELETE FROM entry_context WHERE id IN (SELECT id FROM _fts_ids)"]
_CTX_ADD = [f"INSERT INTO entry_context (id, source, position, text) {_CONTEXT_ROWS}"] + _add_statements(
    CTX, "entry_context"
)


def context_delete(con, ids) -> None:
    """Drop the context rows and postings of ``ids``."""
    _with_ids(con, list(ids), _CTX_DELETE, CTX)


def context_refresh(con, ids) -> None:
    """(Re)build the context of ``ids``: those in ``entries`` get a fresh row and postings."""
    _with_ids(con, list(ids), _CTX_DELETE + _CTX_ADD, CTX)


def context_sync(con, sources, ids=(), changed: dict | None = None) -> None:
    """After a pass rewrote ``sources``: rebuild the context of ``ids`` (new entries) and of
    every entry whose context may have changed. ``changed`` maps a source to the positions
    whose occurrence changed in this pass; then only the entries within ``CONTEXT_WINDOW``
    of one of those, or whose home moved, are rebuilt (an append to a day's file touches
    the last two, not all of them). Without ``changed``, every entry whose home is or was
    in ``sources``."""
    if changed is None:
        stale = {
            r[0]
            for r in con.execute(
                """SELECT id FROM entries WHERE source IN (SELECT unnest($1::VARCHAR[]))
                   UNION SELECT id FROM entry_context WHERE source IN (SELECT unnest($1::VARCHAR[]))""",
                [list(sources)],
            ).fetchall()
        }
    else:
        pairs = [(src, p) for src, ps in changed.items() for p in ps]
        stale = {
            r[0]
            for r in con.execute(
                f"""WITH ch AS (SELECT unnest($2::VARCHAR[]) AS source, unnest($3::INTEGER[]) AS position)
                    SELECT e.id FROM entries AS e LEFT JOIN entry_context AS c USING (id)
                    WHERE e.source IN (SELECT unnest($1::VARCHAR[]))
                      AND (c.id IS NULL OR c.source IS DISTINCT FROM e.source OR c.position IS DISTINCT FROM e.position
                           OR EXISTS (SELECT 1 FROM ch WHERE ch.source = e.source
                                      AND abs(ch.position - e.position) <= {CONTEXT_WINDOW}))
                    UNION
                    SELECT c.id FROM entry_context AS c JOIN entries AS e USING (id)
                    WHERE c.source IN (SELECT unnest($1::VARCHAR[]))
                      AND (e.source IS DISTINCT FROM c.source OR e.position IS DISTINCT FROM c.position)""",
                [list(sources), [p[0] for p in pairs], [int(p[1]) for p in pairs]],
            ).fetchall()
        }
    stale.update(ids)
    if stale:
        context_refresh(con, sorted(stale))


def context_rebuild(con) -> None:
    """Rebuild the whole context field from ``entries`` and ``entry_sources``."""
    con.execute("DELETE FROM entry_context")
    for t in ("docs", "terms", "dict"):
        con.execute(f"DELETE FROM {CTX}.{t}")
    bump(con)
    ids = [r[0] for r in con.execute("SELECT id FROM entries").fetchall()]
    if ids:
        context_refresh(con, ids)
    else:
        con.execute(_stats(CTX))
