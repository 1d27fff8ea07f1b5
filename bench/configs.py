"""The configs a bench run can compare: a name -> how to search.

A config's ``search(store, query, top_k, depth)`` returns entry ids, best first,
through the same ``MemoryStore.search`` path users run. Adding a config is one call::

    from lethe_sql.bench.configs import Config, register

    def _rerank(store, query, top_k, depth):
        return [h.id for h in store.search(query, top_k=top_k, mode="hybrid", depth=depth, rerank=True)]

    def _rerank_missing():
        ...  # None when usable, else a sentence naming what is missing

    register(Config("hybrid+rerank", "hybrid, then the cross-encoder over the pool", _rerank, _rerank_missing))

Names built from ``hybrid`` plus planned stages (``+rerank``, ``+rif``, ``+enrich``)
that nobody has registered yet fail with a message naming the missing stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from lethe_sql.errors import UsageError

SearchFn = Callable[..., list]


@dataclass(frozen=True)
class Config:
    """``search(store, query, top_k, depth) -> [entry id]``.

    ``prefix_stable``: the top n of a deeper search equals a search for n (a total
    order independent of k), so one deep search serves every cut-off. ``pool(fetch,
    depths)`` may compute the candidate pools at several depths from other configs'
    lists (``fetch(name, depth)``) instead of one search per depth; the runner checks it
    against the config's own search at the result depth.
    """

    name: str
    description: str
    search: SearchFn
    missing: Callable[[], str | None] = lambda: None  # None when usable
    prefix_stable: bool = False
    pool: Callable[..., dict] | None = None

    def check(self) -> None:
        why = self.missing()
        if why:
            raise UsageError(f"config {self.name!r} is unavailable: {why}")


REGISTRY: dict[str, Config] = {}

# Stages the design plans but this version does not have (DESIGN.md, read path).
PLANNED_STAGES = {
    "rerank": "a cross-encoder reranker over the fused pool (the rerank() UDF and a rerank option "
    "on MemoryStore.search)",
    "rif": "retrieval-induced forgetting (the suppression table and its alpha * suppression term in search)",
    "enrich": "enrichment of entries at index time (the enrich step of the write path)",
}


def register(config: Config, *, replace: bool = False) -> Config:
    if config.name in REGISTRY and not replace:
        raise ValueError(f"config {config.name!r} is already registered")
    REGISTRY[config.name] = config
    return config


def _mode(mode: str) -> SearchFn:
    def search(store, query: str, top_k: int = 10, depth: int = 30) -> list[str]:
        return [h.id for h in store.search(query, top_k=top_k, mode=mode, depth=depth)]

    search.__name__ = f"search_{mode}"
    return search


def rrf(bm25: list[str], dense: list[str], depth: int, k: int, c: int = 60) -> list[str]:
    """``lethe_hybrid``'s fusion, in Python: each list's top ``depth``, score
    1/(c + rank) summed over the lists, ties by id, cut at ``k``."""
    score: dict[str, float] = {}
    for ranked in (bm25[:depth], dense[:depth]):
        for r, i in enumerate(ranked, start=1):
            score[i] = score.get(i, 0.0) + 1.0 / (c + r)
    return sorted(score, key=lambda i: (-score[i], i))[:k]


def _hybrid_pool(fetch, depths) -> dict:
    deepest = max(depths)
    b, d = fetch("bm25", deepest), fetch("dense", deepest)
    return {n: rrf(b, d, n, n) for n in depths}


register(Config("bm25", "BM25 over the FTS tables (lethe_bm25)", _mode("bm25"), prefix_stable=True))
register(Config("dense", "MiniLM cosine, exact scan (lethe_dense)", _mode("dense"), prefix_stable=True))
register(Config("hybrid", "BM25 top-depth + dense top-depth, RRF k=60 (lethe_hybrid)", _mode("hybrid"),
                pool=_hybrid_pool))


def resolve(names: list[str]) -> list[Config]:
    """The configs named, in order; an error naming what is missing otherwise."""
    if not names:
        raise UsageError("no config given")
    out = []
    for name in names:
        if name in REGISTRY:
            cfg = REGISTRY[name]
            cfg.check()
            if cfg not in out:
                out.append(cfg)
            continue
        parts = [p for p in name.split("+") if p]
        stages = parts[1:] if parts and parts[0] in REGISTRY else parts
        missing = [s for s in stages if s in PLANNED_STAGES]
        if missing:
            needs = "; ".join(f"{s}: {PLANNED_STAGES[s]}" for s in missing)
            raise UsageError(
                f"config {name!r} is not available in this lethe-sql: it needs {needs}, "
                f"which is not built yet. Available configs: {', '.join(REGISTRY)}"
            )
        raise UsageError(
            f"unknown config {name!r}; available: {', '.join(REGISTRY)} "
            f"(planned, not built yet: {', '.join('hybrid+' + s for s in PLANNED_STAGES)})"
        )
    return out
