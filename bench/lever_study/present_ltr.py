"""A learned order for questions about the present, replayed over rank_replay dumps.

    .venv/bin/python bench/lever_study/present_ltr.py TRAIN.pkl TEST.pkl

Chooses how many first places the learned score fills (``present.LEAD``), whether the
newer of a scored pair comes first below them (``present.SWAP_AT``), the L2 weight and the
weight of static questions in the fit by seven folds over TRAIN's projects (``cv``: the
highest ``utility`` among the cells whose static@1, a static question's target first, is
at most 0.02 under the ranking TRAIN was dumped with), fits on TRAIN and scores TEST against the ranking TEST was dumped
with, then prints the constants of ``lethe_sql/present.py`` fitted on TRAIN and on TRAIN
and TEST together.

Until the fourteenth session a question about the present was reordered by hand-made rules
over the judged top ten: links, promotions of pairs scored at ``PROMOTE_AT`` (with a
relevance margin over a link's head), chain evidence. ``lethe_sql/present.py`` replaced
the promotions and the chain evidence by one linear score over the judged top ``TOP``,
fitted here by a listwise softmax so that the question's answer (the current version of a
current question; with ``static_weight``, the target of a static one) comes first; links
stay hard (``pipeline.supersede_order`` over the links alone). The "shipped" rows of the
replay are the rankings the dumps were written with.

TRAIN: a ``revision_rank_cv.py --dump`` (links of a model fitted without each project);
TEST: a ``rank_replay.py dump`` of projects the pair model was not fitted on.
"""

from __future__ import annotations

import collections
import pickle
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


from lethe_bench import updates as U  # noqa: E402
from lethe_sql import pipeline, present, revisions  # noqa: E402
from lethe_sql.cues import analyze  # noqa: E402


class _C:
    """A dump row's pool entry as the product's candidates read it."""

    def __init__(self, row):
        self.id, self.judge_score, self.created_at, self.text, self.heading = row[:5]


def inputs(r: dict):
    """(ordered, pairs, reach, now) of a dump row, as ``pipeline.time_order`` hands them to
    ``present.order``."""
    ordered = [_C(c) for c in r["pool"]]
    reach = present.reach(r["linked"] or {})
    pairs = r["pairs"] if "pairs" in r else r.get("promotions") or {}  # older dumps: "promotions"
    return ordered, dict(pairs), reach, analyze(r["q"]["question"]).now


def featurize(r: dict):
    ordered, pairs, reach, now = inputs(r)
    key = lambda c: c.id  # noqa: E731
    keep = list(range(min(present.TOP, len(ordered))))
    items = [present._item(ordered[k], k, key, "judge_score") for k in keep]
    P, L = present.matrix(items, pairs, reach, revisions.LINK_AT)
    return keep, present.features(items, P, L, now)


def target(r: dict) -> str:
    q = r["q"]
    return q["current"] if q["kind"] == "current" else q["target"]


def prepare(rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        if not r["pool"] or r["linked"] is None or not analyze(r["q"]["question"]).present:
            continue  # not a question about the present (as dumped, or by today's cues)
        keep, X = featurize(r)
        r["keep"], r["X"] = keep, X
        ids = [r["pool"][k][0] for k in keep]
        r["y"] = ids.index(target(r)) if target(r) in ids else -1
        out.append(r)
    return out


def fit(rows: list[dict], l2: float = 1.0, static_weight: float = 1.0, iters: int = 30):
    """A listwise softmax (the answer first) over current questions, and over static ones
    with weight ``static_weight``; L2 ``l2`` on the standardised weights; Newton steps."""
    wt = {"current": 1.0, "static": static_weight, "past": static_weight}
    data = [r for r in rows if r["y"] >= 0 and wt[r["q"]["kind"]] > 0]
    allx = np.concatenate([r["X"] for r in data])
    mu, sd = allx.mean(0), allx.std(0)
    sd[sd < 1e-9] = 1.0
    w = np.zeros(allx.shape[1])
    xs = [((r["X"] - mu) / sd, r["y"], wt[r["q"]["kind"]]) for r in data]
    def loss(w):
        out = 0.5 * l2 * w @ w
        for x, y, c in xs:
            s = x @ w
            out += c * (np.log(np.exp(s - s.max()).sum()) + s.max() - s[y])
        return out

    cur = loss(w)
    for _ in range(iters):
        g = l2 * w
        H = l2 * np.eye(len(w))
        for x, y, c in xs:
            s = x @ w
            p = np.exp(s - s.max())
            p /= p.sum()
            m = x.T @ p
            g += c * (m - x[y])
            H += c * ((x.T * p) @ x - np.outer(m, m))
        step = np.linalg.solve(H, g)
        t = 1.0
        while t > 1e-4 and loss(w - t * step) > cur - 1e-12:
            t /= 2
        if t <= 1e-4:
            break
        w = w - t * step
        cur = loss(w)
        if np.abs(t * step).max() < 1e-8:
            break
    return mu, sd, w


def utility(agg) -> float:
    """What the choice maximises: the issue's targets added up (stale@1 counted against)."""
    return (np.mean(agg["cur@1"]) + np.mean(agg["cur_first"]) - 2 * np.mean(agg["stale@1"])
            + np.mean(agg["static@5"]))


def cv(rows, folds: int = 7, lead=None, swap_at=None, **kw):
    """Grouped by project: each fold's questions ordered by a model fitted on the others."""
    projects = sorted({r["project"] for r in rows})
    group = {p: k % folds for k, p in enumerate(projects)}
    agg = collections.defaultdict(list)
    for f in range(folds):
        model = fit([r for r in rows if group[r["project"]] != f], **kw)
        for r in rows:
            if group[r["project"]] == f:
                ranked = order(r, model, lead, swap_at)
                for k, v in metrics(r, ranked).items():
                    agg[k].append(v)
    return agg


def metrics(r: dict, ranked: list[str]) -> dict:
    """``lethe bench updates``' metrics of one question, and static@1 (a static question's
    target first: what the first place costs the questions that are not about a change)."""
    out = U._metrics(r["q"], ranked[:10])
    if r["q"]["kind"] == "static":
        out["static@1"] = float(bool(ranked) and ranked[0] == r["q"]["target"])
    return out


def order(r: dict, model=None, lead=None, swap_at=None) -> list[str]:
    if model is None:  # the ranking as dumped: the rules of the thirteenth session
        return r["ranked"]
    ordered, pairs, reach, now = inputs(r)
    ranked = present.order(ordered, pairs=pairs, reach=reach, now=now, link_at=revisions.LINK_AT,
                           key=lambda c: c.id, model=model, lead=lead, swap_at=swap_at)
    return [c.id for c in pipeline.supersede_order(ranked, r["linked"] or {})]


def evaluate(rows, model=None, label="", lead=None, swap_at=None):
    agg = collections.defaultdict(list)
    for r in rows:
        for k, v in metrics(r, order(r, model, lead, swap_at)).items():
            agg[k].append(v)
    print(f"  {label:<30}" + " ".join(f"{k}={np.mean(v):.3f}" for k, v in agg.items())
          + f"  (n current = {len(agg['cur@1'])}, static = {len(agg['static@5'])})")
    return agg


def main() -> None:
    train = prepare(pickle.load(open(sys.argv[1], "rb")))
    test = prepare(pickle.load(open(sys.argv[2], "rb")))
    print(f"train {len(train)} present questions, test {len(test)}")
    base = collections.defaultdict(list)
    for r in train:
        for k, v in metrics(r, order(r)).items():
            base[k].append(v)
    show = lambda a: " ".join(f"{k}={np.mean(v):.3f}" for k, v in sorted(a.items()))  # noqa: E731
    print(f"  shipped (train, as dumped)            {show(base)}  U={utility(base):.3f}")
    grid = [dict(lead=lead, swap_at=swap, l2=l2, static_weight=sw) for lead in (0, 1, 2)
            for swap in ((2.0, present.PAIR_AT) if lead else (2.0,)) for l2 in (1.0, 10.0)
            for sw in (0.0, 0.1, 0.25, 0.5)]
    floor = np.mean(base["static@1"]) - 0.02  # the first place of static questions: no worse than the rules
    best = None
    for kw in grid:
        agg = cv(train, **kw)
        u = utility(agg)
        ok = np.mean(agg["static@1"]) >= floor
        print(f"  cv {kw}  {show(agg)}  U={u:.3f}{'' if ok else '  (static@1 under the floor)'}")
        if ok and (best is None or u > best[0]):
            best = (u, kw)
    print(f"chosen {best[1]}")
    lead, swap = best[1].pop("lead"), best[1].pop("swap_at")
    model = fit(train, **best[1])
    print("weights: " + ", ".join(f"{f} {v:+.3f}" for f, v in zip(present.FEATURES, model[2])))
    evaluate(test, None, "test shipped")
    evaluate(test, model, f"test learned, lead {lead}, swap {swap}", lead, swap)
    print("fitted on TRAIN:")
    print(constants(model))
    print("fitted on TRAIN and TEST (shipped):")
    print(constants(fit(train + test, **best[1])))


def constants(model) -> str:
    mu, sd, w = model
    fmt = lambda name, v: f"{name} = (" + ", ".join(f"{x:.6g}" for x in v) + ("," if len(v) == 1 else "") + ")"  # noqa: E731
    return "\n".join([fmt("_MEAN", mu), fmt("_SD", sd), fmt("_WEIGHTS", w)])


if __name__ == "__main__":
    main()
