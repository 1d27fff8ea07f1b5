"""The context field: each entry's text with its session neighbours, indexed for BM25
(entry_context + lethe_ctx.*), kept current by ingest; incremental == rebuild."""

from __future__ import annotations

import random

import pytest

from lethe_sql import MemoryStore
from lethe_sql.fts import CTX, context_rebuild
from lethe_sql.markdown import Document

from conftest import write

WORDS = (
    "postgres port staging deploy migration lock invoices redis cache webhook retry backoff flaky "
    "timezone docker compose ruff alembic refund ledger payout stripe timeout pool caroline melanie "
    "painting camping adoption guitar pottery marathon"
).split()
QUERIES = ["staging deploy", "caroline painting", "webhook retry backoff", "ledger payout 404", "zzz nothing"]


def _state(con):
    ctx = sorted(con.execute("SELECT id, source, position, text FROM entry_context").fetchall())
    scores = {
        q: sorted((i, round(s, 9)) for i, s in con.execute("SELECT id, score FROM lethe_bm25_ctx(?, 100000)", [q]).fetchall())
        for q in QUERIES
    }
    stats = con.execute(f"SELECT num_docs, round(avgdl, 9) FROM {CTX}.stats").fetchone()
    return ctx, scores, stats


def _docs(rng, n, sessions):
    out = []
    for j in range(n):
        text = f"{rng.choice(['Caroline', 'Melanie'])}: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
        out.append(Document(content=f"{text} #{rng.randrange(10**9)}", session_id=rng.choice(sessions)))
    return out


def _ctx_of(con, text_prefix):
    return con.execute(
        "SELECT c.text FROM entry_context AS c JOIN entries AS e USING (id) WHERE starts_with(e.text, ?)", [text_prefix]
    ).fetchone()[0]


def test_neighbours_in_the_same_session_only(tmp_path, embedder):
    store = MemoryStore(tmp_path / "p", embedder=embedder)
    docs = [
        Document(content="alpha opens the first session", session_id="s1"),
        Document(content="bravo follows in the first session", session_id="s1"),
        Document(content="charlie is third in the first session", session_id="s1"),
        Document(content="foxtrot ends the first session", session_id="s1"),
        Document(content="delta starts the second session", session_id="s2"),
        Document(content="echo has no session at all"),
    ]
    store.put_documents("conv", docs)
    con = store.con
    a, b, c, f = (d.content for d in docs[:4])
    assert _ctx_of(con, "alpha") == "\n".join([a, b, c])  # two on each side, in source order
    assert _ctx_of(con, "bravo") == "\n".join([a, b, c, f])
    assert _ctx_of(con, "foxtrot") == "\n".join([b, c, f])  # the next session is not a neighbour
    assert _ctx_of(con, "delta") == "delta starts the second session"
    assert _ctx_of(con, "echo") == "echo has no session at all"
    # a neighbour's words find the entry through the context field, not through its own text
    hits = [r[0] for r in con.execute("SELECT id FROM lethe_bm25_ctx('alpha', 10)").fetchall()]
    ids = dict(con.execute("SELECT split_part(text, ' ', 1), id FROM entries").fetchall())
    assert set(hits) == {ids["alpha"], ids["bravo"], ids["charlie"]}
    assert con.execute("SELECT count(*) FROM lethe_bm25('alpha', 10)").fetchone()[0] == 1
    store.close()


@pytest.mark.parametrize("seed", [1, 2])
def test_incremental_adds_edits_and_deletes_equal_a_rebuild(tmp_path, embedder, seed):
    rng = random.Random(seed)
    store = MemoryStore(tmp_path / "p", embedder=embedder)
    sources: dict[str, list[Document]] = {}
    for step in range(6):
        src = rng.choice(["a", "b", "c"])
        docs = sources.get(src, [])
        op = rng.random()
        if not docs or op < 0.4:  # append
            docs = docs + _docs(rng, rng.randint(1, 6), ["s1", "s2"])
        elif op < 0.7:  # insert in the middle: every later neighbour shifts
            k = rng.randrange(len(docs) + 1)
            docs = docs[:k] + _docs(rng, 2, ["s1", "s2"]) + docs[k:]
        else:  # delete some, sometimes the whole source
            docs = [] if rng.random() < 0.25 else [d for d in docs if rng.random() < 0.6]
        sources[src] = docs
        store.put_documents(src, docs)
    # the same text in two sources: one entry, its home in the first source
    shared = _docs(rng, 1, ["s1"])[0]
    store.put_documents("a", sources.get("a", []) + [shared])
    store.put_documents("d", [shared] + _docs(rng, 2, ["s1"]))
    store.put_documents("a", sources.get("a", []))  # its home moves to d
    con = store.con
    incremental = _state(con)
    assert incremental[2][0] == con.execute("SELECT count(*) FROM entries").fetchone()[0]
    con.execute("BEGIN TRANSACTION")
    context_rebuild(con)
    con.execute("COMMIT")
    rebuilt = _state(con)
    assert incremental[0] == rebuilt[0]
    assert incremental[2] == rebuilt[2]
    for q in QUERIES:
        assert [i for i, _ in incremental[1][q]] == [i for i, _ in rebuilt[1][q]], q
        for (_, a), (_, b) in zip(incremental[1][q], rebuilt[1][q]):
            assert a == pytest.approx(b, rel=1e-9)
    store.close()


def test_markdown_sections_of_one_file_are_neighbours_and_follow_edits(tmp_path, embedder):
    store = MemoryStore(tmp_path / "p", embedder=embedder)
    f = store.memory_dir / "2026-11-03.md"
    write(f, "## one\n\nkafka consumer lag alert\n\n## two\n\nrestarted the broker\n\n## three\n\nlag back to zero\n"
             "\n## four\n\nwrote the postmortem\n")
    store.index()
    con = store.con
    assert _ctx_of(con, "kafka") == "kafka consumer lag alert\nrestarted the broker\nlag back to zero"
    write(f, "## one\n\nkafka consumer lag alert\n\n## new\n\npaged the on-call\n\n## two\n\nrestarted the broker\n"
             "\n## four\n\nwrote the postmortem\n")
    store.index()
    assert _ctx_of(con, "kafka") == "kafka consumer lag alert\npaged the on-call\nrestarted the broker"
    assert _ctx_of(con, "wrote") == "paged the on-call\nrestarted the broker\nwrote the postmortem"
    before = _state(con)
    con.execute("BEGIN TRANSACTION")
    context_rebuild(con)
    con.execute("COMMIT")
    assert _state(con) == before
    f.unlink()
    store.index()
    assert con.execute("SELECT count(*) FROM entry_context").fetchone()[0] == 0
    assert con.execute(f"SELECT count(*) FROM {CTX}.docs").fetchone()[0] == 0
    assert con.execute(f"SELECT count(*) FROM {CTX}.dict").fetchone()[0] == 0
    store.close()


def test_migration_backfills_a_store_indexed_before_it(tmp_path, embedder):
    store = MemoryStore(tmp_path / "p", embedder=embedder)
    store.put_documents("conv", _docs(random.Random(5), 12, ["s1", "s2"]))
    expected = _state(store.con)
    con = store.con
    # make it look like a store from before migration 004, then reopen
    con.execute("DROP TABLE entry_context")
    con.execute(f"DROP SCHEMA {CTX} CASCADE")
    con.execute("DELETE FROM schema_migrations WHERE name = '004_context.sql'")
    store.close()
    store = MemoryStore(tmp_path / "p", embedder=embedder)
    assert _state(store.con) == expected
    store.close()
