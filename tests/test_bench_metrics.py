"""Bench metrics and statistics against hand-computed examples."""

import math

import numpy as np
import pytest

from lethe_bench import metrics as M
from lethe_bench import stats


def test_ndcg_graded_by_hand():
    # ranking: a (rel 2), x (0), b (rel 1); c (rel 1) is relevant but not retrieved
    rel = {"a": 2, "b": 1, "c": 1}
    got = M.ndcg_at_k(["a", "x", "b"], rel, 10)
    dcg = (2**2 - 1) / math.log2(2) + 0 + (2**1 - 1) / math.log2(4)  # 3 + 0.5
    idcg = 3 / math.log2(2) + 1 / math.log2(3) + 1 / math.log2(4)  # a, b, c in ideal order
    assert got == pytest.approx(dcg / idcg)
    assert got == pytest.approx(3.5 / (3 + 0.6309297535714575 + 0.5))


def test_ndcg_bounds_and_cutoff():
    rel = {"a": 1}
    assert M.ndcg_at_k(["a"], rel, 10) == 1.0
    assert M.ndcg_at_k(["x"] * 10 + ["a"], rel, 10) == 0.0  # rank 11 is past the cut
    assert M.ndcg_at_k(["x", "a"], rel, 10) == pytest.approx(1 / math.log2(3))
    # ideal is cut at k too: 12 relevant units, all 10 slots filled with relevant ones -> 1
    many = {f"r{i}": 1 for i in range(12)}
    assert M.ndcg_at_k([f"r{i}" for i in range(10)], many, 10) == pytest.approx(1.0)


def test_recall_mrr_recall_any():
    rel = {"a": 1, "b": 2, "c": 1, "d": 1}
    ranking = ["x", "b", "y", "c"]
    assert M.recall_at_k(ranking, rel, 2) == 0.25
    assert M.recall_at_k(ranking, rel, 10) == 0.5
    assert M.mrr(ranking, rel) == 0.5
    assert M.mrr(["x", "y"], rel) == 0.0
    assert M.mrr(ranking, rel, k=1) == 0.0
    assert M.recall_any_at_k(ranking, rel, 1) == 0.0
    assert M.recall_any_at_k(ranking, rel, 2) == 1.0


def test_no_relevant_unit_is_an_error():
    with pytest.raises(ValueError):
        M.ndcg_at_k(["a"], {}, 10)
    with pytest.raises(ValueError):
        M.recall_at_k(["a"], {"a": 0}, 10)


def test_top1_behaviour():
    sessions = {"s1t1": {"s1"}, "s1t2": {"s1"}, "s2t1": {"s2"}, "dup": {"s1", "s3"}}.get
    rel = {"s1t1": 1}
    assert M.top1_behaviour(["s1t1", "s2t1"], rel, sessions) == M.EXACT
    assert M.top1_behaviour(["s1t2", "s1t1"], rel, sessions) == M.SIBLING
    assert M.top1_behaviour(["s2t1", "s1t1"], rel, sessions) == M.WRONG_FAMILY
    assert M.top1_behaviour(["dup"], rel, sessions) == M.SIBLING  # an entry standing for turns of s1 and s3
    assert M.top1_behaviour([], rel, sessions) == M.NO_RESULT


def test_score_query_keys():
    rel = {"a": 1}
    s = M.score_query(["a"], rel)
    assert set(s) == {"ndcg@10", "recall@10", "recall@30", "mrr"}
    s = M.score_query(["a"], rel, sessions_of=lambda u: {"s"}, session_level=True)
    assert s["recall_any@5"] == 1.0 and s["top1_exact"] == 1.0 and s["top1_sibling"] == 0.0


def test_identical_configs_give_zero_delta_and_p_one():
    a = np.random.default_rng(1).random(200)
    res = stats.compare(a, a.copy(), seed=3)
    assert res["delta"] == 0.0 and res["ci95"] == [0.0, 0.0] and res["p"] == 1.0 and res["n"] == 200


def test_clear_shift_is_significant_and_ci_excludes_zero():
    rng = np.random.default_rng(2)
    a = rng.random(150)
    b = a + 0.1 + rng.normal(0, 0.05, 150)
    res = stats.compare(a, b, seed=0)
    assert res["delta"] == pytest.approx(float((b - a).mean()))
    lo, hi = res["ci95"]
    assert 0 < lo < res["delta"] < hi
    assert res["p"] < 0.001
    assert res["p"] == pytest.approx(1 / 10_001)  # no sign flip reaches the observed mean


def test_no_difference_on_average_is_not_significant():
    rng = np.random.default_rng(5)
    a = rng.random(300)
    b = a + rng.normal(0, 0.1, 300)
    b = b - (b - a).mean()  # a mean difference of zero (up to float noise)
    assert stats.permutation_p(a, b, seed=0) > 0.9


def test_statistics_are_deterministic_and_bounded():
    x = np.arange(50) / 50
    assert stats.bootstrap_ci(x, seed=7) == stats.bootstrap_ci(x, seed=7)
    lo, hi = stats.bootstrap_ci(x, seed=7)
    assert lo < x.mean() < hi
    assert stats.bootstrap_ci(np.ones(10)) == (1.0, 1.0)
    with pytest.raises(ValueError):
        stats.compare([1, 2], [1])
