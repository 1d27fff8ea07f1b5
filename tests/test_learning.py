"""Reranked search and what it learns: RIF, adaptive depth, lifecycle, persistence."""

import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import BIN
from lethe_sql.judges import encode_query
from lethe_sql.learn import kmeans, refit
from lethe_sql.pipeline import run
from lethe_sql.settings import Settings

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima"]


class FixedJudge:
    """A judge with known scores (by entry text), recording what it was asked to score."""

    name = "fixed"
    default_threshold = 0.0

    def __init__(self, scores):
        self.scores = scores
        self.calls = []

    def score(self, con, enc, ids):
        self.calls.append(list(ids))
        texts = dict(con.execute("SELECT id, text FROM entries").fetchall())
        return {i: float(self.scores.get(texts[i], -5.0)) for i in ids}

    def logits(self, scores):
        return np.asarray(scores, dtype=np.float64)


@pytest.fixture()
def store(project):
    # six notes added in one burst, one word apart: with revision detection on, each would
    # be read as a revision of the one before (they are stamped a second apart); these
    # tests are about learning from use, over a store without links
    project.settings = project.settings.with_(revisions=False)
    for w in WORDS:
        project.add(f"note about {w} and the shared topic")
    return project


def sup(con, cluster=0):
    return dict(con.execute("SELECT id, s FROM rif_suppression WHERE cluster = ?", [cluster]).fetchall())


def id_of(con, word):
    return con.execute("SELECT id FROM entries WHERE text LIKE ?", [f"%{word}%"]).fetchone()[0]


def test_loser_and_winner_updates_follow_the_rules(store):
    con = store.con
    s = Settings(top_k=2, k_shallow=6, k_deep=6, depth=6)
    enc = encode_query(store.embedder, "shared topic")
    first = run(con, enc, s, None, learn=False)
    pool_ids = [c.id for c in first.pool[:6]]  # first stage order (no suppression yet)
    texts = dict(con.execute("SELECT id, text FROM entries").fetchall())
    # The judge reverses the pool: the last pool entry wins.
    judge = FixedJudge({texts[i]: float(6 - r) for r, i in enumerate(reversed(pool_ids))})
    out = run(con, enc, s, judge, learn=True)
    assert [c.id for c in out.results] == pool_ids[::-1][:2]
    got = sup(con)
    n = 6
    for c in out.pool:
        if c.final_rank:  # winners: nothing to reinforce from zero
            assert c.id not in got
            continue
        strength = max(0, c.judge_rank - c.pool_rank) / n / (1 + math.exp(c.judge_score))
        if strength > 0:
            assert got[c.id] == pytest.approx(min(0.1 * strength, 1.0))
        else:
            assert c.id not in got
    assert con.execute("SELECT step, cluster, judge FROM query_log").fetchall() == [(1, 0, "fixed")]
    winners = con.execute("SELECT affinity, retrieval_count, last_retrieval_step FROM entries WHERE id = ?",
                          [out.results[0].id]).fetchone()
    assert winners == (pytest.approx(0.8 * 0.5 + 0.2 / (1 + math.exp(-out.results[0].judge_score))), 1, 1)


def test_suppression_decays_lazily_and_winners_are_reinforced(store):
    con = store.con
    a = id_of(con, "alpha")
    con.execute("INSERT INTO rif_suppression VALUES (0, ?, 0.5, 10)", [a])
    con.execute("UPDATE meta SET value = '110' WHERE key = 'search_step'")
    (s_now,) = con.execute("SELECT s FROM lethe_suppression_at(0, 110) WHERE id = ?", [a]).fetchone()
    assert s_now == pytest.approx(0.5 * math.exp(-0.005 * 100))
    s = Settings(top_k=1, k_shallow=12, k_deep=12, depth=12)
    judge = FixedJudge({"note about alpha and the shared topic": 9.0})
    out = run(con, encode_query(store.embedder, "alpha"), s, judge, learn=True)
    assert out.results[0].id == a
    assert out.results[0].suppression == pytest.approx(0.5 * math.exp(-0.005 * 101))
    assert sup(con)[a] == pytest.approx(max(0, 0.5 * math.exp(-0.005 * 101) - 0.05))


def test_suppression_penalises_the_fused_score_for_its_cluster_only(store):
    con = store.con
    enc = encode_query(store.embedder, "note about golf")
    # RRF-scale fused scores: alpha = 0.3 was set for them (the z-fused default spreads wider)
    s = Settings(top_k=3, k_shallow=12, depth=12, k_deep=12, fusion="rrf")
    base = run(con, enc, s, None, learn=False)
    top = base.results[0].id
    con.execute("INSERT INTO rif_suppression VALUES (7, ?, 1.0, 0)", [top])  # another cluster
    assert run(con, enc, s, FixedJudge({}), learn=False).pool[0].id == top
    con.execute("INSERT INTO rif_suppression VALUES (0, ?, 1.0, 0)", [top])
    pool = run(con, enc, s, FixedJudge({}), learn=False).pool
    moved = next(c for c in pool if c.id == top)
    assert moved.pool_rank > 1
    assert moved.adjusted == pytest.approx(moved.fused - 0.3 * 1.0 * math.exp(-0.005 * 1))


def test_adaptive_depth_judges_only_new_candidates(store):
    con = store.con
    enc = encode_query(store.embedder, "shared topic note")
    s = Settings(top_k=3, k_shallow=4, k_deep=10, depth=4)
    high = FixedJudge({})  # every score -5 < threshold 0: go deep
    out = run(con, enc, s, high, learn=False)
    assert out.deep and len(high.calls) == 2
    assert len(high.calls[0]) == 4 and not set(high.calls[0]) & set(high.calls[1])
    assert len(out.pool) == 10
    texts = dict(con.execute("SELECT id, text FROM entries").fetchall())
    good = FixedJudge({texts[i]: 1.0 for i in high.calls[0]})
    out = run(con, enc, s, good, learn=False)
    assert not out.deep and len(good.calls) == 1


def test_a_judge_that_always_goes_deep_scores_the_first_stage_pool_once(store):
    """Threshold +inf (the late-interaction judge's default): one first-stage call for k_deep
    candidates at depth k_deep, judged in one batch, in first-stage order."""
    from lethe_sql.pipeline import _candidates

    con = store.con
    enc = encode_query(store.embedder, "shared topic note")
    s = Settings(top_k=3, k_shallow=4, k_deep=10, depth=4)
    j = FixedJudge({})
    j.default_threshold = math.inf
    out = run(con, enc, s, j, learn=False)
    assert out.deep and len(j.calls) == 1
    assert j.calls[0] == [c.id for c in _candidates(con, enc, 10, 10, 0, 1, s)]
    assert sorted(c.id for c in out.pool) == sorted(j.calls[0])


def test_lifecycle_tiers_and_apoptosis(store):
    con = store.con
    a = id_of(con, "alpha")
    s = Settings(top_k=1, k_shallow=3, depth=3, k_deep=3)
    judge = FixedJudge({"note about alpha and the shared topic": 6.0})
    enc = encode_query(store.embedder, "alpha")
    tiers = []
    for _ in range(5):
        run(con, enc, s, judge, learn=True)
        tiers.append(con.execute("SELECT tier FROM entries WHERE id = ?", [a]).fetchone()[0])
    assert tiers == ["naive", "naive", "gc", "gc", "memory"]
    b = id_of(con, "bravo")
    con.execute("UPDATE entries SET affinity = 0.1, last_retrieval_step = 1 WHERE id = ?", [b])
    con.execute("UPDATE meta SET value = '2000' WHERE key = 'search_step'")
    run(con, enc, s, judge, learn=True)
    assert con.execute("SELECT tier FROM entries WHERE id = ?", [b]).fetchone()[0] == "apoptotic"
    hits = store.search("note about bravo", top_k=12, judge="none", learn=False)
    assert b not in [h.id for h in hits]
    assert (store.memory_dir / next(store.memory_dir.glob("*.md")).name).read_text().count("bravo") == 1


def test_read_only_and_learn_false_change_nothing(store):
    con = store.con

    def snapshot():
        return (
            con.execute("SELECT count(*), sum(s) FROM rif_suppression").fetchone(),
            con.execute("SELECT count(*) FROM query_log").fetchone(),
            con.execute("SELECT sum(retrieval_count), sum(affinity) FROM entries").fetchone(),
            con.execute("SELECT value FROM meta WHERE key = 'search_step'").fetchone(),
        )

    store.search("shared topic")
    before = snapshot()
    store.search("shared topic", learn=False)
    assert snapshot() == before


def test_kmeans_separates_obvious_clusters():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(1, 8)) + 0.05 * rng.normal(size=(20, 8))
    b = -a[0] + 0.05 * rng.normal(size=(20, 8))
    x = np.vstack([a, b])
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    _, labels = kmeans(x, 2, seed=1)
    assert len(set(labels[:20])) == 1 and len(set(labels[20:])) == 1 and labels[0] != labels[20]


def test_refit_moves_suppression_to_new_clusters(store):
    con = store.con
    s = Settings(n_clusters=2)
    for w in WORDS[:4] * 5:
        run(con, encode_query(store.embedder, f"question about {w}"), s, FixedJudge({}), learn=True)
    n_log = con.execute("SELECT count(*) FROM query_log").fetchone()[0]
    assert n_log == 20
    assert con.execute("SELECT count(*) FROM rif_centroids").fetchone()[0] == 2  # fitted at 10 x 2 queries
    assert set(r[0] for r in con.execute("SELECT DISTINCT cluster FROM rif_suppression").fetchall()) <= {1, 2}
    a = id_of(con, "alpha")
    con.execute("DELETE FROM rif_suppression")
    con.execute("INSERT INTO rif_suppression VALUES (1, ?, 0.4, 20)", [a])
    refit(con, 2, 21, seed=3)
    moved = con.execute("SELECT cluster, s FROM rif_suppression WHERE id = ?", [a]).fetchall()
    assert len(moved) == 1 and moved[0][1] == pytest.approx(0.4)


def test_rif_state_survives_separate_processes_and_explain_matches_search(tmp_path, cli_env):
    lethe = str(BIN / "lethe")
    r = ["--root", str(tmp_path)]

    def sh(*args):
        p = subprocess.run([lethe, *r, *args], env=cli_env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        return p.stdout

    for w in WORDS[:8]:
        sh("add", f"memo on {w}: the deploy pipeline and its shared settings")
    sh("search", "deploy pipeline settings", "--json")
    sh("search", "deploy pipeline settings", "--json")
    st = json.loads(sh("rif", "status", "--json"))
    assert st["search_step"] == 2 and st["logged_queries"] == 2
    hits = json.loads(sh("search", "shared settings", "--json", "--read-only"))
    assert hits[0]["reranked"] is True and hits[0]["judge"] == "late-interaction"
    ex = json.loads(sh("explain", "shared settings", "--json"))
    assert [h["id"] for h in hits] == [x["id"] for x in ex["results"]]
    assert json.loads(sh("rif", "status", "--json"))["search_step"] == 2  # read-only and explain learn nothing
    sh("rif", "reset")
    st = json.loads(sh("rif", "status", "--json"))
    assert (st["search_step"], st["logged_queries"], st["suppressed_pairs"]) == (0, 0, 0)


def test_rif_final_alpha_takes_suppression_off_the_final_score_only_when_asked():
    from types import SimpleNamespace

    from lethe_sql.pipeline import judge_order
    from lethe_sql.settings import Settings

    def pool():
        return [SimpleNamespace(id="a", pool_rank=1, suppression=0.8, judge_raw=None, judge_score=None, judge_rank=None),
                SimpleNamespace(id="b", pool_rank=2, suppression=0.0, judge_raw=None, judge_score=None, judge_rank=None)]

    plain = judge_order(pool(), Settings(), None, [2.0, 1.5])  # a judge without blending: raw scores order
    assert [c.id for c in plain] == ["a", "b"]
    late = judge_order(pool(), Settings(rif_final_alpha=1.0), None, [2.0, 1.5])
    assert [c.id for c in late] == ["b", "a"] and late[1].judge_score == pytest.approx(2.0 - 0.8)
    off = judge_order(pool(), Settings(rif_final_alpha=1.0, rif=False), None, [2.0, 1.5])
    assert [c.id for c in off] == ["a", "b"]


# -- batched updates (learn.apply) and the writer's queue ---------------------------


def _updates(ids, n, seed=0, rif=True):
    """``n`` synthetic search updates over ``ids``: random pool order, judge ranks, logits and
    two winners each; the same entries win again and again (fixed seed)."""
    from lethe_sql.learn import Update

    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        order = list(rng.permutation(ids)[:6])
        judge_rank = list(rng.permutation(6) + 1)
        winners = {order[judge_rank.index(1)], order[judge_rank.index(2)]}
        vec = rng.normal(size=384).astype(np.float32)
        out.append(Update(f"query {k}", vec / np.linalg.norm(vec), "fixed",
                          [(i, p + 1, int(judge_rank[p]), float(rng.normal(0, 2)), i in winners)
                           for p, i in enumerate(order)], rif))
    return out


def _learned_state(con):
    return (
        con.execute("SELECT cluster, id, s, last_step FROM rif_suppression ORDER BY cluster, id").fetchall(),
        con.execute("SELECT id, affinity, retrieval_count, last_retrieval_step, tier FROM entries ORDER BY id").fetchall(),
        con.execute("SELECT step, query, cluster, judge FROM query_log ORDER BY step").fetchall(),
        con.execute("SELECT key, value FROM meta WHERE key IN ('search_step', 'rif_fit_queries') ORDER BY key").fetchall(),
        con.execute("SELECT cluster, size, fit_step FROM rif_centroids ORDER BY cluster").fetchall(),
    )


def _two_copies(store, tmp_path, embedder):
    import shutil

    from lethe_sql import MemoryStore

    store.close()
    other = tmp_path / "copy.duckdb"
    shutil.copyfile(store.db_path, other)
    wal = Path(str(store.db_path) + ".wal")
    if wal.exists():
        shutil.copyfile(wal, str(other) + ".wal")
    return store, MemoryStore(store.root, db_path=other, embedder=embedder)


def test_a_batch_of_updates_leaves_what_one_at_a_time_leaves(store, tmp_path, embedder):
    """Sixty updates applied as one call and one by one: the same suppression, lifecycle,
    log and clusters, a refit in the middle included (n_clusters 2: at 20 logged queries,
    then at 40 with refit_growth 2)."""
    from lethe_sql.learn import apply

    one, batch = _two_copies(store, tmp_path, embedder)
    ids = [r[0] for r in one.con.execute("SELECT id FROM entries ORDER BY id").fetchall()]
    s = Settings(n_clusters=2, refit_growth=2.0)
    ups = _updates(ids, 60)
    for u in ups:
        apply(one.con, s, [u])
    apply(batch.con, s, ups)
    a, b = _learned_state(one.con), _learned_state(batch.con)
    assert a[0] and a[2][-1][0] == 60
    assert [r[2] for r in a[2][:20]] == [0] * 20 and {r[2] for r in a[2][20:]} <= {1, 2}  # cues after the refit
    assert a[3] == [("rif_fit_queries", "40"), ("search_step", "60")]
    for x, y in zip(a, b):
        assert x == y
    batch.close()


def test_a_batch_walks_every_step_for_its_winners(store):
    """Step 1000 reached: an entry idle since step 0 with affinity 0.1 becomes apoptotic at
    the batch's first step and stays so when it wins two steps later (its affinity and
    count move); another wins three times: naive -> gc, affinity 0.8^3 a + ..."""
    from lethe_sql.learn import Update, apply

    con = store.con
    a, b = id_of(con, "alpha"), id_of(con, "bravo")
    con.execute("UPDATE entries SET affinity = 0.1, last_retrieval_step = 0 WHERE id = ?", [a])
    con.execute("UPDATE entries SET last_retrieval_step = 999 WHERE id <> ?", [a])
    con.execute("UPDATE meta SET value = '1000' WHERE key = 'search_step'")
    vec = np.zeros(384, dtype=np.float32)
    vec[0] = 1.0
    win = lambda *ids: [(i, 1, 1, 0.0, True) for i in ids]  # noqa: E731 - sigmoid(0) = 0.5
    apply(con, Settings(), [Update("q1", vec, "fixed", win(b), False), Update("q2", vec, "fixed", [], False),
                            Update("q3", vec, "fixed", win(a, b), False), Update("q4", vec, "fixed", win(b), False)])
    row = lambda i: con.execute(  # noqa: E731
        "SELECT affinity, retrieval_count, last_retrieval_step, tier FROM entries WHERE id = ?", [i]).fetchone()
    assert row(a) == (pytest.approx(0.8 * 0.1 + 0.2 * 0.5), 1, 1003, "apoptotic")
    aff = 0.5
    for _ in range(3):
        aff = 0.8 * aff + 0.2 * 0.5
    assert row(b) == (pytest.approx(aff), 3, 1004, "gc")
    assert con.execute("SELECT value FROM meta WHERE key = 'search_step'").fetchone() == ("1004",)


def test_a_writer_applies_what_it_learned_in_runs_and_when_it_closes(store, monkeypatch):
    import lethe_sql.learn as L
    from lethe_sql import MemoryStore

    monkeypatch.setattr(L, "WRITER_BATCH", 3)
    logged = lambda st: st.con.execute("SELECT step, query FROM query_log ORDER BY step").fetchall()  # noqa: E731
    outs = [store.search_outcome(f"note about {w}", judge="late-interaction") for w in ("alpha", "bravo")]
    assert [o.step for o in outs] == [1, 2] and all(o.learned for o in outs)
    assert logged(store) == []  # queued
    store.search_outcome("note about charlie", judge="late-interaction")
    assert logged(store) == [(1, "note about alpha"), (2, "note about bravo"), (3, "note about charlie")]
    assert store.search_outcome("note about delta", judge="late-interaction").step == 4
    store.close()
    with MemoryStore(store.root, embedder=store.embedder) as again:
        assert [r[0] for r in logged(again)] == [1, 2, 3, 4]


def test_an_update_keeps_the_cue_it_ran_under_until_the_clusters_refit(store):
    """A queued search's cue is used as it was (no cluster is computed again) until a refit
    in the same run; after it, the cue is computed from the new clusters."""
    from lethe_sql.learn import apply

    con = store.con
    ids = [r[0] for r in con.execute("SELECT id FROM entries ORDER BY id").fetchall()]
    ups = [u._replace(cue=7) for u in _updates(ids, 25, seed=3)]
    apply(con, Settings(n_clusters=2, refit_growth=2.0), ups)
    clusters = [r[0] for r in con.execute("SELECT cluster FROM query_log ORDER BY step").fetchall()]
    assert clusters[:20] == [7] * 20 and set(clusters[20:]) <= {1, 2}
