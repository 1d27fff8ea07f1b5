"""The first stage in process: ``lethe_candidates`` over an in-memory copy of its inputs.

The first stage is SQL (``sql/fuse.sql``, ``sql/rif.sql``) and stays the definition any
DuckDB client can call. Run as one prepared statement it costs 20-30 ms at a few
thousand memories whatever the store's size, almost all of it DuckDB's fixed cost per
operator (the plan has ~260): more than the rest of a search together. A connection
that searches again and again (``lethe serve``'s kept reader, the TUI, the Python API
in a loop; the MCP server opens a store per call) instead keeps what the statement reads and does not change between writes
in numpy arrays, and computes the same rows from them in about a millisecond:

* both BM25 fields (``fts_main_entries``, ``lethe_ctx``): every term's postings (doc,
  term frequency), the document lengths, ``num_docs`` and ``avgdl``;
* the vectors ``lethe_dense`` ranks by: each entry's, its windows', its enrichment's.

What changes with every search (tiers, suppression) is read per search by one small
statement over the pool's ids (``_ROWS_SQL``), and the query's terms by
``lethe_query_terms`` itself, so the tokenizer stays the SQL one.

**When the copy is used.** Every write that changes these inputs maintains the FTS
tables of both fields (``lethe_sql.fts``, ``db.rebuild_fts``: an entry's text, vectors
and windows come and go with its postings, enrichment with its context field's), and
those write a fresh ``data_version`` token to ``meta`` in the same transaction
(``bump``). A search reads the token with its query terms: the copy is used only when
it was built at the same token; the first ``BUILD_AFTER`` searches at a token run the
SQL, the next builds the copy (so a one-shot ``lethe search`` never pays for it). Another process
cannot write while this connection holds the file (DuckDB's lock), and the copy is
kept per connection. ``tests/test_mirror.py`` checks the rows equal the statement's,
before and after each kind of write.

Differences from the SQL are float rounding only: sums in another order, float32
inner products accumulated differently (about 1e-7); ranks tie-break on the score
rounded to 9 digits and then the id, as the SQL does.
"""

from __future__ import annotations

import uuid
import weakref
from dataclasses import dataclass

import numpy as np

#: the in-process first stage is used at all (tests and benchmarks switch it off to compare)
ENABLED = True
#: searches at one data version that run the SQL before the copy is built (at 10,000
#: memories a build costs ~0.4 s: a hook's prompt right after each write never pays it)
BUILD_AFTER = 2
#: above this many entries the copy is not built (memory: ~1.5 KB a memory plus postings)
MAX_ENTRIES = 50_000
#: token vectors kept for the judge, at most (int8: ~400 bytes a row)
MAX_TOKEN_ROWS = 300_000
#: the meta key of the token that every write of the first stage's inputs renews
VERSION_KEY = "data_version"


def bump(con) -> None:
    """Renew the data-version token (inside the writer's transaction)."""
    con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [VERSION_KEY, uuid.uuid4().hex])


#: what a search reads besides the copy: the data version, the apoptotic entries (left
#: out of every pool) and the suppression of the query's cue at this step
_STATE_SQL = f"""SELECT (SELECT value FROM meta WHERE key = '{VERSION_KEY}'),
       (SELECT list(id) FROM entries WHERE tier = 'apoptotic'),
       s.ids, s.s  -- two lists: a MAP of a few hundred rows costs 3 ms more
FROM (SELECT list(id) AS ids, list(s) AS s
      FROM lethe_suppression_at(CAST(? AS INTEGER), CAST(? AS BIGINT), decay := CAST(? AS DOUBLE))) AS s"""

#: the entry columns ``pipeline.CANDIDATES_SQL`` joins, for the pool's ids
_ROWS_SQL = """SELECT e.id, e.content, e.text, e.source, e.heading, e.created_at, e.session_id, e.tier
FROM entries AS e
WHERE list_contains(CAST(? AS VARCHAR[]), e.id)"""


class _Field:
    """One BM25 field: postings by term, document names and lengths, and the stats."""

    def __init__(self, con, schema: str, name_rank: dict[str, int]) -> None:
        docs = con.execute(f"SELECT docid, name, len FROM {schema}.docs ORDER BY docid").fetchnumpy()
        self.docid = np.asarray(docs["docid"], dtype=np.int64)
        self.len = np.asarray(docs["len"], dtype=np.float64)
        # each doc's entry position, which is the id order the SQL breaks ties by (-1: no entry)
        self.name_rank = np.asarray([name_rank.get(n, -1) for n in docs["name"]], dtype=np.int64)
        st = con.execute(f"SELECT num_docs, avgdl FROM {schema}.stats").fetchone()
        self.num_docs = float(st[0] or 0) if st else 0.0
        self.avgdl = float(st[1]) if st and st[1] is not None else None
        self.dict = {t: (int(i), int(df)) for t, i, df in con.execute(
            f"SELECT term, termid, df FROM {schema}.dict WHERE df > 0").fetchall()}
        post = con.execute(
            f"""SELECT termid, docid, count(*) AS tf FROM {schema}.terms
                GROUP BY termid, docid ORDER BY termid, docid""").fetchnumpy()
        termid = np.asarray(post["termid"], dtype=np.int64)
        self.p_doc = np.searchsorted(self.docid, np.asarray(post["docid"], dtype=np.int64))
        self.p_tf = np.asarray(post["tf"], dtype=np.float64)
        self.t_ids, self.t_start = np.unique(termid, return_index=True)
        self.t_end = np.r_[self.t_start[1:], len(termid)].astype(np.int64)

    def scores(self, terms) -> tuple[np.ndarray, np.ndarray]:
        """(doc positions, BM25 scores) of the documents holding any of ``terms`` (distinct):
        ``lethe_bm25``'s formula (k1 = 1.2, b = 0.75, log base 10)."""
        if self.avgdl is None:
            return np.zeros(0, np.int64), np.zeros(0)
        docs, parts = [], []
        for t in terms:
            hit = self.dict.get(t)
            if hit is None:
                continue
            termid, df = hit
            j = np.searchsorted(self.t_ids, termid)
            if j >= len(self.t_ids) or self.t_ids[j] != termid:
                continue
            sl = slice(self.t_start[j], self.t_end[j])
            d, tf = self.p_doc[sl], self.p_tf[sl]
            idf = np.log10((self.num_docs - df + 0.5) / (df + 0.5) + 1)
            parts.append(idf * (tf * (1.2 + 1)) / (tf + 1.2 * (1 - 0.75 + 0.75 * (self.len[d] / self.avgdl))))
            docs.append(d)
        if not docs:
            return np.zeros(0, np.int64), np.zeros(0)
        d = np.concatenate(docs)
        uniq, inv = np.unique(d, return_inverse=True)
        return uniq, np.bincount(inv, weights=np.concatenate(parts), minlength=len(uniq))


#: how many entries beyond `depth` the dense list re-ranks exactly (the fast product's
#: float32 sums differ from DuckDB's by a few units in the last place)
_NEAR = 32


def _exact(rows: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``array_inner_product`` of each row with ``q`` to the bit: products summed in
    float32, in order (a BLAS product adds in another order)."""
    if not len(rows):
        return np.zeros(0, np.float32)
    return np.cumsum(rows * q, axis=1, dtype=np.float32)[:, -1]


def _order(score: np.ndarray, rank_of_id: np.ndarray) -> np.ndarray:
    """Positions by score rounded to 9 digits, descending, then by id (the SQL's
    ``ORDER BY round(score, 9) DESC, id``)."""
    return np.lexsort((rank_of_id, -np.round(score, 9)))


@dataclass
class Row:
    id: str
    bm25_rank: int | None
    bm25_score: float
    dense_rank: int | None
    dense_score: float | None
    ctx_rank: int | None
    ctx_score: float
    fused: float


class Mirror:
    """The first stage's inputs of one store at one data version."""

    def __init__(self, con, version) -> None:
        self.version = version
        ent = con.execute("SELECT id, embedding FROM entries ORDER BY id").to_arrow_table()
        self.ids = ent.column("id").to_pylist()
        self.index = {i: k for k, i in enumerate(self.ids)}  # ids sorted: position = id order
        emb = ent.column("embedding").combine_chunks()
        self.has_vec = ~np.asarray(emb.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        dim = emb.type.list_size
        flat = np.asarray(emb.flatten().to_numpy(zero_copy_only=False), dtype=np.float32)
        self.vec = np.zeros((len(self.ids), dim), dtype=np.float32)
        if len(flat):
            self.vec[self.has_vec] = flat.reshape(-1, dim)
        # further vectors of an entry: its windows and its enrichment (lethe_dense's other sides)
        extra = con.execute(
            """SELECT w.id, w.embedding FROM entry_windows AS w JOIN entries AS e USING (id)
               UNION ALL
               SELECT x.id, x.embedding FROM enrichment AS x JOIN entries AS e USING (id)
               WHERE x.embedding IS NOT NULL""").to_arrow_table()
        self.x_pos = np.asarray([self.index[i] for i in extra.column("id").to_pylist()], dtype=np.int64)
        xe = extra.column("embedding").combine_chunks()
        self.x_vec = (np.asarray(xe.flatten().to_numpy(zero_copy_only=False), dtype=np.float32).reshape(-1, dim)
                      if len(self.x_pos) else np.zeros((0, dim), np.float32))
        self._df: dict | None = None
        self._tokens: dict[str, tuple] = {}
        self._token_count = 0
        self.stopwords = frozenset(con.execute("SELECT lethe_stopwords()").fetchone()[0])
        self.text = _Field(con, "fts_main_entries", self.index)
        self.ctx = _Field(con, "lethe_ctx", self.index)

    def token_df(self, con) -> dict:
        """``token_df`` (wordpiece id -> entries holding it), read once per copy."""
        if self._df is None:
            self._df = dict(con.execute("SELECT token, df FROM token_df").fetchall())
        return self._df

    def token_rows(self, con, ids) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The token vectors of ``ids`` as (key: the id's position in ``ids``, token
        position, dequantized vector) rows. An id's vectors never change (the id is the
        hash of its text), so each is read from ``token_vectors`` once and kept, up to
        ``MAX_TOKEN_ROWS`` rows: past that, only the vectors of ``ids`` are kept (the
        whole of this call's rows, however many)."""
        missing = [i for i in ids if i not in self._tokens]
        if missing:
            from .judges import TOKEN_ROWS_SQL, ids_literal, key_codes

            tbl = con.execute(TOKEN_ROWS_SQL, [ids_literal(missing)]).to_arrow_table()
            if self._token_count + tbl.num_rows > MAX_TOKEN_ROWS:
                # make room, keeping what this call reads: an id dropped here would score
                # as one without token vectors (0)
                self._tokens = {i: self._tokens[i] for i in ids if i in self._tokens}
                self._token_count = sum(len(p[2]) for p in self._tokens.values() if p is not None)
            codes, names = key_codes(tbl.column("id"))
            order = np.argsort(codes, kind="stable")
            codes = codes[order]
            v = np.asarray(tbl.column("v").combine_chunks().values, dtype=np.int8).reshape(tbl.num_rows, -1)[order]
            scale = np.asarray(tbl.column("scale").to_numpy(), dtype=np.float32)[order]
            pos = np.asarray(tbl.column("pos").to_numpy(), dtype=np.int64)[order]
            bounds = np.flatnonzero(np.r_[True, np.diff(codes) != 0, True])
            for a, b in zip(bounds[:-1], bounds[1:]):
                self._tokens[names[int(codes[a])]] = (v[a:b], scale[a:b], pos[a:b])
            self._token_count += tbl.num_rows
            for i in missing:  # an entry without token vectors scores 0, as in SQL
                self._tokens.setdefault(i, None)
        parts = [(k, self._tokens.get(i)) for k, i in enumerate(ids)]
        parts = [(k, p) for k, p in parts if p is not None]
        if not parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, self.vec.shape[1]), np.float32)
        keys = np.concatenate([np.full(len(p[2]), k, dtype=np.int64) for k, p in parts])
        pos = np.concatenate([p[2] for _, p in parts])
        from .judges import dequantize

        return keys, pos, dequantize(np.concatenate([p[0] for _, p in parts]), np.concatenate([p[1] for _, p in parts]))

    def fused(self, terms, qvec, k: int, depth: int, w_bm25: float, w_ctx: float, w_dense: float) -> list[Row]:
        """``lethe_fused(q, qvec, k, depth, w_bm25, w_ctx, w_dense)``, with ``terms`` the
        distinct terms of ``lethe_query_terms(q)``."""
        n = len(self.ids)
        lists = {}
        for name, f in (("bm25", self.text), ("ctx", self.ctx)):
            pos, sc = f.scores(terms)
            keep = f.name_rank[pos] >= 0  # a posting of an id no longer in entries: never joins
            pos, sc = pos[keep], sc[keep]
            ent = f.name_rank[pos]
            order = _order(sc, ent)
            lists[name] = (ent[order], sc[order])  # entry positions, best first
        q = np.asarray(qvec, dtype=np.float32)
        # the top `depth` by the best of each entry's vectors: found with a fast product,
        # then ranked by the inner products exactly as DuckDB sums them (_exact)
        best = np.where(self.has_vec, self.vec @ q, -np.inf)
        if len(self.x_pos):
            np.maximum.at(best, self.x_pos, self.x_vec @ q)
        dense_pos = np.flatnonzero(np.isfinite(best))
        near = dense_pos[np.argsort(-best[dense_pos], kind="stable")[:depth + _NEAR]]
        exact_best = np.where(self.has_vec[near], _exact(self.vec[near], q), -np.inf)
        if len(self.x_pos):
            slot = np.full(n, -1, dtype=np.int64)
            slot[near] = np.arange(len(near))
            sel = np.flatnonzero(slot[self.x_pos] >= 0)
            np.maximum.at(exact_best, slot[self.x_pos[sel]], _exact(self.x_vec[sel], q))
        d_order = near[np.lexsort((near, -exact_best.astype(np.float64)))][:depth]
        d_score = dict(zip(near.tolist(), exact_best.astype(np.float64).tolist()))
        cand = set(lists["bm25"][0][:depth].tolist()) | set(d_order.tolist())
        if w_ctx != 0:
            cand |= set(lists["ctx"][0][:depth].tolist())
        if not cand:
            return []
        c = np.fromiter(sorted(cand), dtype=np.int64)
        cols = {}
        for name in ("bm25", "ctx"):
            ent, sc = lists[name]
            rank = np.zeros(n, dtype=np.int64)
            score = np.zeros(n)
            rank[ent] = np.arange(1, len(ent) + 1)
            score[ent] = sc
            cols[name] = (rank[c], score[c])
        d_rank = np.zeros(n, dtype=np.int64)
        d_rank[d_order] = np.arange(1, len(d_order) + 1)
        dr = d_rank[c]
        # coalesce(d.score, the entry's own cosine)
        own = np.where(self.has_vec[c], _exact(self.vec[c], q), np.nan).astype(np.float64)
        ds = np.asarray([d_score[int(e)] if r else o for e, r, o in zip(c, dr, own)], dtype=np.float64)

        def z(x: np.ndarray) -> np.ndarray:
            ok = ~np.isnan(x)
            if not ok.any():
                return np.zeros_like(x)
            sd = x[ok].std()
            out = (x - x[ok].mean()) / sd if sd != 0 else np.zeros_like(x)
            return np.where(np.isnan(out), 0.0, out)

        total = abs(w_bm25) + abs(w_ctx) + abs(w_dense)
        fused = (w_bm25 * z(cols["bm25"][1]) + w_ctx * z(cols["ctx"][1]) + w_dense * z(ds)) / total
        order = _order(fused, c)[:k]
        out = []
        for i in order:
            e = int(c[i])
            br, cr, dk = int(cols["bm25"][0][i]), int(cols["ctx"][0][i]), int(dr[i])
            out.append(Row(
                id=self.ids[e], bm25_rank=br or None, bm25_score=float(cols["bm25"][1][i]),
                dense_rank=dk or None, dense_score=None if np.isnan(ds[i]) else float(ds[i]),
                ctx_rank=cr or None, ctx_score=float(cols["ctx"][1][i]), fused=float(fused[i]),
            ))
        return out


_NEVER = object()


def current(con) -> "Mirror | None":
    """The copy of ``con``'s store when it is up to date (one read of the data version),
    else None."""
    st = _STATES.get(con) if ENABLED else None
    if st is None or st.mirror is None:
        return None
    row = con.execute(f"SELECT value FROM meta WHERE key = '{VERSION_KEY}'").fetchone()
    return st.mirror if (row[0] if row else None) == st.mirror.version else None


class _State:
    __slots__ = ("seen", "searches", "mirror")

    def __init__(self) -> None:
        self.seen = _NEVER   # the data version of the last search on this connection
        self.searches = 0    # searches run by the SQL at that version
        self.mirror = None   # the copy, when one was built


_STATES: "weakref.WeakKeyDictionary[object, _State]" = weakref.WeakKeyDictionary()


def query_terms(con, m: "Mirror", text: str) -> list[str]:
    """The distinct terms of ``lethe_query_terms(text)``: for ASCII text the same rule in
    Python (``cues.tokens``, the stopwords read from ``lethe_stopwords()``), else the macro
    itself (SQL's ``lower`` and Python's differ outside ASCII)."""
    if text.isascii():
        from .cues import tokens

        toks = tokens(text)
        terms = [t for t in toks if t not in m.stopwords] or toks
    else:
        terms = con.execute("SELECT lethe_query_terms(?)", [text]).fetchone()[0] or []
    return list(dict.fromkeys(terms))


def candidates(con, text: str, qvec, *, k: int, depth: int, cue: int, step: int, shape: dict) -> list[dict] | None:
    """``lethe_candidates``' rows (``pipeline.CANDIDATES_SQL``'s columns) from the copy,
    or None when the SQL must run: the copy is off or missing, out of date, or the
    fusion is RRF. ``shape``: ``pipeline.candidate_shape``'s settings."""
    if not ENABLED or shape.get("rrf"):
        return None
    total = abs(shape["w_bm25"]) + abs(shape["w_ctx"]) + abs(shape["w_dense"])
    if total == 0:
        return None
    version, apoptotic, s_ids, s_val = con.execute(_STATE_SQL, [int(cue), int(step), float(shape["decay"])]).fetchone()
    st = _STATES.get(con)
    if st is None:
        st = _STATES[con] = _State()
    m = st.mirror
    if m is None or m.version != version:
        st.mirror = None
        if st.seen != version:
            st.seen, st.searches = version, 0
        st.searches += 1
        if st.searches <= BUILD_AFTER:
            return None  # the SQL: a one-shot search, or a write after every search or two, never builds
        if con.execute("SELECT count(*) FROM entries").fetchone()[0] > MAX_ENTRIES:
            return None
        m = st.mirror = Mirror(con, version)
    rows = m.fused(query_terms(con, m, text), qvec, 2 * max(k, depth), max(k, depth),
                   shape["w_bm25"], shape["w_ctx"], shape["w_dense"])
    gone = set(apoptotic or ())
    supp = dict(zip(s_ids or (), s_val or ()))
    alpha = float(shape["alpha"])
    rows = [r for r in rows if r.id not in gone]
    sup = np.asarray([float(supp.get(r.id, 0.0)) for r in rows])
    adj = np.asarray([r.fused for r in rows]) - alpha * sup
    idr = np.asarray([m.index[r.id] for r in rows], dtype=np.int64)  # the SQL's tie-break: the id
    order = _order(adj, idr)[:k] if rows else []
    if not len(order):
        return []
    from .judges import ids_literal

    pick = [rows[int(i)] for i in order]
    extra = {r[0]: r for r in con.execute(_ROWS_SQL, [ids_literal([r.id for r in pick])]).fetchall()}
    out = []
    for rank, i in enumerate(order, 1):
        r, e = rows[int(i)], extra.get(rows[int(i)].id)
        if e is None:  # gone since the copy was built: cannot happen at the same data version
            return None
        out.append({"id": r.id, "bm25_rank": r.bm25_rank, "bm25_score": r.bm25_score,
                    "dense_rank": r.dense_rank, "dense_score": r.dense_score,
                    "ctx_rank": r.ctx_rank, "ctx_score": r.ctx_score,
                    "fused": r.fused, "suppression": float(sup[int(i)]), "adjusted": float(adj[int(i)]),
                    "pool_rank": rank,
                    "content": e[1], "text": e[2], "source": e[3], "heading": e[4],
                    "created_at": e[5], "session_id": e[6], "tier": e[7]})
    return out
