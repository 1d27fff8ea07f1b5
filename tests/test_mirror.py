"""The first stage in process (lethe_sql.mirror): the rows of the prepared statement, from
a copy built on a connection's second search at one data version and dropped by every
write that changes what it holds."""

from __future__ import annotations

import pytest

from lethe_sql import mirror
from lethe_sql.fts import context_refresh
from lethe_sql.judges import LateInteractionJudge, encode_query, ids_literal
from lethe_sql.markdown import Document
from lethe_sql.pipeline import _candidates
from lethe_sql.settings import Settings
from lethe_sql.vectors import vec_literal, vecs_literal

from test_long_memories import TAILS, _long

QUERIES = ["what did Caroline say about the support group", "camping with the kids", "adoption",
           "zzz unknownword", "the", "İstanbul adoption agencies", "retry webhooks backoff attempts"]
FIELDS = ("id", "pool_rank", "bm25_rank", "dense_rank", "ctx_rank", "tier", "text", "heading")
SCORES = ("fused", "suppression", "adjusted", "bm25_score", "dense_score", "ctx_score")


def _rows(con, enc, k, depth, cue, step, s, *, copy: bool):
    mirror.ENABLED = copy
    try:
        return _candidates(con, enc, k, depth, cue, step, s)
    finally:
        mirror.ENABLED = True


def _same(a, b) -> None:
    assert [tuple(getattr(c, f) for f in FIELDS) for c in a] == [tuple(getattr(c, f) for f in FIELDS) for c in b]
    for x, y in zip(a, b):
        for f in SCORES:
            assert getattr(x, f) == pytest.approx(getattr(y, f), rel=1e-12, abs=1e-12), f


def _built(con) -> bool:
    st = mirror._STATES.get(con)
    return st is not None and st.mirror is not None


@pytest.fixture()
def mixed(conversation, embedder):
    """The conversation, long memories (windows) and an enriched entry."""
    store = conversation
    store.put_documents("notes", [Document(content=_long(t), heading=k) for k, t in TAILS.items()])
    con = store.con
    eid = con.execute("SELECT id FROM entries WHERE text LIKE '%adoption agencies%'").fetchone()[0]
    text = "Which orphanage partners does Caroline trust? zeppelin"
    con.execute("INSERT INTO enrichment (id, model, gist, questions, entities, temporal, text, embedding) "
                "VALUES (?, 'test', 'g', [], [], [], ?, CAST(? AS FLOAT[384]))",
                [eid, text, vec_literal(embedder.encode([text])[0])])
    context_refresh(con, [eid])
    con.executemany("INSERT INTO rif_suppression VALUES (2, ?, ?, 3)",
                    [[i, 0.3 + n / 10] for n, (i,) in enumerate(con.execute("SELECT id FROM entries ORDER BY id LIMIT 4").fetchall())])
    return store


@pytest.mark.parametrize("settings", [Settings(), Settings(w_bm25=0.5, w_ctx=2.0, w_dense=0.25), Settings(w_ctx=0.0)],
                         ids=["default", "weights", "no-context"])
def test_the_copy_gives_the_statements_rows(mixed, settings):
    con = mixed.con
    assert con.execute("SELECT count(*) FROM entry_windows").fetchone()[0] > 0  # the windows side is exercised
    checked = 0
    for q in QUERIES:
        enc = encode_query(mixed.embedder, q)
        for k, depth, cue, step in [(5, 5, 0, 1), (8, 3, 2, 10), (30, 30, 2, 200)]:
            want = _rows(con, enc, k, depth, cue, step, settings, copy=False)
            for _ in range(mirror.BUILD_AFTER):  # the first searches at this version: SQL
                _rows(con, enc, k, depth, cue, step, settings, copy=True)
            got = _rows(con, enc, k, depth, cue, step, settings, copy=True)
            assert _built(con)
            _same(got, want)
            checked += len(got)
    assert checked > 100
    # the copy is what ran: suppression and the enrichment's text and vector reach it
    enc = encode_query(mixed.embedder, "zeppelin orphanage partners")
    got = _rows(con, enc, 5, 5, 2, 10, settings, copy=True)
    assert "adoption agencies" in got[0].text


def test_a_few_searches_never_build_the_copy_and_the_next_builds_it(conversation):
    con, s = conversation.con, Settings()
    enc = encode_query(conversation.embedder, QUERIES[0])
    assert mirror.BUILD_AFTER == 2
    for _ in range(2):
        _candidates(con, enc, 5, 5, 0, 1, s)
        assert not _built(con)
    _candidates(con, enc, 5, 5, 0, 1, s)
    assert _built(con)


@pytest.mark.parametrize("write", ["add", "forget", "rebuild"])
def test_every_write_makes_the_next_search_read_the_new_data(conversation, write):
    store, s = conversation, Settings()
    con = store.con
    note = "Melanie: painting sometime is what I do every weekend, painting sometime"
    if write == "forget":
        added = store.add(note)
    enc = encode_query(store.embedder, "painting sometime")
    for _ in range(3):
        before = [c.text for c in _candidates(con, enc, 3, 3, 0, 1, s)]
    assert _built(con)
    assert before[0] == (note if write == "forget" else "Caroline: I should try painting sometime")
    version = con.execute("SELECT value FROM meta WHERE key = 'data_version'").fetchone()[0]
    if write == "add":
        store.add(note)
    elif write == "forget":
        store.forget([added])
    else:
        con.execute("UPDATE entries SET text = 'Caroline: painting sometime painting sometime' WHERE text = ?", [before[0]])
        from lethe_sql.db import rebuild_fts

        rebuild_fts(con)
    assert con.execute("SELECT value FROM meta WHERE key = 'data_version'").fetchone()[0] != version
    after = [c.text for c in _candidates(con, enc, 3, 3, 0, 1, s)]
    want = [c.text for c in _rows(con, enc, 3, 3, 0, 1, s, copy=False)]
    assert after == want and after[0] != before[0]


def test_learning_is_read_per_search_not_from_the_copy(conversation):
    con, s = conversation.con, Settings()
    enc = encode_query(conversation.embedder, "painting sometime")
    for _ in range(3):
        top = _candidates(con, enc, 3, 3, 1, 5, s)[0]
    assert _built(con)
    con.execute("INSERT INTO rif_suppression VALUES (1, ?, 50.0, 5)", [top.id])
    assert top.id not in [c.id for c in _candidates(con, enc, 3, 3, 1, 5, s)]
    con.execute("DELETE FROM rif_suppression")
    con.execute("UPDATE entries SET tier = 'apoptotic' WHERE id = ?", [top.id])
    assert top.id not in [c.id for c in _candidates(con, enc, 12, 12, 1, 5, s)]


def _judged_through_the_copy(store):
    """(connection, judge, every entry id, a query's encoding, the copy) once three
    searches have built the copy on ``store``'s connection."""
    con, judge = store.con, LateInteractionJudge()
    ids = [r[0] for r in con.execute("SELECT id FROM entries ORDER BY id").fetchall()]
    enc = encode_query(store.embedder, "webhooks retried with backoff")
    for _ in range(3):
        _candidates(con, enc, 5, 5, 0, 1, Settings())
    return con, judge, ids, enc, mirror.current(con)


def _macro_scores(con, judge, enc, ids) -> dict:
    """``lethe_maxsim``'s scores of ``ids``: the SQL the kept vectors must agree with."""
    return dict(con.execute(judge.sql(), [vecs_literal(enc.tok_vecs), "[" + ",".join(map(str, enc.tok_ids.tolist())) + "]",
                                          ids_literal(ids), True]).fetchall())


def test_the_judge_reads_kept_token_vectors_with_the_macros_scores(mixed):
    con, judge, ids, enc, m = _judged_through_the_copy(mixed)
    assert m is not None
    got = judge.score(con, enc, ids)
    assert len(m._tokens) == len(ids)  # read once, kept
    want = _macro_scores(con, judge, enc, ids)
    assert set(got) == set(ids)
    for i in ids:
        assert got[i] == pytest.approx(want[i], abs=1e-5)
    best = max(got, key=got.get)
    assert "webhooks" in con.execute("SELECT text FROM entries WHERE id = ?", [best]).fetchone()[0].lower()


def test_the_judge_keeps_the_vectors_it_reads_when_the_kept_ones_overflow(mixed, monkeypatch):
    """Past ``MAX_TOKEN_ROWS`` the kept vectors make room, but never drop an id of the call
    that overflows them: a dropped id would score 0, as one without vectors (NFCorpus, whose
    pools of 500 long abstracts overflow 300,000 rows within a hundred searches, ranked
    differently on a long-lived connection than on a fresh one)."""
    con, judge, ids, enc, m = _judged_through_the_copy(mixed)
    half = ids[: len(ids) // 2]
    judge.score(con, enc, half)
    monkeypatch.setattr(mirror, "MAX_TOKEN_ROWS", m._token_count + 1)  # the rest cannot join them
    got = judge.score(con, enc, ids)
    want = _macro_scores(con, judge, enc, ids)
    assert sum(1 for i in half if want[i] != 0.0) > 5
    for i in ids:
        assert got[i] == pytest.approx(want[i], abs=1e-5), i
    assert set(m._tokens) == set(ids)  # this call's vectors, all of them, are what is kept


def test_an_empty_store_and_one_emptied_by_forget_search_through_the_copy(project):
    for _ in range(3):
        assert project.search("anything at all", top_k=5) == []
    assert _built(project.con)
    added = project.add("The staging Postgres listens on port 5433.")
    for _ in range(3):
        assert [h.id for h in project.search("which port does staging postgres use", top_k=5)] == [added]
    assert _built(project.con)
    project.forget([added])
    for _ in range(3):
        assert project.search("which port does staging postgres use", top_k=5) == []
    assert _built(project.con)
