"""One search hit as JSON: the shape ``lethe search --json`` (one project or several), the
MCP server's ``search_memories`` and anything else that prints a hit share.

``hit_json`` takes a hit of ``MemoryStore.search`` (``search.SearchResult``) or of
cross-project search (``federation.FedCandidate``, which adds ``project`` and ``root``)::

    {"rank", ["project", "root",] "id", "score", "source", "heading", "created_at", "content",
     "bm25_rank", "dense_rank", "reranked", "judge", "note", "superseded_by", "superseded_at"}
"""

from __future__ import annotations


def rerank_note(judge: str | None) -> str:
    """What reranked the results, in words."""
    if judge == "cross-encoder":
        return "reranked by the cross-encoder"
    if judge == "late-interaction":
        return "reranked by late interaction over token vectors (no cross-encoder installed)"
    return "not reranked: no judge available"


def _iso(when) -> str | None:
    return when.isoformat() if when else None


def hit_json(h, judge: str | None = None) -> dict:
    """The JSON form of one hit; ``judge``: what judged a cross-project search (its
    candidates do not carry it)."""
    if hasattr(h, "project"):  # a cross-project candidate
        sup = h.superseded
        head = {"rank": h.final_rank, "project": h.project, "root": h.root, "id": h.id,
                "score": h.judge_score if judge else h.adjusted}
        reranked, by, at = judge is not None, list(sup.heads) if sup else [], sup.since if sup else None
    else:
        head = {"rank": h.rank, "id": h.id, "score": h.score}
        judge, reranked, by, at = h.judge, h.reranked, list(h.superseded_by), h.superseded_at
    return head | {
        "source": h.source, "heading": h.heading, "created_at": _iso(h.created_at), "content": h.content,
        "bm25_rank": h.bm25_rank, "dense_rank": h.dense_rank, "reranked": reranked, "judge": judge,
        "note": rerank_note(judge), "superseded_by": by, "superseded_at": _iso(at),
    }
