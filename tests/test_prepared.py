"""The first stage as a prepared statement (lethe_sql.prepared): the same rows as the
plain statement, planned once, re-planned after the store writes, and safe with any
query text."""

from __future__ import annotations

import pytest

from lethe_sql.judges import encode_query
from lethe_sql.markdown import Document
from lethe_sql.pipeline import CANDIDATES_SQL, _candidates, candidate_shape
from lethe_sql.prepared import Statement, literal, statement
from lethe_sql.search import run_search, search_sql
from lethe_sql.vectors import vec_literal
from lethe_sql.settings import Settings

QUERIES = ["what did Caroline say about the support group", "camping with the kids", "adoption", "zzz unknownword"]


@pytest.fixture()
def store(conversation):
    return conversation


@pytest.fixture(autouse=True)
def statement_only(monkeypatch):
    """These tests are about the statement: the in-process copy (tests/test_mirror.py) is off."""
    from lethe_sql import mirror

    monkeypatch.setattr(mirror, "ENABLED", False)


def _prepared(con) -> list[tuple]:
    return con.execute(
        "SELECT name, result_types IS NOT NULL FROM duckdb_prepared_statements() WHERE name LIKE 'lethe_%'"
    ).fetchall()


def _plain(con, enc, k, depth, cue, step, s) -> list[tuple]:
    """The plain (unprepared) statement's rows, as ``_as_tuples`` lays them out."""
    cur = con.execute(CANDIDATES_SQL, dict(q=enc.text, qvec=enc.vec_text, cue=cue, step=step, **candidate_shape(k, depth, s)))
    names = [d[0] for d in cur.description]
    out = []
    for r in cur.fetchall():
        d = dict(zip(names, r))
        out.append((d["id"], d["pool_rank"], d["fused"], d["suppression"], d["adjusted"], d["bm25_rank"],
                    d["bm25_score"], d["dense_rank"], d["dense_score"], d["ctx_rank"], d["ctx_score"], d["text"]))
    return out


def _as_tuples(cands) -> list[tuple]:
    return [(c.id, c.pool_rank, c.fused, c.suppression, c.adjusted, c.bm25_rank, c.bm25_score, c.dense_rank,
             c.dense_score, c.ctx_rank, c.ctx_score, c.text) for c in cands]


@pytest.mark.parametrize(
    "settings",
    [
        Settings(),
        Settings(fusion="rrf"),
        Settings(w_bm25=0.5, w_ctx=2.0, w_dense=0.25),
        Settings(rif=False),
    ],
    ids=["default", "rrf", "weights", "rif-off"],
)
def test_prepared_first_stage_returns_the_plain_statements_rows(store, settings):
    con = store.con
    ids = [r[0] for r in con.execute("SELECT id FROM entries ORDER BY id").fetchall()]
    # learned suppression for cue 2: the prepared statement must read it like the plain one
    con.executemany("INSERT INTO rif_suppression VALUES (2, ?, ?, 3)", [[i, 0.4 + n / 10] for n, i in enumerate(ids[:4])])
    checked = 0
    for q in QUERIES:
        enc = encode_query(store.embedder, q)
        for k, depth, cue, step in [(5, 5, 0, 1), (8, 3, 2, 10), (30, 30, 2, 200)]:
            got = _as_tuples(_candidates(con, enc, k, depth, cue, step, settings))
            want = _plain(con, enc, k, depth, cue, step, settings)
            assert got == want, (q, k, depth, cue, step)
            checked += len(want)
    assert checked > 0
    if settings.rif:  # the suppression reached the prepared statement's rows
        enc = encode_query(store.embedder, QUERIES[0])
        assert any(c.suppression > 0 for c in _candidates(con, enc, 10, 10, 2, 10, settings))


def test_the_first_stage_is_planned_once_per_shape(store):
    con = store.con
    s = Settings()
    for q in QUERIES:
        _candidates(con, encode_query(store.embedder, q), 10, 10, 0, 1, s)
    # one statement for one shape, and DuckDB keeps its plan: a statement it must re-plan on
    # every EXECUTE has no result types
    assert [ok for _, ok in _prepared(con)] == [True]
    _candidates(con, encode_query(store.embedder, QUERIES[0]), 20, 20, 0, 1, s)
    assert len(_prepared(con)) == 2
    # the check can fail: a macro argument used twice makes DuckDB re-plan every time
    con.execute("PREPARE lethe_naive AS SELECT * FROM lethe_candidates($1, $2, 10, depth := 10)")
    assert dict(_prepared(con))["lethe_naive"] is False


def test_statements_take_no_parameters_and_splice_no_text():
    st = Statement("SELECT (SELECT a FROM args), (SELECT b FROM args)", [("a", "VARCHAR"), ("b", "BIGINT")])
    assert "$" not in st.sql and "?" not in st.sql  # nothing for DuckDB to re-plan on, nothing spliced
    assert st.name.startswith("lethe_") and st.name == Statement(st.sql[st.sql.index("\n") + 1:], st.args).name


def test_a_statement_dropped_behind_our_back_is_prepared_again(store):
    con = store.con
    enc = encode_query(store.embedder, QUERIES[0])
    s = Settings()
    first = _as_tuples(_candidates(con, enc, 5, 5, 0, 1, s))
    (name, _), = _prepared(con)
    con.execute(f"DEALLOCATE {name}")
    assert _prepared(con) == []
    assert _as_tuples(_candidates(con, enc, 5, 5, 0, 1, s)) == first
    assert [n for n, _ in _prepared(con)] == [name]
    # its arguments table too
    table = name.replace("lethe_", "lethe_args_", 1)
    con.execute(f"DROP TABLE temp.main.{table}")
    assert _as_tuples(_candidates(con, enc, 5, 5, 0, 1, s)) == first


def test_statement_from_a_template():
    st = statement("SELECT $a || 'x', (SELECT $b), $a, $n LIMIT $n", (("a", "VARCHAR"), ("b", "BIGINT")), n=3)
    assert "$" not in st.sql and st.sql.count("(SELECT a FROM args)") == 2 and "LIMIT 3" in st.sql
    assert statement("SELECT $a, $n", (("a", "VARCHAR"),), n=3) is statement("SELECT $a, $n", (("a", "VARCHAR"),), n=3)
    with pytest.raises(KeyError):
        statement("SELECT $a, $missing", (("a", "VARCHAR"),))


def test_a_template_with_its_own_ctes(tmp_path):
    import duckdb

    con = duckdb.connect(str(tmp_path / "t.duckdb"))
    st = statement("WITH x AS (SELECT 2 AS a)\nSELECT a * $n, $q || '!', $none FROM x", (("q", "VARCHAR"),), n=3, none=None)
    assert st.sql.count("WITH") == 1
    assert st.execute(con, q="it's").fetchall() == [(6, "it's!", None)]


@pytest.mark.parametrize("mode", ["hybrid", "bm25", "dense"])
def test_single_list_modes_return_the_plain_statements_rows(store, mode):
    con = store.con
    for q in QUERIES:
        qvec = store.embed_query(q)
        for k, depth in [(3, 3), (10, 2), (10, 30)]:
            got = [(r.rank, r.id, r.score, r.bm25_rank, r.dense_rank) for r in
                   run_search(con, q, qvec, mode=mode, top_k=k, depth=depth)]
            params = {"k": k}
            if mode != "dense":
                params["q"] = q
            if mode != "bm25":
                params["qvec"] = vec_literal(qvec)
            if mode == "hybrid":
                params["depth"] = depth
            cur = con.execute(search_sql(mode), params)
            names = [d[0] for d in cur.description]
            want = [(d["rank"], d["id"], d["score"], d["bm25_rank"], d["dense_rank"])
                    for d in (dict(zip(names, r)) for r in cur.fetchall())]
            assert got == want
    assert all(ok for _, ok in _prepared(con))


def test_writes_make_the_next_search_plan_again_and_see_new_entries(store):
    con = store.con
    s = Settings()
    enc = encode_query(store.embedder, "kayaking on the fjord")
    before = [c.text for c in _candidates(con, enc, 3, 3, 0, 1, s)]
    assert _prepared(con)
    store.put_documents("more", [Document(content="Melanie: we went kayaking on the fjord", session_id="s9")])
    assert _prepared(con) == []  # forgotten after the write
    after = [c.text for c in _candidates(con, enc, 3, 3, 0, 1, s)]
    assert "Melanie: we went kayaking on the fjord" not in before
    assert after[0] == "Melanie: we went kayaking on the fjord"


HOSTILE = [
    "it's", "'; DROP TABLE entries; --", "back\\slash \\' quote", "$1 $q ? :name", "line\nbreak\ttab",
    "ünïcödé — “curly” 🙂", "''''", "E'\\x41'", "/* comment */ --",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_query_text_reaches_duckdb_unchanged(store, text):
    con = store.con
    echo = statement("SELECT $q AS q, count(*) AS n FROM entries", (("q", "VARCHAR"),))
    assert echo.execute(con, q=text).fetchone()[0] == text
    n = con.execute("SELECT count(*) FROM entries").fetchone()[0]
    enc = encode_query(store.embedder, text)
    s = Settings()
    assert _as_tuples(_candidates(con, enc, 5, 5, 0, 1, s)) == _plain(con, enc, 5, 5, 0, 1, s)
    assert con.execute("SELECT count(*) FROM entries").fetchone()[0] == n


def test_setting_literals(tmp_path):
    import duckdb

    assert literal(True) == "true" and literal(False) == "false" and literal(None) == "NULL"
    con = duckdb.connect(str(tmp_path / "l.duckdb"))
    for v in (30, -4, 0.005, -1e-07, 1e300, -0.25):
        got, kind = con.execute(f"SELECT 5 - {literal(v)}, typeof({literal(v)})").fetchone()
        assert got == 5 - v and kind == ("DOUBLE" if isinstance(v, float) else "INTEGER")
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError):
            literal(bad)
    with pytest.raises(TypeError):
        literal("1; DROP TABLE entries")


def test_a_macro_replaced_after_prepare_is_used_by_the_next_search(store):
    # DuckDB re-plans a prepared statement when the catalog of a database it reads changes
    # (ours all read the store's tables), so a replaced macro is not served from the old plan
    con = store.con
    s = Settings()
    enc = encode_query(store.embedder, "what did Caroline say about the support group")
    before = _as_tuples(_candidates(con, enc, 5, 5, 0, 1, s))
    con.execute("CREATE OR REPLACE MACRO lethe_stopwords() AS ['caroline', 'support', 'group', 'say']")
    after = _as_tuples(_candidates(con, enc, 5, 5, 0, 1, s))
    assert after != before
    assert after == _plain(con, enc, 5, 5, 0, 1, s)


def test_a_search_process_never_imports_sqlglot(store):
    """sqlglot costs ~100 ms to import and first use: a search (every agent prompt's hook
    runs one in a fresh process) needs no SQL builder, its statements take no literals."""
    import subprocess
    import sys

    root = store.root
    store.close()
    code = (
        "import sys; from lethe_sql import MemoryStore\n"
        f"s = MemoryStore({str(root)!r}, read_only=True)\n"
        "hits = s.search('support group') + s.search('camping', mode='hybrid')\n"
        "print(len(hits), 'sqlglot' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert int(out[0]) > 0 and out[1] == "False"
