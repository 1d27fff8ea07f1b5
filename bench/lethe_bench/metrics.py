"""Ranking metrics for one query: pure functions over a ranked list and a relevance map.

A *ranking* is a list of unit ids, best first (the harness scores entries: see
``runner.py`` for how benchmark items map to entries). *Relevance* maps a unit id
to its grade (an int > 0); units absent from the map are not relevant.

* ``ndcg_at_k``: gain ``2**rel - 1``, discount ``log2(rank + 1)``; the ideal DCG
  comes from *all* relevant units sorted by grade (not only the retrieved ones).
* ``recall_at_k``: relevant units in the top k / all relevant units.
* ``recall_any_at_k``: 1 when at least one relevant unit is in the top k.
* ``mrr``: 1 / rank of the first relevant unit (0 when none is retrieved).
* ``top1_behaviour``: what the first result is: an exact hit, a sibling of a hit
  (from a session holding evidence, but the wrong turn), or from an unrelated
  session (the wrong family).

Queries without any relevant unit have no defined score: callers must drop them
(``ndcg_at_k`` and ``recall_at_k`` raise ``ValueError`` for them).
"""

from __future__ import annotations

import math
from typing import Callable, Hashable, Iterable, Mapping, Sequence

Relevance = Mapping[Hashable, int]

EXACT = "exact"
SIBLING = "sibling"
WRONG_FAMILY = "wrong_family"
NO_RESULT = "no_result"
BEHAVIOURS = (EXACT, SIBLING, WRONG_FAMILY, NO_RESULT)


def _check(relevance: Relevance) -> None:
    if not any(g > 0 for g in relevance.values()):
        raise ValueError("a query needs at least one relevant unit to be scored")


def dcg(grades: Iterable[float]) -> float:
    """Discounted cumulative gain of grades in rank order (rank 1 first)."""
    return sum((2.0**g - 1.0) / math.log2(i + 2) for i, g in enumerate(grades))


def ndcg_at_k(ranking: Sequence[Hashable], relevance: Relevance, k: int = 10) -> float:
    _check(relevance)
    got = dcg(relevance.get(u, 0) for u in ranking[:k])
    ideal = dcg(sorted((g for g in relevance.values() if g > 0), reverse=True)[:k])
    return got / ideal


def recall_at_k(ranking: Sequence[Hashable], relevance: Relevance, k: int) -> float:
    _check(relevance)
    rel = {u for u, g in relevance.items() if g > 0}
    return len(rel.intersection(ranking[:k])) / len(rel)


def recall_any_at_k(ranking: Sequence[Hashable], relevance: Relevance, k: int) -> float:
    _check(relevance)
    return 1.0 if any(relevance.get(u, 0) > 0 for u in ranking[:k]) else 0.0


def mrr(ranking: Sequence[Hashable], relevance: Relevance, k: int | None = None) -> float:
    """Reciprocal rank of the first relevant unit within the top ``k`` (all when None)."""
    _check(relevance)
    for i, u in enumerate(ranking if k is None else ranking[:k]):
        if relevance.get(u, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def top1_behaviour(
    ranking: Sequence[Hashable],
    relevance: Relevance,
    sessions_of: Callable[[Hashable], Iterable[Hashable]],
) -> str:
    """Classify the first result: ``exact``, ``sibling``, ``wrong_family`` or ``no_result``.

    ``sessions_of(unit)`` gives the sessions a unit belongs to (a unit that stands for
    several identical items may belong to several).
    """
    _check(relevance)
    if not ranking:
        return NO_RESULT
    top = ranking[0]
    if relevance.get(top, 0) > 0:
        return EXACT
    rel_sessions = {s for u, g in relevance.items() if g > 0 for s in sessions_of(u)}
    if rel_sessions.intersection(sessions_of(top)):
        return SIBLING
    return WRONG_FAMILY


def score_query(
    ranking: Sequence[Hashable],
    relevance: Relevance,
    *,
    sessions_of: Callable[[Hashable], Iterable[Hashable]] | None = None,
    session_level: bool = False,
) -> dict[str, float]:
    """Every per-query metric the reports use, as floats (behaviours as 0/1 indicators)."""
    out = {
        "ndcg@10": ndcg_at_k(ranking, relevance, 10),
        "recall@10": recall_at_k(ranking, relevance, 10),
        "recall@30": recall_at_k(ranking, relevance, 30),
        "mrr": mrr(ranking, relevance),
    }
    if session_level:
        out["recall_any@5"] = recall_any_at_k(ranking, relevance, 5)
    if sessions_of is not None:
        b = top1_behaviour(ranking, relevance, sessions_of)
        out["top1_exact"] = float(b == EXACT)
        out["top1_sibling"] = float(b == SIBLING)
        out["top1_wrong_family"] = float(b == WRONG_FAMILY)
    return out
