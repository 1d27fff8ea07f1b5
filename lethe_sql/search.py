"""Search: the SQL the store runs, and its typed results.

The ranking lives in ``sql/`` (``lethe_bm25``, ``lethe_dense``,
``lethe_hybrid``); this module only embeds the query, binds it, and joins
the ranked ids back to their entries. ``search_sql(mode)`` returns the exact
statement; the search runs it prepared (``lethe_sql.prepared``: the same text
with its parameters read from a one-row CTE), with the same rows.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass
from datetime import datetime

from .errors import UsageError
from .prepared import statement
from .settings import check_count

MAX_QUERY_CHARS = 2000
MODES = ("default", "hybrid", "bm25", "dense")

_COLUMNS = """e.content, e.text, e.source, e.heading, e.created_at, e.session_id, e.tier"""

_SQL = {
    "hybrid": f"""SELECT h.rank, h.id, h.score, h.bm25_rank, h.bm25_score, h.dense_rank, h.dense_score,
       {_COLUMNS}
FROM lethe_hybrid($q, $qvec, $k, depth := $depth) AS h
JOIN entries AS e USING (id)
ORDER BY h.rank""",
    "bm25": f"""SELECT h.rank, h.id, h.score, h.rank AS bm25_rank, h.score AS bm25_score,
       NULL AS dense_rank, NULL AS dense_score,
       {_COLUMNS}
FROM lethe_bm25($q, $k) AS h
JOIN entries AS e USING (id)
ORDER BY h.rank""",
    "dense": f"""SELECT h.rank, h.id, h.score, NULL AS bm25_rank, NULL AS bm25_score,
       h.rank AS dense_rank, h.score AS dense_score,
       {_COLUMNS}
FROM lethe_dense($qvec, $k) AS h
JOIN entries AS e USING (id)
ORDER BY h.rank""",
}


def search_sql(mode: str = "hybrid") -> str:
    """The statement a search of ``mode`` runs, with its named parameters."""
    if mode not in _SQL:
        raise UsageError(f"unknown search mode {mode!r}; choose one of {', '.join(MODES)}")
    return _SQL[mode]


@dataclass(frozen=True)
class SearchResult:
    """One ranked memory."""

    rank: int
    id: str
    score: float
    content: str
    text: str
    source: str | None
    heading: str | None
    created_at: datetime | None
    session_id: str | None
    tier: str
    bm25_rank: int | None = None
    bm25_score: float | None = None
    dense_rank: int | None = None
    dense_score: float | None = None
    judge: str | None = None          # which judge reranked it, None when not reranked
    judge_score: float | None = None
    fused: float | None = None        # RRF score before suppression
    suppression: float | None = None  # decayed suppression for this query's cluster
    pool_rank: int | None = None      # rank after the first stage (and suppression)
    superseded_by: tuple[str, ...] = ()   # the current versions of this memory; () when it is current
    superseded_at: datetime | None = None  # valid_to: when the first memory replacing it was written

    @property
    def reranked(self) -> bool:
        return self.judge is not None

    @property
    def is_current(self) -> bool:
        return not self.superseded_by

    def as_dict(self) -> dict:
        d = asdict(self)
        d["created_at"] = self.created_at.isoformat() if self.created_at else None
        d["superseded_by"] = list(self.superseded_by)
        d["superseded_at"] = self.superseded_at.isoformat() if self.superseded_at else None
        return d


def clean_query(query: str, max_chars: int = MAX_QUERY_CHARS) -> str:
    """Validate a query: non-empty after stripping; long ones are cut with a warning."""
    if query is None:
        raise UsageError("the query is empty")
    q = query.replace("\x00", " ").strip()
    if not q:
        raise UsageError("the query is empty (or only whitespace)")
    if len(q) > max_chars:
        warnings.warn(
            f"query of {len(q)} characters truncated to {max_chars}", UserWarning, stacklevel=3
        )
        q = q[:max_chars]
    return q


def run_search(con, query: str, qvec, *, mode: str = "hybrid", top_k: int = 10, depth: int = 30):
    """Execute ``search_sql(mode)`` and return ``SearchResult`` rows."""
    top_k, depth = check_count("top_k", top_k), check_count("depth", depth)
    args, values = [], {}
    if mode in ("hybrid", "bm25"):
        args.append(("q", "VARCHAR"))
        values["q"] = query
    if mode in ("hybrid", "dense"):
        args.append(("qvec", "FLOAT[384]"))
        values["qvec"] = qvec
    sizes = {"k": int(top_k), "depth": int(depth)} if mode == "hybrid" else {"k": int(top_k)}
    # prepared once per connection and (mode, k, depth): lethe_sql.prepared
    cur = statement(search_sql(mode), tuple(args), **sizes).execute(con, **values)
    names = [d[0] for d in cur.description]
    rows = [dict(zip(names, row)) for row in cur.fetchall()]
    from .revisions import superseders

    stale = superseders(con, [r["id"] for r in rows])
    out = []
    for r in rows:
        s = stale.get(r["id"])
        out.append(
            SearchResult(
                rank=int(r["rank"]),
                id=r["id"],
                score=float(r["score"]),
                content=r["content"],
                text=r["text"],
                source=r["source"],
                heading=r["heading"],
                created_at=r["created_at"],
                session_id=r["session_id"],
                tier=r["tier"],
                bm25_rank=r["bm25_rank"],
                bm25_score=r["bm25_score"],
                dense_rank=r["dense_rank"],
                dense_score=r["dense_score"],
                superseded_by=s.heads if s else (),
                superseded_at=s.since if s else None,
            )
        )
    return out
