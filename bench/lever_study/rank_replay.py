"""Replay the present-question reordering offline: what would other lift rules, a bonus for
memories that supersede another, a recency prior or other blend weights do to the ranking?

    .venv/bin/python bench/lever_study/rank_replay.py dump --projects p01,...,p45 --out FILE
    .venv/bin/python bench/lever_study/rank_replay.py replay FILE [--split 33]

``dump`` indexes each project of the update sets (as ``lethe bench updates`` does, stores in
a temporary folder) and searches every question once (``revision_rank_cv.py --dump FILE``
does the same with each project's links detected by a model fitted without it), recording the judged pool in the
judge's order *before* ``pipeline.supersede_order`` (ids, final scores, the blend's inputs),
the replacement map ``time_order`` gave, and the project's links. ``replay`` reorders those
pools under each variant and prints cur@1 / cur_first / stale@1 / past@5 / static@5 over the
questions that were reordered (questions that asked about the past without saying so
outright skip the reordering and are left out, so past@5 here is over a subset). The
baseline row reproduces the shipped ranking exactly (checked at load).

Dumps written since the eleventh session also record each present question's scored pairs
among its top ten (``pipeline.promotions``); ``replay`` then also rebuilds the promotions
with ``pipeline.promoted_pairs`` under other thresholds (``promoted_map``; those rows leave
out the questions not about the present, so their past@5 is over a few past questions).

A replay keeps the replacement map of the shipped order (``time_order`` chooses promotions
among the top ``PROMOTE_TOP``; a variant that reorders the judge's scores could change that
choice), and the links are those detected in-sample when the projects are fit projects:
use it to find what is worth a leave-one-project-out run (``revision_rank_cv.py``), not to
report.
"""

from __future__ import annotations

import argparse
import collections
import pickle
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from revision_fit import FIT, REPO  # noqa: E402

from lethe_bench import updates as U  # noqa: E402
from lethe_sql import MemoryStore, pipeline, revisions  # noqa: E402
from lethe_sql.cues import analyze, signals  # noqa: E402
from lethe_sql.settings import Settings  # noqa: E402

#: the z-scored first-stage and judge inputs of ``pipeline.blend``, then its 0/1 cue terms
BLEND = ("judge_raw", "bm25_score", "ctx_score", "dense_score")
CUES = ("time", "date", "question", "phrase", "ident", "title")


class Recorder:
    """While open, every search records the judged pool in the judge's order before
    ``pipeline.by_chain_evidence`` and ``pipeline.supersede_order``, and the maps they were
    given; ``search`` returns that row with the question, the ranking and the links."""

    def __init__(self) -> None:
        self.last: dict = {}
        self._shipped = (pipeline.by_chain_evidence, pipeline.supersede_order, pipeline.promotions)

    def _pool(self, ordered, key) -> None:
        if "pool" not in self.last:
            self.last["pool"] = [(key(c), c.judge_score, c.created_at, c.text, c.heading,
                                  {f: getattr(c, f, None) for f in BLEND}) for c in ordered]

    def __enter__(self) -> "Recorder":
        evidence, supersede, promotions = self._shipped

        def promoted(con, ids):
            out = promotions(con, ids)
            self.last["promotions"] = dict(out)
            return out

        def by_chain_evidence(ordered, linked, key=lambda c: c.id, field="judge_score", t=None):
            self._pool(ordered, key)
            self.last["linked"] = {k: set(v) for k, v in linked.items()}
            return evidence(ordered, linked, key, field, t)

        def supersede_order(ordered, replaced_by, key=lambda c: c.id, field=None):
            self._pool(ordered, key)
            self.last["rb"] = {k: set(v) for k, v in (replaced_by or {}).items()}
            return supersede(ordered, replaced_by, key, field)

        pipeline.by_chain_evidence, pipeline.supersede_order, pipeline.promotions = (
            by_chain_evidence, supersede_order, promoted)
        return self

    def __exit__(self, *exc) -> None:
        pipeline.by_chain_evidence, pipeline.supersede_order, pipeline.promotions = self._shipped

    def search(self, store, project_id: str, q: dict, back: dict, links: set) -> dict:
        """Search ``q`` as ``lethe bench updates`` does and return its row."""
        self.last.clear()
        res = store.search_outcome(q["question"], top_k=U.TOP_K, learn=False,
                                   settings=store.settings.with_(top_k=U.TOP_K))
        name = lambda m: {back.get(k, k): {back.get(x, x) for x in v} for k, v in m.items()}
        pool = [(back.get(i, i), *rest) for i, *rest in self.last.get("pool", [])]
        linked = self.last.get("linked")
        promotions = {(back.get(o, o), back.get(n, n)): p for (o, n), p in self.last.get("promotions", {}).items()}
        return dict(project=project_id, q=q, ranked=[back.get(c.id, c.id) for c in res.results],
                    pool=pool, rb=name(self.last.get("rb", {})), linked=None if linked is None else name(linked),
                    links=links, promotions=promotions)


def links_of(store, back: dict) -> set:
    return {(back.get(o), back.get(n)) for o, n in
            store.con.execute("SELECT old_id, new_id FROM revisions").fetchall()}


def dump(projects: list[str], out: Path) -> None:
    from lethe_sql.udfs.embed import Embedder

    emb, rows = Embedder(), []
    with tempfile.TemporaryDirectory() as tmp, Recorder() as rec:
        for p in U.load(REPO / "bench" / "data" / "updates", projects):
            root = Path(tmp) / p.id
            U.write_project(p, root)
            with MemoryStore(root, embedder=emb) as store:
                store.index()
                back = {v: k for k, v in U._ids(store, p).items()}
                links = links_of(store, back)
                rows += [rec.search(store, p.id, q, back, links) for q in p.queries]
            print(p.id, file=sys.stderr, flush=True)
    with open(out, "wb") as f:
        pickle.dump(rows, f)


class _Cand:
    def __init__(self, id_: str, score: float, created_at=None, text: str = "") -> None:
        self.id, self.judge_score, self.adjusted, self.created_at, self.text = id_, score, score, created_at, text


def promoted_map(r: dict, scores: np.ndarray, **rule) -> dict:
    """The replacement map of a recorded present question (``r``: a dump row with its
    ``promotions``) with the promotions ``pipeline.promoted_pairs`` makes under ``rule``
    (``at``, ``weak``, ``margin``; the shipped constants where left out) over the judged
    order of ``scores``, and the recorded links (named-apart pairs are not replayed)."""
    order = sorted(range(len(r["ids"])), key=lambda k: (-scores[k], k))
    meta = {c[0]: c for c in r["pool"]}
    top = [_Cand(r["ids"][k], scores[k], meta[r["ids"][k]][2], meta[r["ids"][k]][3])
           for k in order[:revisions.PROMOTE_TOP]]
    stale = {old: revisions.Superseded(tuple((n, None) for n in sorted(news)), ())
             for old, news in (r["linked"] or {}).items()}
    out = {old: set(news) for old, news in (r["linked"] or {}).items()}
    for old, new in pipeline.promoted_pairs(top, r.get("promotions", {}), stale, **rule):
        out.setdefault(old, set()).add(new)
    return out


def shipped_order(ids: list[str], scores: np.ndarray, rb: dict, linked: dict | None = None,
                  t: float | None = None) -> list[str]:
    """The pipeline's reordering: a question about the present (``linked`` given) is placed
    by chain evidence (``pipeline.by_chain_evidence`` at ``t``, ``CHAIN_T`` when None; 0:
    off), then every question by ``pipeline.supersede_order``."""
    order = sorted(range(len(ids)), key=lambda k: (-scores[k], k))
    cands = [_Cand(ids[k], scores[k]) for k in order]
    if linked is not None and t != 0:
        cands = pipeline.by_chain_evidence(cands, linked, t=t)
    return [c.id for c in pipeline.supersede_order(cands, rb)]


def margin_order(ids: list[str], scores: np.ndarray, rb: dict, links: set, m_link: float, m_promo: float) -> list[str]:
    """A replaced memory sinks below what replaces it; what replaces it rises to the
    replaced one's (risen) score less a margin (``m_link`` for a link, ``m_promo`` for a
    promotion): 0 rises all the way, as shipped; a large margin only sinks."""
    s = dict(zip(ids, scores))
    rank = {i: k for k, i in enumerate(ids)}
    olds, news = collections.defaultdict(list), collections.defaultdict(list)
    for o, ns in rb.items():
        for n in ns:
            if o in rank and n in rank and n != o:
                olds[n].append(o)
                news[o].append(n)
    risen: dict = {}

    def rise(k, depth=0):
        if k not in risen:
            risen[k] = s[k]  # cycle guard
            v = s[k]
            for o in olds[k] if depth < 64 else ():
                v = max(v, rise(o, depth + 1) - (m_link if (o, k) in links else m_promo))
            risen[k] = v
        return risen[k]

    sunk: dict = {}

    def sink(k, depth=0):
        if k not in sunk:
            sunk[k] = rise(k)
            v = rise(k)
            for n in news[k] if depth < 64 else ():
                v = min(v, sink(n, depth + 1) - 1e-6)
            sunk[k] = v
        return sunk[k]

    return sorted(ids, key=lambda k: (-sink(k), rank[k]))


def replay(path: Path, split: int) -> None:
    with open(path, "rb") as f:
        rows = [r for r in pickle.load(f) if r["pool"]]
    s = Settings()
    w0 = np.array([s.blend_judge, s.blend_bm25, s.blend_ctx, s.blend_dense, s.blend_time, s.blend_date,
                   s.blend_question, s.blend_phrase, s.blend_ident, s.blend_title])
    for r in rows:
        cues = analyze(r["q"]["question"])
        r["present"] = cues.present
        x = np.array([[c[5][f] or 0.0 for f in BLEND] + [signals(cues, c[3], c[2], c[4]).get(k, 0.0) for k in CUES]
                      for c in r["pool"]], dtype=np.float64)
        for j in range(len(BLEND)):
            sd = x[:, j].std()
            x[:, j] = (x[:, j] - x[:, j].mean()) / sd if sd > 1e-12 else 0.0
        r["x"], r["ids"] = x, [c[0] for c in r["pool"]]
        r["heads"] = {n for _, n in r["links"]}
        r["t"] = np.array([c[2].timestamp() if c[2] else 0.0 for c in r["pool"]])
    bad = sum(shipped_order(r["ids"], r["x"] @ w0 / np.abs(w0[:4]).sum(), r["rb"], r["linked"])[:10] != r["ranked"]
              for r in rows)
    print(f"{len(rows)} reordered questions; the baseline differs from the shipped ranking on {bad}")

    def score(r, w=w0, head=0.0, recency=0.0):
        v = r["x"] @ w / np.abs(w[:4]).sum()
        if r["present"]:
            v = v + head * np.array([i in r["heads"] for i in r["ids"]])
            t = r["t"]
            v = v + recency * (t - t.min()) / (np.ptp(t) + 1e-9)
        return v

    def run(name, order, subset):
        agg = collections.defaultdict(list)
        for r in subset:
            for k, v in U._metrics(r["q"], order(r)[:10]).items():
                agg[k].append(v)
        print(f"  {name:<44}" + " ".join(f"{k}={np.mean(v):.3f}" for k, v in agg.items())
              + f"  (n current = {len(agg['cur@1'])})")

    halves = [("all", rows)]
    if split:
        halves += [(f"<= p{split:02d}", [r for r in rows if int(r["project"][1:]) <= split]),
                   (f"> p{split:02d}", [r for r in rows if int(r["project"][1:]) > split])]
    for label, subset in halves:
        print(label)
        run("shipped", lambda r: shipped_order(r["ids"], score(r), r["rb"], r["linked"]), subset)
        for t in (0, 0.25, 1.0):
            run(f"chain evidence t {t}", lambda r: shipped_order(r["ids"], score(r), r["rb"], r["linked"], t), subset)
        run("chain evidence t 0.5 over promotions too",
            lambda r: shipped_order(r["ids"], score(r), r["rb"], r["rb"] if r["linked"] is not None else None), subset)
        if all("promotions" in r for r in subset):  # dumps written since the eleventh session
            promo = [r for r in subset if r["linked"] is not None]
            run("promotions replayed, shipped rule", lambda r: shipped_order(
                r["ids"], score(r), promoted_map(r, score(r)), r["linked"]), promo)
            for rule in ({"at": 0.15}, {"weak": 0.03}, {"margin": 1.0}):
                run(f"promotions replayed, {rule}", lambda r: shipped_order(
                    r["ids"], score(r), promoted_map(r, score(r), **rule), r["linked"]), promo)
        for ml, mp in ((0, 0), (0, 0.5), (0, 1.0), (0, 99), (0.5, 0), (99, 0)):
            run(f"no evidence, margin link {ml} promo {mp}",
                lambda r: margin_order(r["ids"], score(r), r["rb"], r["links"], ml, mp), subset)
        for b in (0.2, 0.5):
            run(f"head bonus {b}", lambda r: shipped_order(r["ids"], score(r, head=b), r["rb"], r["linked"]), subset)
        for b in (0.2, 0.4):
            run(f"recency {b}", lambda r: shipped_order(r["ids"], score(r, recency=b), r["rb"], r["linked"]), subset)
        for j, v in ((3, 0.5), (9, 3.0), (8, 1.0), (1, 0.0)):
            w = w0.copy()
            w[j] = v
            run(f"blend {(BLEND + CUES)[j]} {v}", lambda r: shipped_order(r["ids"], score(r, w=w), r["rb"], r["linked"]), subset)


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("--projects", default=FIT)
    d.add_argument("--out", required=True)
    r = sub.add_parser("replay")
    r.add_argument("file")
    r.add_argument("--split", type=int, default=0, help="also report projects up to and after this number")
    a = ap.parse_args()
    if a.cmd == "dump":
        dump(a.projects.split(","), Path(a.out))
    else:
        replay(Path(a.file), a.split)


if __name__ == "__main__":
    main()
