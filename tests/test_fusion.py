"""Score-normalised fusion (lethe_fused), the candidates macro's two fusions, and the
late-interaction blend of the default search."""

from __future__ import annotations

import numpy as np
import pytest

from lethe_sql import MemoryStore
from lethe_sql.markdown import Document
from lethe_sql.settings import Settings
from lethe_sql.vectors import vec_literal

QUERY = "what did Caroline say about the support group"
CONTENT = "caroline say support group"  # QUERY without its stopwords: what lethe_fused's BM25 lists get


@pytest.fixture()
def store(conversation):
    return conversation


def _z(x):
    x = np.asarray(x, dtype=np.float64)
    sd = x.std()
    return (x - x.mean()) / sd if sd > 0 else np.zeros_like(x)


def test_fused_is_the_weighted_mean_of_z_scores_over_the_union_of_lists(store):
    con = store.con
    qvec = store.embed_query(QUERY)
    depth, w = 4, {"bm25": 0.5, "ctx": 1.0, "dense": 2.0}
    rows = con.execute(
        "SELECT id, score, rank, bm25_score, ctx_score, dense_score FROM lethe_fused(?, ?, 100, depth := ?, "
        "w_bm25 := ?, w_ctx := ?, w_dense := ?) ORDER BY rank",
        [QUERY, vec_literal(qvec), depth, w["bm25"], w["ctx"], w["dense"]],
    ).fetchall()
    assert con.execute("SELECT lethe_content_query(?)", [QUERY]).fetchone()[0] == CONTENT
    b = dict(con.execute("SELECT id, score FROM lethe_bm25(?, 1000)", [CONTENT]).fetchall())
    c = dict(con.execute("SELECT id, score FROM lethe_bm25_ctx(?, 1000)", [CONTENT]).fetchall())
    assert b != dict(con.execute("SELECT id, score FROM lethe_bm25(?, 1000)", [QUERY]).fetchall())
    emb = {i: np.asarray(v, dtype=np.float32) for i, v in con.execute("SELECT id, embedding FROM entries").fetchall()}
    d = {i: float(v @ qvec) for i, v in emb.items()}

    def top(scores):
        return {i for i, _ in sorted(scores.items(), key=lambda kv: (-round(kv[1], 9), kv[0]))[:depth]}

    ids = top(b) | top(c) | top(d)
    assert {r[0] for r in rows} == ids
    order = sorted(ids)
    zs = (w["bm25"] * _z([b.get(i, 0.0) for i in order]) + w["ctx"] * _z([c.get(i, 0.0) for i in order])
          + w["dense"] * _z([d[i] for i in order])) / sum(w.values())
    expected = dict(zip(order, zs))
    for i, score, rank, bs, cs, ds in rows:
        assert score == pytest.approx(expected[i], abs=1e-5)  # float32 cosines
        assert bs == pytest.approx(b.get(i, 0.0)) and cs == pytest.approx(c.get(i, 0.0))
        assert ds == pytest.approx(d[i], abs=1e-5)
    assert [r[2] for r in rows] == list(range(1, len(rows) + 1))
    assert [r[1] for r in rows] == sorted((r[1] for r in rows), reverse=True)


def test_candidates_offer_both_fusions(store):
    con = store.con
    qv = vec_literal(store.embed_query(QUERY))
    rrf = con.execute("SELECT id, fused FROM lethe_candidates(?, ?, 5, depth := 5, rrf := true) ORDER BY pool_rank",
                      [QUERY, qv]).fetchall()
    hybrid = con.execute("SELECT id, score FROM lethe_hybrid(?, ?, 10, depth := 5) ORDER BY round(score, 9) DESC, id",
                         [QUERY, qv]).fetchall()
    assert [r[0] for r in rrf] == [r[0] for r in hybrid[:5]]
    assert [r[1] for r in rrf] == pytest.approx([r[1] for r in hybrid[:5]])
    z = con.execute("SELECT id, fused, ctx_score FROM lethe_candidates(?, ?, 5, depth := 5) ORDER BY pool_rank",
                    [QUERY, qv]).fetchall()
    fused = con.execute("SELECT id, score FROM lethe_fused(?, ?, 5, depth := 5) ORDER BY rank", [QUERY, qv]).fetchall()
    assert [r[0] for r in z] == [r[0] for r in fused]
    assert all(r[2] is not None for r in z)


def test_default_search_orders_by_the_blend_of_maxsim_context_bm25_and_cues(store):
    s = Settings(k_deep=30)  # no deep pass with 12 entries; the question cue is on by default
    assert s.blend_question == -1.0
    out = store.search_outcome(QUERY, judge="late-interaction", learn=False, settings=s)
    assert out.judge == "late-interaction"
    pool = out.pool
    raw = np.array([c.judge_raw for c in pool])
    ctx = np.array([c.ctx_score for c in pool])
    bm25 = np.array([c.bm25_score or 0.0 for c in pool])
    asks = np.array([c.text.endswith("?") for c in pool], dtype=np.float64)  # QUERY names no time or period
    assert 0 < asks.sum() < len(pool)
    expected = (s.blend_judge * _z(raw) + s.blend_ctx * _z(ctx) + s.blend_bm25 * _z(bm25) + s.blend_question * asks) / (
        abs(s.blend_judge) + abs(s.blend_ctx) + abs(s.blend_bm25))
    for c, e in zip(pool, expected):
        assert c.judge_score == pytest.approx(e, abs=1e-9)
    scores = [c.judge_score for c in out.results]
    assert scores == sorted(scores, reverse=True)
    hits = store.search(QUERY, learn=False, top_k=3)
    assert [h.id for h in hits] == [c.id for c in out.results[:3]]
    assert store.con.execute("SELECT count(*) FROM query_log").fetchone()[0] == 0


def test_a_when_question_prefers_entries_that_state_a_time_and_dates_in_its_period(tmp_path, embedder):
    from datetime import datetime

    s = MemoryStore(tmp_path / "p", embedder=embedder)
    try:
        s.put_documents("conv", [
            Document(content="Melanie: we went camping at the lake last weekend", session_id="a",
                     created_at=datetime(2023, 6, 12)),
            Document(content="Melanie: camping at the lake is my favourite thing to do", session_id="b",
                     created_at=datetime(2023, 8, 1)),
            Document(content="Caroline: do you like camping at the lake?", session_id="c",
                     created_at=datetime(2023, 8, 2)),
        ])
        on = Settings()  # the defaults: the time, date and question cues on
        when = s.search_outcome("When did Melanie go camping at the lake?", judge="late-interaction", learn=False,
                                settings=on)
        top = when.results[0]
        assert "last weekend" in top.text
        asks = next(c for c in when.pool if c.text.endswith("?"))
        assert asks.final_rank == len(when.results)  # the entry that only asks comes last
        # the cues are what moved it: with their weights at 0 the order is the z-scored blend alone
        off = Settings(blend_time=0.0, blend_date=0.0, blend_question=0.0)
        plain = s.search_outcome("When did Melanie go camping at the lake?", judge="late-interaction", learn=False,
                                 settings=off)
        shift = {c.id: c.judge_score for c in when.pool}
        for c in plain.pool:
            cue = on.blend_time * ("last weekend" in c.text) + on.blend_question * c.text.endswith("?")
            assert shift[c.id] - c.judge_score == pytest.approx(cue / 1.75, abs=1e-9)
        in_august = s.search_outcome("What did Melanie say about camping at the lake in August 2023",
                                     judge="late-interaction", learn=False)
        assert in_august.results[0].created_at == datetime(2023, 8, 1)
    finally:
        s.close()


def test_a_quoted_phrase_prefers_the_entries_that_hold_it(tmp_path, embedder):
    s = MemoryStore(tmp_path / "p", embedder=embedder)
    try:
        s.put_documents("notes", [
            Document(content="Grafana showed connection refused on the reporting replica after the upgrade; "
                             "Ada restarted it."),
            Document(content="Why the staging deploy failed: the database refused the deploy's connection, "
                             "so the deploy failed again."),
            Document(content="Port 5432 on the CI runner was fine; the flaky test was a timezone bug."),
        ])
        assert s.con.execute("SELECT count(*) FROM entries").fetchone()[0] == 3  # none merged as near-duplicates
        q = 'why did the staging deploy fail "connection refused"'
        on = s.search_outcome(q, judge="late-interaction", learn=False)
        off = s.search_outcome(q, judge="late-interaction", learn=False, settings=Settings(blend_phrase=0.0))
        assert on.results[0].text.startswith("Grafana showed connection refused")  # holds the phrase
        assert off.results[0].text.startswith("Why the staging deploy failed")     # the words, not the phrase
        shift = {c.id: c.judge_score for c in on.pool}
        for c in off.pool:  # exactly the phrase cue, in the blend's units
            held = "connection refused" in c.text
            assert shift[c.id] - c.judge_score == pytest.approx(Settings().blend_phrase * held / 1.75, abs=1e-9)
    finally:
        s.close()
