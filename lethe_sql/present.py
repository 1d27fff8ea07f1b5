"""The order of a question about the present: one learned score over the judged top ten.

A question about the present wants the current version of the subject it names. The
judge finds the subject (any of its versions); which version is current is a matter of
the pairs detection scored (``revision_candidates``: the probability that the newer of two
memories supersedes the older) and of the links among them. For each candidate of the
judged top ``TOP`` this module computes ``FEATURES`` from the judged scores, the dates,
the scored pairs and the links among those candidates, and gives the first ``LEAD``
places to the best of them by a linear score (the rest keep the judged order, the newer
of a scored pair before the older): weights fitted by a listwise softmax (the
answer first) on the update sets' fit projects, each project's pairs scored by a pair
model fitted without it (``bench/lever_study/present_ltr.py``). Links stay hard:
``pipeline.supersede_order`` then puts every linked version below what replaced it (a
version judged below the top ten is lifted so, never further: a link can be wrong, and
a later note linked by mistake should not take the first place on that alone).

The features:

* ``gap``: the judged score less the best one among the candidates; ``rrank``: 1 / (1 +
  judged position);
* ``sup_link`` / ``head_link``: a link in the candidates replaces it / it replaces one;
* ``p_out``: the highest pair score of a newer candidate over it; ``p_out_close``: the
  same over newer candidates judged at most ``CLOSE`` below it; ``n_out``: how many newer
  candidates score ``PAIR_AT`` or more over it; ``log_notsup``: the sum of log(1 - p) over
  them (each p capped at 0.95): how likely nothing among the candidates replaced it;
* ``p_in``: the highest pair score of it over an older candidate; ``newest_in``: it
  replaces some candidate at ``PAIR_AT`` and none replaces it; ``ev``: the evidence of its
  chain (``t * log(sum(exp(score / t)))`` over it and the older candidates it replaces at
  ``PAIR_AT``, t = ``CHAIN_T``) less its own score;
* ``recency``: its day's place between the oldest and newest candidates' days (0 to 1);
* ``now_x_*``: ``p_in``, ``newest_in`` and ``recency`` when the question names the present
  outright ("now", "currently", "these days": ``cues.QueryCues.now``);
* ``lift``: the highest pair score of it over a candidate judged above it (a newer version
  of a memory the question found more relevant); ``sink``: the highest pair score of a
  candidate judged below it over it; ``p_in_rel``: ``p_in`` with each older candidate's
  pair score weighted by exp(its ``gap``), and ``newest_rel``: ``newest_in`` times the
  best such weight of the versions it replaces (a newer version of what the question found
  most relevant counts fully, of a memory it found less relevant less);
* ``p_out_sole``: ``p_out`` when one newer candidate alone scores ``PAIR_AT`` or more over
  it (a memory many later notes pair with is more often an overview than a version);
* ``revisions.NOTE_SIGNALS``, read from its own words: its title or text announces a change,
  it opens as a correction, as an incident or a check, as a how-to, as a report of how a
  setting went. A note that uses the current version (a drill, a how-to, a first run) pairs
  with it as a newer version would; what it says of itself is what tells them apart
  (twenty-first session: over p126-p141, n = 256 current, weights fitted on p94-p125 with
  them 0.824 / 0.973 / 0.027 against 0.801 / 0.973 / 0.027 refitted without them and
  0.797 / 0.980 / 0.020 as shipped before).

A linked pair is scored at least ``revisions.LINK_AT``; a pair the question names apart
(``revisions.named_apart``: it names a value only the older memory holds) is left out,
so that memory is ranked on its relevance alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .revisions import NOTE_SIGNALS, Memory, note_signals

#: how many of the judged order's first candidates are reordered
TOP = 10
#: a pair scored at least this counts as a version for ``n_out``, ``newest_in`` and ``ev``
PAIR_AT = 0.07
#: ``p_out_close``: a newer candidate judged at most this much below
CLOSE = 0.5
#: the temperature of the chain evidence ``ev``
CHAIN_T = 0.5
#: how many first places the learned score fills (0: all of the candidates); below them the
#: candidates keep the judged order, except that the newer of a pair scored ``SWAP_AT`` or
#: more (or linked) comes before the older. Chosen with the weights (``present_ltr.py``) by
#: seven folds over p01-p49 (n = 787 current / 904 static of the present questions; cur@1
#: 0.842 in every cell): every place: cur_first 0.962, static@5 0.975; the first place
#: 0.948 / 0.986, and with the swaps 0.959 / 0.983; two places 0.958 / 0.982, with the swaps
#: 0.962 / 0.981 (the rules before it, leave-one-project-out: cur@1 0.811, cur_first 0.966,
#: static@5 0.982). One place with the swaps and two with them tie on the choice's sum (two
#: questions each way); one was taken: below the answer the judge's order stands, and the
#: version a current memory replaced follows it as history. Seven folds over p94-p125 (the
#: twenty-first session's grid, with ``NOTE_SIGNALS``) chose one place with the swaps again
#: (utility 2.737; every place 2.734 at best, two places 2.733)
LEAD = 1
#: below the first ``LEAD`` places, a pair scored at least this puts the newer memory first
SWAP_AT = PAIR_AT

FEATURES = ("gap", "rrank", "sup_link", "head_link", "p_out", "p_out_close", "p_in", "ev",
            "recency", "n_out", "newest_in", "log_notsup", "now_x_in", "now_x_newest",
            "now_x_recency", "lift", "sink", "p_in_rel", "newest_rel", "p_out_sole") + NOTE_SIGNALS

# Fitted by bench/lever_study/present_ltr.py on p94-p141 (its last lines: rank_replay.py dumps of
# dev-y to dev-aj, every pair scored by the pair model fitted on p01-p93; lead 1 with the swaps, L2 1,
# static questions weighted 0.1, chosen by seven folds over p94-p125; bench/lever_study/README.md,
# twenty-first session). Until then: fitted on p01-p65 without ``NOTE_SIGNALS`` (14th session).
_MEAN = (-1.93474, 0.292897, 0.161703, 0.17028, 0.154489, 0.11561, 0.162683, 0.17551, 0.395803, 0.32567, 0.19601, -0.452369, 0.0177316, 0.0202501, 0.0387508, 0.103361, 0.0958308, 0.070471, 0.0819805, 0.0962277, 0.0857653, 0.365753, 0.0154258, 0.055271, 0.00518166, 0.00440739)
_SD = (1.1705, 0.263037, 0.368178, 0.375879, 0.317725, 0.280772, 0.321434, 0.445298, 0.351332, 0.681991, 0.396976, 1.11699, 0.117931, 0.140855, 0.162441, 0.267175, 0.261115, 0.196886, 0.236398, 0.260085, 0.280017, 0.481641, 0.123239, 0.228508, 0.071797, 0.0662417)
_WEIGHTS = (2.85106, 0.290123, -0.0876971, -0.12732, 0.077571, 0.0993536, 0.305128, 0.679979, 0.624513, -0.0545612, -0.526307, 0.569229, -0.0339915, 0.104976, 0.112945, 0.0564165, -0.219952, 0.528885, 0.270961, 0.132296, 0.136224, 0.29973, 0.191508, -0.127947, -0.241608, -0.247489)


@dataclass(frozen=True)
class Item:
    """One candidate as the features read it."""

    key: object
    score: float          # the judged score (the blend)
    day: int | None       # the day it was written (a proleptic ordinal: ``date.toordinal``)
    text: str
    judged: int           # its 0-based place in the judged order
    heading: str | None = None


def reach(linked: dict) -> dict:
    """A key -> every key a chain of links leads to from it (``linked``: a key -> the keys
    of the memories that replace it directly; ``revisions.Graph.newer``)."""
    from .revisions import Graph

    graph = Graph((old, new) for old, news in linked.items() for new in news)
    return {start: graph.newer(start) for start in linked}


def matrix(items: Sequence[Item], pairs: dict, reach: dict, link_at: float) -> tuple[np.ndarray, np.ndarray]:
    """(P, L): P[i, j] the score of ``items[j]`` superseding ``items[i]`` (``pairs``: (old,
    new) -> score; a linked pair at least ``link_at``), L[i, j] whether a link chain leads
    from i to j. A pair of two memories written on one day counts only if linked: notes
    written an hour apart with bodies alike are more often two items of one list than a
    fact and its change."""
    n = len(items)
    P = np.zeros((n, n))
    L = np.zeros((n, n), dtype=bool)
    for a, x in enumerate(items):
        newer = reach.get(x.key, ())
        for b, y in enumerate(items):
            if a != b:
                linked = y.key in newer
                L[a, b] = linked
                same_day = x.day is not None and x.day == y.day
                P[a, b] = max(0.0 if same_day else pairs.get((x.key, y.key), 0.0), link_at if linked else 0.0)
    return P, L


def features(items: Sequence[Item], P: np.ndarray, L: np.ndarray, now: bool) -> np.ndarray:
    """``FEATURES`` of each of ``items`` (module docstring)."""
    n = len(items)
    X = np.zeros((n, len(FEATURES)))
    if not n:
        return X
    z = np.array([it.score for it in items], dtype=np.float64)
    bad = ~np.isfinite(z)  # a score the judge could not give counts as the lowest one
    if bad.any():
        z[bad] = z[~bad].min() if (~bad).any() else 0.0
    known = [it.day for it in items if it.day is not None]
    lo, span = (min(known), max(known) - min(known)) if known else (0.0, 0.0)
    close = z[None, :] >= z[:, None] - CLOSE
    judged = np.array([it.judged for it in items])
    above = judged[:, None] < judged[None, :]  # above[k, i]: k was judged above i
    rel = np.exp(z - z.max())  # 1 for the best-judged candidate, less the further below
    now_f = float(now)
    for i, it in enumerate(items):
        olds = np.flatnonzero(P[:, i] >= PAIR_AT)
        newer = P[i] >= PAIR_AT
        ev = z[i]
        if olds.size:
            zs = np.concatenate(([z[i]], z[olds]))
            top = zs.max()
            ev = top + CHAIN_T * math.log(float(np.exp((zs - top) / CHAIN_T).sum()))
        p_in = float(P[:, i].max(initial=0.0))
        newest = float(bool(olds.size) and not newer.any())
        recency = (it.day - lo) / span if it.day is not None and span > 0 else 0.0
        X[i] = [
            z[i] - z.max(),
            1.0 / (1.0 + it.judged),
            float(L[i].any()),
            float(L[:, i].any()),
            float(P[i].max(initial=0.0)),
            float((P[i] * close[i]).max(initial=0.0)),
            p_in,
            ev - z[i],
            recency,
            float(newer.sum()),
            newest,
            float(np.log1p(-np.minimum(P[i], 0.95)).sum()),
            now_f * p_in,
            now_f * newest,
            now_f * recency,
            float((P[:, i] * above[:, i]).max(initial=0.0)),
            float((P[i] * above[i]).max(initial=0.0)),
            float((P[:, i] * rel).max(initial=0.0)),
            newest * float(rel[olds].max(initial=0.0)),
            float(P[i].max(initial=0.0)) if newer.sum() == 1 else 0.0,
            *note_signals(Memory(str(it.key), it.text, it.heading, None)),
        ]
    return X


def score(X: np.ndarray, mean=None, sd=None, weights=None) -> np.ndarray:
    """The learned score of each row of ``X`` (the module's fitted constants unless given)."""
    mean = np.asarray(_MEAN if mean is None else mean)
    sd = np.asarray(_SD if sd is None else sd)
    weights = np.asarray(_WEIGHTS if weights is None else weights)
    return ((X - mean) / sd) @ weights


def order(ordered: list, *, pairs: dict, reach: dict, now: bool, link_at: float, key: Callable,
          field: str = "judge_score", model=None, lead: int | None = None, swap_at: float | None = None) -> list:
    """``ordered`` (the judged order, best first) with its first ``TOP`` candidates
    reordered: the first ``lead`` places (``LEAD``; 0: all) go to the best of them by the
    learned score, the other candidates follow in the judged order with the newer of each
    pair scored ``swap_at`` (``SWAP_AT``) or more before the older, and the rest of
    ``ordered`` after them. ``model``: (mean, sd, weights) instead of the fitted constants.
    ``field`` (the judged score) of each reordered candidate is raised to the best of those
    it now ranks above, so that the scores shown still fall with the rank."""
    keep = list(range(min(TOP, len(ordered))))
    if len(keep) < 2:
        return ordered
    items = [_item(ordered[k], k, key, field) for k in keep]
    if conversation(items):
        return ordered
    P, L = matrix(items, pairs, reach, link_at)
    s = score(features(items, P, L, now), *(model or (None, None, None)))
    by_score = [keep[i] for i in sorted(range(len(keep)), key=lambda i: (-s[i], keep[i]))]
    lead = LEAD if lead is None else lead
    if lead:  # the learned score fills the first places; the others keep the judged order
        first = by_score[:lead]
        by_score = first + [k for k in sorted(keep) if k not in first]
    ranked = [ordered[k] for k in by_score]
    swap_at = SWAP_AT if swap_at is None else swap_at
    if lead and swap_at <= 1:  # below the first places, the newer of a scored pair comes first
        from .pipeline import supersede_order

        newer: dict = {}  # (pairs that involve the first places change nothing there)
        for a, b in zip(*np.nonzero(P >= swap_at)):
            newer.setdefault(items[a].key, set()).add(items[b].key)
        ranked = ranked[:lead] + supersede_order(ranked[lead:], newer, key)
    best = float("-inf")
    for c in reversed(ranked):
        v = getattr(c, field, None)
        best = max(best, float("-inf") if v is None else float(v))
        if v is not None and best > v:
            setattr(c, field, best)
    kept = set(keep)
    return ranked + [c for k, c in enumerate(ordered) if k not in kept]


def conversation(items: Sequence[Item]) -> bool:
    """Whether most candidates are conversation turns (they open with a speaker's name or a
    chat role: ``revisions.speaker``). Such a list keeps the judged order (links still
    apply): what a person says later rarely corrects what they said before (one candidate
    pair of LoCoMo's turns in ten scores 0.01 or more), and the weights were fitted on
    notes. On LoCoMo dev7's report half the learned order over chat turns cost NDCG@10
    0.597 -> 0.592 (paired -0.005 [-0.010, -0.001], n = 472)."""
    from .revisions import speaker

    return 2 * sum(1 for it in items if speaker(it.text)) > len(items)


def _item(c, k: int, key: Callable, field: str) -> Item:
    v = getattr(c, field, None)
    when = getattr(c, "created_at", None)
    return Item(key(c), float("-inf") if v is None else float(v),
                when.date().toordinal() if when is not None else None,
                getattr(c, "text", "") or "", k, getattr(c, "heading", None))
