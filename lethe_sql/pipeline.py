"""One search, end to end: first stage in SQL, the judge, adaptive depth, learning.

    query -> embed once (sentence vector + token vectors, one forward pass)
          -> cue: nearest query-cluster centroid (0 before the first k-means fit)
          -> lethe_candidates(): lethe_fused (z-scored BM25, context-field BM25 and
             cosine; or RRF with fusion = "rrf"), minus alpha * suppression  (SQL,
             prepared once per connection and shape: lethe_sql.prepared)
          -> one first-stage call for max(k_deep, k_shallow) candidates at depth
             max(depth, k_deep); judge the top k_shallow, and the rest only when the
             best score is below the threshold (late interaction: always, one batch)
          -> late interaction: final score = blend() of the z-scored MaxSim and the
             first stage's z-scored signals over the judged pool, plus the query's
             cues (lethe_sql.cues: when / dates / quoted phrases / entries that are
             questions); a
             cross-encoder's logit is used as is
          -> revisions (lethe_sql.revisions): for a question about the present, the
             current version of every superseded candidate joins the pool when it is
             missing; the learned score of lethe_sql.present (over the judged top
             ten's scores, days and scored pairs) picks the first place, below it
             the newer of a scored pair comes first, and every version ranks below
             what a link says replaced it (supersede_order)
          -> final order by that score -> top_k
          -> learning update (when the search may learn)

``explain`` is not a second implementation: it is the trace this function keeps.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from . import mirror
from .cues import analyze
from .judges import QueryEncoding
from .learn import Update, apply as apply_learning, cue_of, current_step
from .prepared import statement
from .revisions import Superseded, scored_pairs, superseders
from .settings import Settings

CANDIDATES_SQL = """SELECT c.*, e.content, e.text, e.source, e.heading, e.created_at, e.session_id, e.tier
FROM lethe_candidates($q, $qvec, $k, depth := $depth, cue := $cue, step := $step,
                      alpha := $alpha, decay := $decay, rrf := $rrf,
                      w_bm25 := $w_bm25, w_ctx := $w_ctx, w_dense := $w_dense) AS c
JOIN entries AS e USING (id)
ORDER BY c.pool_rank"""


@dataclass
class Candidate:
    id: str
    pool_rank: int
    fused: float
    suppression: float
    adjusted: float
    bm25_rank: int | None
    bm25_score: float | None
    dense_rank: int | None
    dense_score: float | None
    content: str
    text: str
    source: str | None
    heading: str | None
    created_at: object
    session_id: str | None
    tier: str
    ctx_rank: int | None = None
    ctx_score: float | None = None
    judge_score: float | None = None   # what the final order sorts by (the blend, for late interaction)
    judge_raw: float | None = None     # the judge's own score (MaxSim, cross-encoder logit)
    judge_rank: int | None = None
    final_rank: int | None = None
    deep: bool = False
    superseded: Superseded | None = None   # what supersedes this memory (None: it is current)

    @classmethod
    def from_row(cls, r: dict, **extra) -> "Candidate":
        """A first-stage row (``lethe_candidates``' columns and the entry's) as a candidate."""
        return cls(
            id=r["id"], pool_rank=int(r["pool_rank"]), fused=float(r["fused"]),
            suppression=float(r["suppression"]), adjusted=float(r["adjusted"]),
            bm25_rank=r["bm25_rank"], bm25_score=r["bm25_score"],
            dense_rank=r["dense_rank"], dense_score=r["dense_score"],
            ctx_rank=r["ctx_rank"], ctx_score=r["ctx_score"],
            content=r["content"], text=r["text"], source=r["source"], heading=r["heading"],
            created_at=r["created_at"], session_id=r["session_id"], tier=r["tier"], **extra,
        )


@dataclass
class Outcome:
    results: list[Candidate]
    pool: list[Candidate]
    judge: str | None
    cue: int
    step: int
    deep: bool
    learned: bool
    rif: bool
    timings_ms: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


#: the arguments of the prepared first stage; its other parameters are settings (literals)
CANDIDATE_ARGS = (("q", "VARCHAR"), ("qvec", "FLOAT[384]"), ("cue", "INTEGER"), ("step", "BIGINT"))


def candidate_shape(k: int, depth: int, s: Settings) -> dict:
    """The parameters of ``CANDIDATES_SQL`` that are not ``CANDIDATE_ARGS``: pool sizes and
    settings, literals of the prepared statement (one statement per shape)."""
    return dict(k=int(k), depth=int(depth),
                alpha=float(s.rif_alpha) if s.rif else 0.0, decay=float(s.rif_lambda),
                rrf=s.fusion == "rrf", w_bm25=float(s.w_bm25), w_ctx=float(s.w_ctx), w_dense=float(s.w_dense))


def _candidates(con, enc: QueryEncoding, k: int, depth: int, cue: int, step: int, s: Settings) -> list[Candidate]:
    """The first stage: ``CANDIDATES_SQL``, run as a prepared statement (the same rows;
    tests/test_prepared.py)."""
    shape = candidate_shape(k, depth, s)
    rows = mirror.candidates(con, enc.text, enc.vec, k=k, depth=depth, cue=cue, step=step, shape=shape)
    if rows is not None:  # the same rows from the in-process copy (lethe_sql.mirror)
        return [Candidate.from_row(r) for r in rows]
    stmt = statement(CANDIDATES_SQL, CANDIDATE_ARGS, **shape)
    cur = stmt.execute(con, q=enc.text, qvec=enc.vec, cue=int(cue), step=int(step))
    names = [d[0] for d in cur.description]
    return [Candidate.from_row(dict(zip(names, row))) for row in cur.fetchall()]


def run(con, enc: QueryEncoding, settings: Settings, judge=None, *, learn: bool = True, defer=None,
        queued: int = 0) -> Outcome:
    """Search with ``judge`` (None: first stage only). ``learn`` False changes nothing;
    ``defer(update)``, when given, receives the ``learn.Update`` instead of the database
    (a read-only search: ``learn.record_pending``; a writer's queue). ``queued``: updates
    deferred before this search and not applied yet (each is a step)."""
    t0 = time.perf_counter()
    timings: dict = {}
    notes: list[str] = []
    rif = bool(settings.rif and judge is not None)
    if settings.rif and judge is None:
        notes.append("RIF off: no judge to learn from")
    step = current_step(con) + 1 + queued
    cue = cue_of(con, enc.vec) if rif else 0
    shallow_k, fetch_k, depth = pool_sizes(settings, judge)
    pool = _candidates(con, enc, fetch_k, depth, cue, step, settings)
    cues = analyze(enc.text)
    stale = superseders(con, [c.id for c in pool])
    present = cues.present and settings.revisions
    if stale and present:
        pool = with_current_versions(con, enc, pool, stale)
    timings["first_stage"] = (time.perf_counter() - t0) * 1000
    shallow = pool[:shallow_k]
    ordered, pool, deep, results = judge_and_cut(
        pool, settings, judge, shallow_k, enc.text, timings,
        score=lambda cands: judge.score(con, enc, [c.id for c in cands]),
        replaced_by=time_order(con, cues, stale, cues.idents) if settings.revisions else None,
    )
    for c in pool:
        c.superseded = stale.get(c.id)

    learned = False
    if learn:
        t2 = time.perf_counter()
        outcome = []
        if judge is not None and shallow:
            import numpy as np

            winners = {c.id for c in results}
            logits = judge.logits(np.array([c.judge_score for c in ordered], dtype=np.float64))
            logit_of = {c.id: float(l) for c, l in zip(ordered, logits)}
            outcome = [(c.id, c.pool_rank, c.judge_rank, logit_of[c.id], c.id in winners)
                       for c in shallow if c.id in logit_of]
        u = Update(enc.text, enc.vec, judge.name if judge else None, outcome, rif, cue if rif else None)
        if defer is not None:
            defer(u)
        else:
            apply_learning(con, settings, [u])
        learned = True
        timings["learn"] = (time.perf_counter() - t2) * 1000
    timings["total"] = (time.perf_counter() - t0) * 1000
    return Outcome(results, pool, judge.name if judge else None, cue, step, deep, learned, rif, timings, notes)


@dataclass(frozen=True)
class Present:
    """What a question about the present is reordered by (``present.order``, then
    ``supersede_order``): ``linked`` maps a candidate's key to the keys of the memories
    that links say replace it, ``pairs`` the pairs detection scored among the candidates
    ((old, new) -> score), ``now`` whether the question names the present outright."""

    linked: dict
    pairs: dict
    now: bool


def time_order(con, cues, stale: dict[str, Superseded], query=frozenset()):
    """What ``judge_and_cut`` reorders by, for a question with these ``cues``: about the
    present, a function of the judged order giving ``Present`` (the links of the pool and
    the scored pairs among the candidates ``present.order`` reorders). Asking outright for
    an earlier version, each superseding candidate gives way to the versions it
    superseded; otherwise None (history as is).
    A pair is left out when the question names the older memory apart from the newer one
    (an identifier it holds and the newer does not: "fact number 5123", "is it still on
    pg-stg-1?"): the question asks for that one."""
    from . import present, revisions

    if cues.present:
        def replaced_by(ordered: list) -> Present:
            text = {c.id: c.text for c in ordered}

            def apart(old, new) -> bool:  # the question names the older memory apart
                return old in text and new in text and revisions.named_apart(query, text[old], text[new])

            linked: dict[str, set] = {}
            for old, s in stale.items():
                for new in s.ids:
                    if not apart(old, new):
                        linked.setdefault(old, set()).add(new)
            scored = scored_pairs(con, [c.id for c in ordered[:present.TOP]])
            pairs = {(old, new): p for (old, new), p in scored.items() if not apart(old, new)}
            return Present(linked, pairs, cues.now)

        return replaced_by
    if cues.earlier and stale:
        out: dict[str, set] = {}
        for old, s in stale.items():
            for new in s.ids:
                out.setdefault(new, set()).add(old)
        return out
    return None


#: current versions pulled into a pool for its superseded candidates, at most
MAX_PULLED = 10

_PULL_SQL = """SELECT e.id, e.content, e.text, e.source, e.heading, e.created_at, e.session_id, e.tier,
       array_inner_product(e.embedding, CAST(? AS FLOAT[384])) AS dense_score
FROM entries AS e
WHERE list_contains(CAST(? AS VARCHAR[]), e.id) AND e.tier <> 'apoptotic'"""


def with_current_versions(con, enc: QueryEncoding, pool: list[Candidate], stale: dict[str, Superseded]) -> list[Candidate]:
    """``pool`` with the current version of each superseded candidate that the pool lacks,
    each placed right after the first candidate it supersedes (so that a judge which scores
    only the top of the pool scores it too). Pulled candidates have no BM25 scores
    (0, as an entry matching no query term) and their cosine as the dense score."""
    from .judges import ids_literal

    have = {c.id for c in pool}
    want: dict[str, str] = {}  # head -> the first pool candidate it supersedes
    for c in pool:
        s = stale.get(c.id)
        for h in (s.heads if s else ()):
            if h not in have and h not in want and len(want) < MAX_PULLED:
                want[h] = c.id
    if not want:
        return pool
    rows = con.execute(_PULL_SQL, [enc.vec_text, ids_literal(sorted(want))]).fetchall()
    from .revisions import named_apart

    old_text = {c.id: c.text for c in pool}
    names = analyze(enc.text).idents
    rows = [r for r in rows if not named_apart(names, old_text[want[r[0]]], r[2])]
    floor = min((c.adjusted for c in pool), default=0.0)
    pulled: dict[str, list[Candidate]] = {}
    for k, r in enumerate(rows):
        cand = Candidate(
            id=r[0], pool_rank=len(pool) + k + 1, fused=floor, suppression=0.0, adjusted=floor,
            bm25_rank=None, bm25_score=0.0, dense_rank=None, dense_score=float(r[8]),
            content=r[1], text=r[2], source=r[3], heading=r[4], created_at=r[5], session_id=r[6], tier=r[7],
            ctx_rank=None, ctx_score=0.0,
        )
        pulled.setdefault(want[r[0]], []).append(cand)
    out: list[Candidate] = []
    for c in pool:
        out.append(c)
        out.extend(pulled.get(c.id, ()))
    return out


def supersede_order(ordered: list, replaced_by: dict, key=lambda c: c.id, field: str | None = None) -> list:
    """A question about the present: each candidate that replaces others in the list moves
    up to just above the best-placed of them (chains move as a whole, newest first); the
    rest keep their order. So every replaced memory ranks below every memory in the list
    that replaces it. ``replaced_by`` maps a candidate's key to the keys of the memories
    that replace it (``key``: an entry id; the cross-project search uses (project, id)).
    ``field``: the score attribute a promoted candidate raises to the best of those it
    replaces, so the scores shown still fall with the rank."""
    if not replaced_by:
        return ordered
    rank = {key(c): i for i, c in enumerate(ordered)}
    newer: dict[object, list] = {}  # candidate key -> keys of the listed candidates it replaces
    for c in ordered:
        for n in replaced_by.get(key(c), ()):
            if n in rank and n != key(c):
                newer.setdefault(n, []).append(key(c))
    if not newer:
        return ordered
    eff: dict[object, float] = {}

    def place(k, depth: int = 0) -> float:
        if k in eff:
            return eff[k]
        eff[k] = float(rank[k])  # cycle guard
        best = float(rank[k])
        if depth < 64:
            for o in newer.get(k, ()):
                best = min(best, place(o, depth + 1) - 0.5)
        eff[k] = best
        return best

    out = sorted(ordered, key=lambda c: (place(key(c)), rank[key(c)]))
    if field:
        by_key = {key(c): c for c in ordered}
        memo: dict = {}

        def best(k, depth: int = 0) -> float:
            if k in memo:
                return memo[k]
            memo[k] = float("-inf")  # cycle guard
            mine = getattr(by_key[k], field)
            mine = float("-inf") if mine is None else mine
            if depth < 64:
                for o in newer.get(k, ()):
                    mine = max(mine, best(o, depth + 1))
            memo[k] = mine
            return mine

        for k in newer:
            b = best(k)
            if b != float("-inf"):
                setattr(by_key[k], field, b)
    return out


def blend(pool: list[Candidate], s: Settings, cues=None) -> list[float]:
    """The final score of a judged search (late interaction or the cross-encoder), per pool position: the judge's score
    and the first stage's signals, each z-scored over the judged pool, weighted
    (``Settings.blend_*``), plus the query-analysis cues (``lethe_sql.cues``: 0/1
    signals weighted by ``blend_time``, ``blend_date``, ``blend_question``, ``blend_phrase``,
    ``blend_ident``, ``blend_title``; ``cues`` None
    leaves them out), over the sum of the z-scored terms' weights. The same z-scoring as
    ``lethe_fused``; weights chosen on the LoCoMo tune half."""
    w = {"judge_raw": s.blend_judge, "bm25_score": s.blend_bm25, "ctx_score": s.blend_ctx,
         "dense_score": s.blend_dense}
    total = sum(abs(v) for v in w.values()) or 1.0
    import numpy as np

    from .cues import signals
    from .judges import _zscore

    out = np.zeros(len(pool))
    for f, wt in w.items():
        if wt:
            x = np.asarray([getattr(c, f) or 0.0 for c in pool], dtype=np.float64)
            bad = ~np.isfinite(x)  # a judge's -inf (a text it could not score) counts as its lowest score
            if bad.any():
                x[bad] = x[~bad].min() if (~bad).any() else 0.0
            out += wt * _zscore(x, eps=1e-12)
    if cues is not None:
        cw = {"time": s.blend_time, "date": s.blend_date, "question": s.blend_question, "phrase": s.blend_phrase,
              "ident": s.blend_ident, "title": s.blend_title}
        if any(cw.values()):
            for i, c in enumerate(pool):
                sig = signals(cues, c.text, c.created_at, c.heading)
                out[i] += sum(cw[k] * v for k, v in sig.items())
    return [float(v) / total for v in out]


def pool_sizes(settings: Settings, judge) -> tuple[int, int, int]:
    """(shallow_k, fetch_k, depth) of a search: the first stage runs once, at ``depth``
    per list, and returns ``fetch_k`` candidates; the judge scores the top ``shallow_k``
    of them, and the rest only on a deep pass. Without a judge: the top ``top_k`` at
    ``depth``. Shared by the single-project pipeline and the cross-project search."""
    top_k = settings.top_k
    if judge is None:
        return top_k, top_k, settings.depth
    shallow_k = max(settings.k_shallow, top_k)
    fetch_k = max(settings.k_deep, shallow_k)
    return shallow_k, fetch_k, max(settings.depth, fetch_k)


def judge_and_cut(pool: list, settings: Settings, judge, shallow_k: int, text: str, timings: dict, *, score,
                  key=lambda c: c.id, replaced_by=None):
    """The second half of a search, shared by the single-project pipeline and the
    cross-project search: the judge over the first stage's ``pool`` (``judge_pool``, with
    the cues of the query ``text``; timed into ``timings['judge']``), then
    ``supersede_order`` by ``replaced_by`` (a map, or a function of the judged order
    giving one or ``Present``: ``time_order``; for ``Present``, ``present.order``
    first), then the top ``top_k`` numbered by final rank. Without a
    judge, or with an empty pool, the first stage's order stands. Returns (ordered, judged
    pool, deep, results)."""
    ordered, deep = pool, False
    if judge is not None and pool:
        t1 = time.perf_counter()
        ordered, pool, deep = judge_pool(pool, settings, judge, shallow_k, score=score, key=key, cues=analyze(text))
        timings["judge"] = (time.perf_counter() - t1) * 1000
    if replaced_by is not None:
        rb = replaced_by(ordered) if callable(replaced_by) else replaced_by
        scored = "judge_score" if judge is not None and pool else "adjusted"
        if isinstance(rb, Present):
            from . import present, revisions

            ordered = present.order(ordered, pairs=rb.pairs, reach=present.reach(rb.linked), now=rb.now,
                                    link_at=revisions.LINK_AT, key=key, field=scored)
            rb = rb.linked
        ordered = supersede_order(ordered, rb, key, scored)
    results = ordered[: settings.top_k]
    for r, c in enumerate(results, 1):
        c.final_rank = r
    return ordered, pool, deep, results


def judge_pool(pool: list, settings: Settings, judge, shallow_k: int, *, score, key=lambda c: c.id, cues=None):
    """Adaptive depth, then the final order; shared by the single-project pipeline and the
    cross-project search. ``pool``: the first stage's candidates, best first, as many as a
    deep pass judges (``pool_sizes``). ``score(candidates)`` judges some of them ({key:
    score}). The judge scores the top ``shallow_k``; when their best score is below the
    judge's threshold (``rerank_threshold`` overrides it), it scores the rest too (a deep
    pass). A threshold of +inf (the late-interaction judge's default) always goes deep, in
    one batch. ``cues`` (``lethe_sql.cues.analyze`` of the query) go to the blend.
    Returns (ordered, judged pool, deep)."""
    threshold = settings.rerank_threshold
    if threshold is None:
        threshold = judge.default_threshold
    deep = len(pool) > shallow_k
    judged = pool if deep and threshold == math.inf else pool[:shallow_k]
    scores = score(judged)
    if deep and judged is not pool:
        deep = max(scores.values()) < threshold
        if deep:
            scores.update(score(pool[shallow_k:]))
            judged = pool
    if deep:
        for c in judged[shallow_k:]:
            c.deep = True
    return judge_order(judged, settings, judge, [scores.get(key(c)) for c in judged], cues), judged, deep


def judge_order(pool: list, settings: Settings, judge, raw: list, cues=None) -> list:
    """Give every candidate its judge score (``raw``, by pool position), the final score
    (blended for a judge that blends) and its judge rank; the pool in that order. Shared
    by the single-project pipeline and the cross-project search."""
    for c, r in zip(pool, raw):
        c.judge_raw = r
    final = blend(pool, settings, cues) if getattr(judge, "blend", False) else [c.judge_raw for c in pool]
    late = settings.rif_final_alpha if settings.rif else 0.0
    for c, f in zip(pool, final):
        # Experimental (off by default): suppression also lowers the final score.
        c.judge_score = f - late * (c.suppression or 0.0) if late and f is not None else f
    ordered = sorted(pool, key=lambda c: (-(c.judge_score if c.judge_score is not None else float("-inf")), c.pool_rank))
    for r, c in enumerate(ordered, 1):
        c.judge_rank = r
    return ordered
