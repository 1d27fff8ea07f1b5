"""The learned order of a question about the present (lethe_sql/present.py): its features
pinned on a hand-made pool, the candidates it reorders, and the order it gives."""

from __future__ import annotations

import math
from datetime import datetime

import numpy as np
import pytest

from lethe_sql import present
from lethe_sql.pipeline import supersede_order


class Cand:
    def __init__(self, id_, score, day, heading="", text=""):
        self.id, self.judge_score, self.heading, self.text = id_, score, heading, text
        self.created_at = datetime(2026, 3, day, 9, 0)


def pool():
    """A: the old port note, judged first; B: four days later, judged a little lower, a pair
    scored 0.3 over A; C: a load test between them, a pair scored 0.05 over A."""
    return [Cand("A", 2.0, 1, "09:00 Staging Postgres port", "Staging Postgres listens on 5433."),
            Cand("B", 1.8, 5, "09:00 Port moved", "Postgres on staging is on 5434 now."),
            Cand("C", 1.0, 3, "09:00 Broker load test", "Ran the broker load test against staging.")]


def featurize(ordered, pairs, linked=None, now=False):
    reach = present.reach(linked or {})
    keep = list(range(min(present.TOP, len(ordered))))
    items = [present._item(ordered[k], k, lambda c: c.id, "judge_score") for k in keep]
    P, L = present.matrix(items, pairs, reach, 0.4)
    return {f: tuple(round(float(v), 4) for v in col)
            for f, col in zip(present.FEATURES, present.features(items, P, L, now).T)}


def test_the_features_of_a_pool_are_pinned():
    X = featurize(pool(), {("A", "B"): 0.3, ("A", "C"): 0.05}, now=True)
    ev_b = 2.0 + 0.5 * math.log(1 + math.exp(-0.4)) - 1.8
    assert X == {
        "gap": (0.0, -0.2, -1.0),
        "rrank": (1.0, 0.5, round(1 / 3, 4)),
        "sup_link": (0.0, 0.0, 0.0),
        "head_link": (0.0, 0.0, 0.0),
        "p_out": (0.3, 0.0, 0.0),
        "p_out_close": (0.3, 0.0, 0.0),   # C is judged more than CLOSE below A
        "p_in": (0.0, 0.3, 0.05),
        "ev": (0.0, round(ev_b, 4), 0.0),  # C's pair is under PAIR_AT: no chain
        "recency": (0.0, 1.0, 0.5),
        "n_out": (1.0, 0.0, 0.0),
        "newest_in": (0.0, 1.0, 0.0),
        "log_notsup": (round(math.log(0.7) + math.log(0.95), 4), 0.0, 0.0),
        "now_x_in": (0.0, 0.3, 0.05),
        "now_x_newest": (0.0, 1.0, 0.0),
        "now_x_recency": (0.0, 1.0, 0.5),
        "lift": (0.0, 0.3, 0.05),          # both are newer versions of A, judged above them
        "sink": (0.3, 0.0, 0.0),
        "p_in_rel": (0.0, 0.3, 0.05),      # A is the best judged: weight e^0 = 1
        "newest_rel": (0.0, 1.0, 0.0),
        "p_out_sole": (0.3, 0.0, 0.0),     # only B scores PAIR_AT or more over A
        "title_change": (0.0, 1.0, 0.0),   # "Port moved"
        "change_words": (0.0, 1.0, 0.0),
        "corrects": (0.0, 0.0, 0.0),
        "note_kind": (0.0, 0.0, 1.0),      # "Broker load test": a title ending in "test"
        "instructs": (0.0, 0.0, 0.0),
        "reports_elapsed": (0.0, 0.0, 0.0),
    }


def test_a_question_that_does_not_say_now_has_no_now_features():
    X = featurize(pool(), {("A", "B"): 0.3}, now=False)
    assert X["now_x_in"] == X["now_x_newest"] == X["now_x_recency"] == (0.0, 0.0, 0.0)


def test_a_link_counts_as_a_pair_scored_at_the_link_threshold_and_marks_both_ends():
    X = featurize(pool(), {("A", "B"): 0.2}, linked={"A": {"B"}})
    assert X["p_out"][0] == 0.4 and X["p_in"][1] == 0.4
    assert X["sup_link"] == (1.0, 0.0, 0.0) and X["head_link"] == (0.0, 1.0, 0.0)


def test_only_the_judged_top_ten_are_reordered_and_links_chain():
    """A version judged below the top ten is no candidate (a link may still lift it above
    what it replaced: ``supersede_order``); ``reach`` follows chains of links."""
    ordered = [Cand(f"m{k:02d}", 10.0 - k, 1 + k) for k in range(12)]
    newest = np.eye(len(present.FEATURES))[present.FEATURES.index("recency")] * 10
    model = (np.zeros(len(present.FEATURES)), np.ones(len(present.FEATURES)), newest)
    ranked = [c.id for c in present.order(ordered, pairs={}, reach={}, now=False, link_at=0.4,
                                          key=lambda c: c.id, model=model, lead=0)]
    assert ranked == [f"m{k:02d}" for k in (9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 10, 11)]
    assert present.reach({"m01": {"m12"}, "m12": {"m13"}, "m11": {"m05"}}) == {
        "m01": {"m12", "m13"}, "m12": {"m13"}, "m11": {"m05"}}


def test_the_order_follows_the_model_and_the_scores_shown_fall_with_the_rank():
    only_judge = (np.zeros(len(present.FEATURES)), np.ones(len(present.FEATURES)),
                  np.eye(len(present.FEATURES))[present.FEATURES.index("gap")])
    newest = np.eye(len(present.FEATURES))[present.FEATURES.index("newest_in")] * 10 + only_judge[2]
    ordered = pool()
    kw = dict(pairs={("A", "B"): 0.3}, reach={}, now=False, link_at=0.4, key=lambda c: c.id)
    assert [c.id for c in present.order(ordered, model=only_judge, **kw)] == ["A", "B", "C"]
    ranked = present.order(pool(), model=(only_judge[0], only_judge[1], newest), **kw)
    assert [c.id for c in ranked] == ["B", "A", "C"]
    assert [c.judge_score for c in ranked] == [2.0, 2.0, 1.0]


def test_a_link_still_puts_the_newer_version_first_whatever_the_model_says():
    against = -np.eye(len(present.FEATURES))[present.FEATURES.index("head_link")] * 10
    model = (np.zeros(len(present.FEATURES)), np.ones(len(present.FEATURES)), against)
    ranked = present.order(pool(), pairs={}, reach=present.reach({"A": {"B"}}), now=False, link_at=0.4,
                           key=lambda c: c.id, model=model, lead=0)
    assert [c.id for c in ranked][-1] == "B"                       # the model alone puts it last
    assert [c.id for c in supersede_order(ranked, {"A": {"B"}})] == ["B", "A", "C"]


@pytest.mark.parametrize("n", [0, 1])
def test_a_pool_of_fewer_than_two_is_left_as_it_is(n):
    ordered = pool()[:n]
    assert present.order(ordered, pairs={}, reach={}, now=True, link_at=0.4, key=lambda c: c.id) == ordered


def test_a_list_of_chat_turns_keeps_the_judged_order():
    lines = [Cand("old", 2.0, 1, "10:00 chat", "Maya: crash reports go to Unity Cloud Diagnostics."),
             Cand("new", 1.9, 20, "10:00 chat", "Maya: crash reports are sent to Sentry now."),
             Cand("x", 1.0, 3, "11:00 chat", "Omar: the lobby shows 8 rooms per page.")]
    items = [present._item(c, k, lambda c: c.id, "judge_score") for k, c in enumerate(lines)]
    assert present.conversation(items)
    newest = np.eye(len(present.FEATURES))[present.FEATURES.index("newest_in")] * 10
    model = (np.zeros(len(present.FEATURES)), np.ones(len(present.FEATURES)), newest)
    kw = dict(pairs={("old", "new"): 0.3}, reach={}, now=True, link_at=0.4, key=lambda c: c.id, model=model)
    assert [c.id for c in present.order(lines, **kw)] == ["old", "new", "x"]
    notes = pool()   # the same model over notes puts the newer version first
    assert not present.conversation([present._item(c, k, lambda c: c.id, "judge_score") for k, c in enumerate(notes)])
    assert [c.id for c in present.order(notes, **{**kw, "pairs": {("A", "B"): 0.3}})][0] == "B"


def test_a_candidate_the_judge_could_not_score_counts_as_the_lowest():
    cands = pool()
    cands[1].judge_score = None
    X = featurize(cands, {})
    assert X["gap"] == (0.0, -1.0, -1.0)   # B as low as C, the lowest scored
    ranked = present.order(cands, pairs={}, reach={}, now=False, link_at=0.4, key=lambda c: c.id)
    assert [c.id for c in ranked][0] == "A"


def test_a_pair_of_one_day_counts_only_when_linked():
    """Notes written an hour apart are more often two items of one list than a fact and its
    change: their scored pair is left out, a link is not."""
    a, b = Cand("a", 2.0, 7, "09:00 Dashboard cache"), Cand("b", 1.9, 7, "09:30 Session store")
    X = featurize([a, b], {("a", "b"): 0.6})
    assert X["p_out"] == (0.0, 0.0) and X["p_in"] == (0.0, 0.0) and X["recency"] == (0.0, 0.0)
    X = featurize([a, b], {("a", "b"): 0.6}, linked={"a": {"b"}})
    assert X["p_out"] == (0.4, 0.0) and X["p_in"] == (0.0, 0.4)


def test_the_learned_score_fills_the_first_place_and_below_it_the_newer_of_a_pair_comes_first():
    cands = pool() + [Cand("D", 0.5, 9, "09:00 Lunch", "Lunch is at noon.")]
    recency = np.eye(len(present.FEATURES))[present.FEATURES.index("recency")]
    model = (np.zeros(len(present.FEATURES)), np.ones(len(present.FEATURES)), recency)
    kw = dict(reach={}, now=False, link_at=0.4, key=lambda c: c.id, model=model)
    assert present.LEAD == 1 and present.SWAP_AT == present.PAIR_AT
    assert [c.id for c in present.order(list(cands), pairs={}, **kw)] == ["D", "A", "B", "C"]
    assert [c.id for c in present.order(list(cands), pairs={}, lead=0, **kw)] == ["D", "B", "C", "A"]
    # below the first place, B (a pair scored over A at SWAP_AT or more) comes before A
    assert [c.id for c in present.order(list(cands), pairs={("A", "B"): 0.3}, **kw)] == ["D", "B", "A", "C"]
    assert [c.id for c in present.order(list(cands), pairs={("A", "B"): 0.05}, **kw)] == ["D", "A", "B", "C"]


def test_the_note_signals_say_what_kind_of_note_each_candidate_is():
    cands = [Cand("fix", 1.0, 2, "09:00 Correction: API port", "Correction: the API listens on 8081, not 8080."),
             Cand("how", 1.0, 3, "09:00 Rollbacks", "To roll back a deploy: run `make rollback` on api-1."),
             Cand("week", 1.0, 4, "09:00 Pooler", "A week on PgBouncer: 40 connections at peak, no errors.")]
    X = featurize(cands, {})
    assert X["corrects"] == (1.0, 0.0, 0.0)
    assert X["instructs"] == (0.0, 1.0, 0.0)
    assert X["reports_elapsed"] == (0.0, 0.0, 1.0)
    assert X["title_change"] == (1.0, 0.0, 0.0)   # "Correction" announces a change


def test_with_the_fitted_weights_a_note_that_announces_its_change_takes_the_first_place():
    """Two notes alike but for the title: the one judged second says that the port moved, and
    the fitted score puts it first (a version of a subject says it changes something; a note
    that uses the current version rarely does)."""
    plain = Cand("plain", 2.0, 5, "09:00 Staging port", "Postgres on staging is on 5434.")
    moved = Cand("moved", 2.0, 5, "09:00 Staging port moved", "Postgres on staging is on 5434.")
    ranked = present.order([plain, moved], pairs={}, reach={}, now=False, link_at=0.4, key=lambda c: c.id)
    assert [c.id for c in ranked] == ["moved", "plain"]
