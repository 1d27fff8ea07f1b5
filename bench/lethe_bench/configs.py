"""The configs a bench run can compare: a name -> how to search.

A config's ``search(store, query, top_k, depth)`` returns entry ids, best first,
through the same ``MemoryStore.search`` path users run. Adding a config is one call::

    from lethe_bench.configs import Config, register

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
    pool_is_own_order: bool = True  # pool()[n] must equal search(n): checked by the runner
    needs_token_index: bool = False  # the store must be built with token vectors (late interaction)

    def check(self) -> None:
        why = self.missing()
        if why:
            raise UsageError(f"config {self.name!r} is unavailable: {why}")


REGISTRY: dict[str, Config] = {}

# Stages the design plans that the bench cannot run yet (DESIGN.md, read path).
PLANNED_STAGES = {
    "rerank": "a cross-encoder reranker over the fused pool (the rerank() UDF and a judge option "
    "on MemoryStore.search)",
    "rif": "a learning run: retrieval-induced forgetting changes the store with every search, so the bench "
    "needs a store per config and a feedback protocol for it",
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


def _pipeline_missing() -> str | None:
    import inspect

    from lethe_sql import MemoryStore

    if "judge" not in inspect.signature(MemoryStore.search).parameters:
        return "this lethe-sql's MemoryStore.search has no judged pipeline (mode='default', judge=...)"
    return None


def _cross_encoder_missing() -> str | None:
    why = _pipeline_missing()
    if why:
        return why
    try:
        from lethe_sql.udfs.models import resolve_reranker
    except ImportError:
        return "this lethe-sql cannot resolve a reranker (lethe_sql.udfs.models.resolve_reranker)"
    if resolve_reranker() is None:
        return ("no cross-encoder installed: run `lethe models pull` or set LETHE_RERANK_MODEL to a folder "
                "holding the ONNX cross-encoder and its tokenizer.json")
    return None


def _judged(judge: str) -> SearchFn:
    """The search pipeline with one judge over the hybrid pool, learning off (no state changes)."""

    def search(store, query: str, top_k: int = 10, depth: int = 30) -> list[str]:
        return [h.id for h in store.search(query, top_k=top_k, mode="default", judge=judge, learn=False)]

    search.__name__ = f"search_judged_{judge.replace('-', '_')}"
    return search


register(Config("hybrid+li", "hybrid pool, late-interaction judge (MaxSim over stored token vectors), no learning",
                _judged("late-interaction"), _pipeline_missing, pool=_hybrid_pool, pool_is_own_order=False,
                needs_token_index=True))
register(Config("hybrid+rerank", "hybrid pool, cross-encoder judge (rerank() UDF), no learning",
                _judged("cross-encoder"), _cross_encoder_missing, pool=_hybrid_pool, pool_is_own_order=False))


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
        built = {p for r in REGISTRY for p in r.split("+")}
        missing = [s for s in stages if s in PLANNED_STAGES and s not in built]
        if missing:
            needs = "; ".join(f"{s}: {PLANNED_STAGES[s]}" for s in missing)
            raise UsageError(
                f"config {name!r} is not available in this lethe-sql: it needs {needs}, "
                f"which is not built yet. Available configs: {', '.join(REGISTRY)}"
            )
        planned = [f"hybrid+{s}" for s in PLANNED_STAGES if s not in built]
        raise UsageError(
            f"unknown config {name!r}; available: {', '.join(REGISTRY)}"
            + (f" (planned, not built yet: {', '.join(planned)})" if planned else "")
        )
    return out


# -- learning configs (issue 4: RIF measured honestly) ----------------------------
#
# A learning config changes its store with every search, so the runner gives each one
# its own copy of the freshly built store and runs it only under a learning protocol
# (``--protocol prequential`` or ``split``, ``bench/runner.py``). ``search`` is the
# frozen pipeline (learning off, learned suppression applied): used to score the held-out
# half of ``split`` and for warm latency. ``step`` is one search as a user runs it
# (``Settings.top_k`` results, 10 by default, are the winners the update reinforces;
# the rest of the judged pool are losers), returning the judged order of the whole
# pool, ``depth`` deep, and the pipeline's timings; the ranking is computed before the
# update it triggers, so a query is always scored before its own update.


@dataclass(frozen=True)
class LearningConfig(Config):
    judge: str = "late-interaction"
    static: str | None = None  # the same pipeline with learning off: the paired comparison
    learns: bool = True
    overrides: tuple = ()  # Settings overrides shared with the static config, as (field, value) pairs

    def settings(self, store):
        return store.settings.with_(**dict(self.overrides))

    def step(self, store, query: str, depth: int = 30) -> tuple[list[str], dict]:
        import time

        out = store.search_outcome(query, judge=self.judge, learn=True, settings=self.settings(store))
        t0 = time.perf_counter()
        store.flush_learning()  # the protocols score each query on the state before its own update only
        out.timings_ms["learn"] = out.timings_ms.get("learn", 0.0) + (time.perf_counter() - t0) * 1000
        if not out.learned:
            from lethe_sql.errors import LetheError

            raise LetheError(f"config {self.name!r}: the search did not learn (read-only store?)")
        ranked = sorted(out.pool, key=lambda c: (c.judge_rank if c.judge_rank is not None else 1 << 30, c.pool_rank))
        return [c.id for c in ranked][:depth], dict(out.timings_ms, deep=float(out.deep))


def learns(config: Config) -> bool:
    return bool(getattr(config, "learns", False))




def _fused(store, query: str, top_k: int = 10, depth: int = 30) -> list[str]:
    """The first stage alone: lethe_fused with the store's settings (no judge)."""
    from lethe_sql.search import clean_query
    from lethe_sql.vectors import vec_literal

    s = store.settings
    q = clean_query(query)
    rows = store.con.execute(
        "SELECT id FROM lethe_fused(?, ?, ?, depth := ?, w_bm25 := ?, w_ctx := ?, w_dense := ?) ORDER BY rank",
        [q, vec_literal(store.embed_query(q)), int(top_k), int(max(top_k, depth)), float(s.w_bm25),
         float(s.w_ctx), float(s.w_dense)],
    ).fetchall()
    return [r[0] for r in rows]


def _fused_pool(fetch, depths) -> dict:
    return {n: fetch("fused", n) for n in depths}


def _default(store, query: str, top_k: int = 10, depth: int = 30) -> list[str]:
    return [h.id for h in store.search(query, top_k=top_k, learn=False)]


register(Config("fused", "first stage alone: z-scored BM25, context-field BM25 and cosine (lethe_fused, "
                "default weights)", _fused))
register(Config("default", "MemoryStore.search(query, top_k) with default settings, learning off: lethe_fused "
                "pool, late-interaction judge blended with context BM25 (or the cross-encoder when installed)",
                _default, _pipeline_missing, pool=_fused_pool, pool_is_own_order=False, needs_token_index=True))


def _overridden(name: str, overrides: tuple, judge: str | None = None) -> SearchFn:
    """The search pipeline with ``overrides`` on the store's settings, learning off."""

    def search(store, query: str, top_k: int = 10, depth: int = 30) -> list[str]:
        s = store.settings.with_(**dict(overrides))
        return [c.id for c in store.search_outcome(query, top_k=top_k, judge=judge, learn=False, settings=s).results]

    search.__name__ = name
    return search


# hybrid+li as it was before the default changed: RRF pool, MaxSim alone orders it.
HYBRID_LI = (("fusion", "rrf"), ("blend_judge", 1.0), ("blend_bm25", 0.0), ("blend_ctx", 0.0), ("blend_dense", 0.0))
_li_over_hybrid = _overridden("search_li_over_hybrid", HYBRID_LI, "late-interaction")


register(Config("hybrid+li", "hybrid (RRF) pool, late-interaction judge alone (MaxSim over stored token vectors), "
                "no learning", _li_over_hybrid, _pipeline_missing, pool=_hybrid_pool, pool_is_own_order=False,
                needs_token_index=True), replace=True)


# The learning configs: each is its static twin's exact pipeline with learning on.
register(LearningConfig(
    "hybrid+li+rif", "hybrid+li with learning on: RIF suppression per query cluster and the lifecycle, "
    "updated after every search", _li_over_hybrid, _pipeline_missing, needs_token_index=True,
    judge="late-interaction", static="hybrid+li", overrides=HYBRID_LI))
register(LearningConfig(
    "hybrid+rerank+rif", "hybrid+rerank with learning on (RIF and the lifecycle)", _judged("cross-encoder"),
    _cross_encoder_missing, judge="cross-encoder", static="hybrid+rerank"))
register(LearningConfig(
    "default+rif", "default with learning on (RIF and the lifecycle): what `lethe search` does",
    _default, _pipeline_missing, needs_token_index=True, judge=None, static="default"))
RIF_FINAL = (("rif_final_alpha", 1.0),)
register(LearningConfig(
    "default+rif-final", "default+rif with suppression also taken off the final score (rif_final_alpha 1.0, "
    "fixed before measuring; experimental)", _overridden("search_default_rif_final", RIF_FINAL), _pipeline_missing, needs_token_index=True,
    judge=None, static="default", overrides=RIF_FINAL))


# Levers of issue "Long memories", measured on the tune halves before a default changes.
register(Config("default+question", "default with the entry-is-a-question cue on (blend_question -1.0; "
                "the default since it was measured with this config)",
                _overridden("search_default_question", (("blend_question", -1.0),)), _pipeline_missing,
                needs_token_index=True))
register(Config("default-noquestion", "default with the entry-is-a-question cue off (blend_question 0.0, "
                "the default before it was chosen on)",
                _overridden("search_default_noquestion", (("blend_question", 0.0),)), _pipeline_missing,
                needs_token_index=True))
register(Config("default-notitle", "default with the title cue off (blend_title 0.0): what the heading cue "
                "(cues.title_share) costs or gains",
                _overridden("search_default_notitle", (("blend_title", 0.0),)), _pipeline_missing,
                needs_token_index=True))
register(Config("default+pool300", "default with a first-stage pool of 300 (k_deep 300)",
                _overridden("search_default_pool300", (("k_deep", 300),)), _pipeline_missing,
                needs_token_index=True))
