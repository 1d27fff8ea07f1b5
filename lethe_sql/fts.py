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

S = FTS_SCHEMA

_ADD = [
    "DROP TABLE IF EXISTS _fts_tok",
    f"""CREATE TEMP TABLE _fts_tok AS
        SELECT e.id,
               (SELECT coalesce(max(docid), -1) FROM {S}.docs) + row_number() OVER (ORDER BY e.id) AS docid,
               lethe_tokens(e.text) AS toks
        FROM entries AS e
        WHERE e.id IN (SELECT id FROM _fts_ids)
          AND e.id NOT IN (SELECT name FROM {S}.docs)""",
    f"INSERT INTO {S}.docs (docid, name, len) SELECT docid, id, len(toks) FROM _fts_tok",
    "DROP TABLE IF EXISTS _fts_occ",
    "CREATE TEMP TABLE _fts_occ AS SELECT docid, unnest(toks) AS term FROM _fts_tok",
    f"""INSERT INTO {S}.dict (termid, term, df)
        SELECT (SELECT coalesce(max(termid), -1) FROM {S}.dict) + row_number() OVER (ORDER BY term), term, 0
        FROM (SELECT DISTINCT term FROM _fts_occ) AS n
        WHERE NOT EXISTS (SELECT 1 FROM {S}.dict AS d WHERE d.term = n.term)""",
    f"""INSERT INTO {S}.terms (docid, fieldid, termid)
        SELECT o.docid, 0, d.termid FROM _fts_occ AS o JOIN {S}.dict AS d USING (term)""",
    f"""UPDATE {S}.dict SET df = dict.df + c.n
        FROM (SELECT term, count(DISTINCT docid) AS n FROM _fts_occ GROUP BY term) AS c
        WHERE dict.term = c.term""",
    "DROP TABLE _fts_occ",
    "DROP TABLE _fts_tok",
]

_DELETE = [
    "DROP TABLE IF EXISTS _fts_gone",
    f"CREATE TEMP TABLE _fts_gone AS SELECT docid FROM {S}.docs WHERE name IN (SELECT id FROM _fts_ids)",
    f"""UPDATE {S}.dict SET df = dict.df - c.n
        FROM (SELECT termid, count(DISTINCT docid) AS n FROM {S}.terms
              WHERE docid IN (SELECT docid FROM _fts_gone) GROUP BY termid) AS c
        WHERE dict.termid = c.termid""",
    f"DELETE FROM {S}.terms WHERE docid IN (SELECT docid FROM _fts_gone)",
    f"DELETE FROM {S}.docs WHERE docid IN (SELECT docid FROM _fts_gone)",
    f"DELETE FROM {S}.dict WHERE df <= 0",
    "DROP TABLE _fts_gone",
]

_STATS = f"""UPDATE {S}.stats SET
    num_docs = (SELECT count(*) FROM {S}.docs),
    avgdl = (SELECT avg(len) FROM {S}.docs)"""


def _with_ids(con, ids, statements) -> None:
    con.execute("DROP TABLE IF EXISTS _fts_ids")
    con.execute("CREATE TEMP TABLE _fts_ids (id VARCHAR)")
    if ids:
        con.execute("INSERT INTO _fts_ids SELECT unnest(?::VARCHAR[])", [list(ids)])
        for stmt in statements:
            con.execute(stmt)
        con.execute(_STATS)
    con.execute("DROP TABLE _fts_ids")


def fts_add(con, ids) -> None:
    """Index the entries ``ids`` (already inserted into ``entries``)."""
    _with_ids(con, list(ids), _ADD)


def fts_delete(con, ids) -> None:
    """Remove ``ids`` from the index (call before or after deleting them from ``entries``)."""
    _with_ids(con, list(ids), _DELETE)


def fts_add_all(con) -> None:
    """Index every entry not yet in the FTS tables."""
    ids = [r[0] for r in con.execute("SELECT id FROM entries").fetchall()]
    fts_add(con, ids)
