"""Second-stage judges: what reorders the candidate pool, and what RIF learns from.

Two judges exist:

* ``cross-encoder``: the ``rerank(query, passage)`` UDF (ms-marco-MiniLM-L-6-v2 on
  onnxruntime), one batched call per search; its scores are logits.
* ``late-interaction``: MaxSim over the bi-encoder's token vectors stored at index
  time (``token_vectors``): for each query token its best inner product with any
  token of a span of the entry (``SPAN`` token positions), IDF-weighted mean over
  query tokens, and the best span's score for the entry. ``sql/judge.sql``
  defines it as the macro ``lethe_maxsim``; the search runs the same formula in
  numpy over the pool's token vectors (DuckDB's ``array_inner_product`` over a
  cross product costs ~30 ms for a 30-entry pool, numpy well under 1 ms).
  ``tests/test_judges.py`` checks both give the same scores.

The late-interaction judge is not used alone: the pipeline blends its z-scored
score with the first stage's z-scored context-field BM25 (``pipeline.blend``,
weights in ``Settings.blend_*``); over the same pool MaxSim alone scores .573
NDCG@10 on the LoCoMo dev7 tune half, the blend .606 (bench/results/default-search.md).

Each judge also maps its scores to a logit scale for the learning rules
(``sigmoid(-logit)`` is how badly an entry lost): cross-encoder scores are
logits already; late-interaction scores are z-scored within the pool.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .resources import sql_constant
from .vectors import vec_literal


@dataclass(frozen=True)
class QueryEncoding:
    """One forward pass of the bi-encoder over the query."""

    text: str
    vec: np.ndarray
    tok_ids: np.ndarray
    tok_vecs: np.ndarray

    @property
    def vec_text(self) -> str:
        return vec_literal(self.vec)


def encode_query(embedder, text: str) -> QueryEncoding:
    if hasattr(embedder, "encode_full"):
        vecs, toks = embedder.encode_full([text], windows=False)  # a query: as the model reads it
        t = toks[0]
        return QueryEncoding(text, vecs[0], t.ids, t.vecs)
    vec = embedder.encode([text])[0]
    return QueryEncoding(text, vec, np.zeros(0, np.int32), np.zeros((0, vec.shape[0]), np.float32))


def ids_literal(ids: Sequence[str]) -> str:
    """Entry ids (hex content hashes) as DuckDB ``VARCHAR[]`` text; binding a Python
    list costs ~7 ms for 30 ids, text well under 1 ms. Anything but hex is refused."""
    for i in ids:
        if not i or not all(c in "0123456789abcdef" for c in i):
            raise ValueError(f"not an entry id: {i!r}")
    return "[" + ",".join(ids) + "]"


def _zscore(x: np.ndarray, eps: float = 1e-9) -> np.ndarray:
    """(x - mean) / sd over ``x``; zeros when there is one value or the sd is at most ``eps``."""
    if len(x) < 2:
        return np.zeros_like(x)
    sd = float(x.std())
    return (x - x.mean()) / sd if sd > eps else np.zeros_like(x)


def key_codes(column) -> tuple[np.ndarray, list]:
    """An Arrow string column as (integer codes, distinct values): ``max_per_key`` groups
    integers about twice as fast as Python strings."""
    d = column.combine_chunks().dictionary_encode()
    return d.indices.to_numpy(zero_copy_only=False), d.dictionary.to_pylist()


#: the stored token vectors of some entries (one ``VARCHAR[]`` parameter: ``ids_literal``).
#: list_contains filters inside the scan; ``IN (SELECT unnest(...))`` builds a semi-join and
#: costs ~2.5x as much here (35 vs 14 ms for 30 ids at 10k entries). No ORDER BY: sorting
#: the rows with their 384-byte vectors cost 6 ms of 7 for a 100-entry pool.
TOKEN_ROWS_SQL = "SELECT id, v, scale, pos FROM token_vectors WHERE list_contains(CAST(? AS VARCHAR[]), id)"


def dequantize(v: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """int8 token vectors (rows x 384) times their per-row ``scale``, as float32."""
    out = np.asarray(v, dtype=np.float32).reshape(len(scale), -1)
    out *= np.asarray(scale, dtype=np.float32)[:, None]
    return out


def token_rows(tbl) -> np.ndarray:
    """The dequantized token vectors (rows x 384, float32) of an Arrow table with columns
    ``v`` (TINYINT[384]) and ``scale``."""
    return dequantize(tbl.column("v").combine_chunks().values, tbl.column("scale").to_numpy())


def max_per_key(keys: np.ndarray, v: np.ndarray, qtoks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Late interaction's inner step: for every distinct key (one per token row, in any
    order), the best inner product of each query token with that key's rows.
    Returns (distinct keys, best: keys x query tokens)."""
    uniq, inv = np.unique(keys, return_inverse=True)
    order = np.argsort(inv, kind="stable")
    sims = (v @ qtoks.T)[order]  # (rows, query tokens), grouped by key
    starts = np.flatnonzero(np.r_[True, np.diff(inv[order]) != 0])
    return uniq, np.maximum.reduceat(sims, starts, axis=0)


#: token positions per span of a long memory: the late-interaction score of an entry is
#: its best span's; the model's window, written once as ``lethe_span()`` in sql/judge.sql
SPAN = sql_constant("lethe_span")
#: spans one entry can have: token positions are SMALLINT
MAX_SPANS = 32767 // SPAN + 1


def token_idf(n: int, df: dict, tokens) -> np.ndarray:
    """The query tokens' IDF weights of late interaction (``lethe_maxsim``'s ``w``), from
    ``n`` entries and the tokens' document frequencies ``df``; the single-project and
    cross-project judges both use it."""
    d = np.array([df.get(int(t), 0) for t in tokens], dtype=np.float64)
    return np.log((n - d + 0.5) / (d + 0.5) + 1.0)


def best_span_scores(keys: np.ndarray, tbl, qtoks: np.ndarray, w: np.ndarray) -> dict[int, float]:
    """The late-interaction score per key (integer ``keys``, one per token row of ``tbl``,
    an Arrow table with ``v``, ``scale`` and ``pos``): ``span_scores`` of its rows."""
    return span_scores(keys, tbl.column("pos").to_numpy(), token_rows(tbl), qtoks, w)


def span_scores(keys: np.ndarray, pos: np.ndarray, rows: np.ndarray, qtoks: np.ndarray, w: np.ndarray) -> dict[int, float]:
    """The late-interaction score per key (integer ``keys``, one per token row; ``pos`` the
    rows' token positions, ``rows`` their dequantized vectors): each span's IDF-weighted
    MaxSim (weights ``w`` per query token in ``qtoks``), and the best span's for the key.
    The formula of ``lethe_maxsim``; the single-project and cross-project judges both use it."""
    span = np.asarray(pos).astype(np.int64) // SPAN
    uniq, best = max_per_key(keys.astype(np.int64) * MAX_SPANS + span, rows, qtoks)
    out: dict[int, float] = {}
    for k, sc in zip(uniq // MAX_SPANS, best @ w / w.sum()):
        k = int(k)
        out[k] = max(out.get(k, float("-inf")), float(sc))
    return out


class LateInteractionJudge:
    name = "late-interaction"
    #: adaptive depth off: always judge the whole first-stage pool (k_deep), in one batch.
    #: Scoring 100 candidates costs a few ms more than 30; on the LoCoMo tune half it beat
    #: the adaptive 0.55 (mean cosine of best-matching tokens) by .008 NDCG@10
    #: (bench/results/default-search.md). ``rerank_threshold`` = 0.55 restores adaptive depth.
    default_threshold = math.inf
    #: the final order blends this judge's score with the first stage's (pipeline.blend)
    blend = True

    def __init__(self, idf: bool = True) -> None:
        self.idf = idf

    def available(self, con) -> bool:
        return con.execute("SELECT count(*) > 0 FROM token_vectors LIMIT 1").fetchone()[0]

    def weights(self, con, enc: QueryEncoding) -> np.ndarray:
        from .mirror import current

        return self._weights(con, enc, current(con))

    def _weights(self, con, enc: QueryEncoding, m) -> np.ndarray:
        if not self.idf or len(enc.tok_ids) == 0:
            return np.ones(len(enc.tok_ids), dtype=np.float64)
        if m is not None:  # the in-process copy of this data version (lethe_sql.mirror)
            return token_idf(max(len(m.ids), 1), m.token_df(con), enc.tok_ids)
        n = con.execute("SELECT greatest(count(*), 1) FROM entries").fetchone()[0]
        toks = sorted({int(t) for t in enc.tok_ids})
        df = dict(
            con.execute(
                "SELECT token, df FROM token_df WHERE list_contains(CAST(? AS INTEGER[]), token)",
                ["[" + ",".join(map(str, toks)) + "]"],
            ).fetchall()
        )
        return token_idf(n, df, enc.tok_ids)

    def score(self, con, enc: QueryEncoding, ids: Sequence[str]) -> dict[str, float]:
        if not ids or len(enc.tok_ids) == 0:
            return {i: 0.0 for i in ids}
        from .mirror import current

        m = current(con)
        if m is not None:  # token vectors kept in process (an id's vectors never change)
            keys, pos, rows = m.token_rows(con, ids)
            w = self._weights(con, enc, m)
            found = span_scores(keys, pos, rows, enc.tok_vecs, w) if len(keys) else {}
            return {i: found.get(k, 0.0) for k, i in enumerate(ids)}
        # max_per_key groups the rows in numpy. to_arrow_table, not arrow(): reading its
        # RecordBatchReader cost ~1.5 ms more for ~4,000 rows.
        tbl = con.execute(TOKEN_ROWS_SQL, [ids_literal(ids)]).to_arrow_table()
        w = self._weights(con, enc, None)
        out = {i: float("-inf") for i in ids}
        if tbl.num_rows == 0:
            return {i: 0.0 for i in ids}
        codes, names = key_codes(tbl.column("id"))
        for k, s in best_span_scores(codes, tbl, enc.tok_vecs, w).items():
            out[names[k]] = s
        return {i: (0.0 if s == float("-inf") else s) for i, s in out.items()}

    def logits(self, scores: np.ndarray) -> np.ndarray:
        return _zscore(np.asarray(scores, dtype=np.float64))

    def sql(self) -> str:
        """The pure-SQL statement of the same score (for explain and the equality test)."""
        return "SELECT id, score FROM lethe_maxsim(?, ?, ?, idf := ?)"


class CrossEncoderJudge:
    name = "cross-encoder"
    default_threshold = 4.0
    #: its logits are blended with the first stage's context BM25 and the query's cues
    #: (``pipeline.blend``, the same weights as late interaction's), not put in their
    #: place: on LoCoMo those signals carry much of the gain, which a cross-encoder alone
    #: would drop. The weights were chosen with the late-interaction judge; no
    #: cross-encoder can be installed offline here to choose its own.
    blend = True

    def available(self, con) -> bool:
        return True

    def score(self, con, enc: QueryEncoding, ids: Sequence[str]) -> dict[str, float]:
        if not ids:
            return {}
        rows = con.execute(
            "SELECT id, rerank(?, text) FROM entries WHERE list_contains(CAST(? AS VARCHAR[]), id)",
            [enc.text, ids_literal(ids)],
        ).fetchall()
        out = {i: float("-inf") for i in ids}
        out.update({i: float(s) for i, s in rows if s is not None})
        return out

    def logits(self, scores: np.ndarray) -> np.ndarray:
        return np.asarray(scores, dtype=np.float64)


# The built-in judges' factories (lethe_sql.extend registers them by name): ``ctx`` a
# JudgeContext, ``required`` true when the judge was named, not tried by ``auto``.
def cross_encoder_judge(ctx, required: bool):
    """The cross-encoder when one is installed; ModelMissing when named and missing."""
    if ctx.reranker_source() is not None:
        return CrossEncoderJudge()
    if required:
        from lethe_sql.udfs.models import ModelMissing

        raise ModelMissing("no cross-encoder installed: run `lethe models pull` or set LETHE_RERANK_MODEL")
    return None


def late_interaction_judge(ctx, required: bool):
    """Late interaction when the store has a token index, else None."""
    li = LateInteractionJudge()
    return li if li.available(ctx.con) else None


def sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)
