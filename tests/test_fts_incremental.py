"""BM25 stays current without a rebuild: incremental FTS maintenance == full rebuild."""

import random

import pytest

from lethe_sql import connect
from lethe_sql.db import FTS_SCHEMA, rebuild_fts
from lethe_sql.fts import fts_add, fts_delete

WORDS = (
    "postgres port 5433 staging deploy failed migration lock invoices redis cache webhook retry "
    "backoff flaky test timezone utc docker compose ci github actions ruff mypy v1.2.3 gpt4 "
    "alembic 0042 refund partial ledger reconcile payout stripe error 404 500 timeout pool"
).split()

QUERIES = [
    "staging deploy failed",
    "postgres port 5433",
    "webhook retry backoff",
    "404 error",
    "GPT4 v1.2.3",
    "flaky timezone test",
    "nothing-matches-this zzz",
    "'; DROP TABLE entries; --",
]


def _doc(rng):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 25)))


def _insert(con, rows):
    con.executemany(
        "INSERT INTO entries (id, content, text) VALUES (?, ?, ?)", [[i, t, t] for i, t in rows]
    )
    fts_add(con, [i for i, _ in rows])


def _delete(con, ids):
    fts_delete(con, ids)
    con.execute("DELETE FROM entries WHERE id IN (SELECT unnest(?::VARCHAR[]))", [ids])


def _scores(con):
    out = {}
    for q in QUERIES:
        out[q] = {r[0]: r[1] for r in con.execute("SELECT id, score FROM lethe_bm25(?, 100000)", [q]).fetchall()}
    return out


def _stats(con):
    return con.execute(f"SELECT num_docs, avgdl FROM {FTS_SCHEMA}.stats").fetchone()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_series_of_adds_and_deletes_equals_full_rebuild(tmp_path, seed):
    rng = random.Random(seed)
    con = connect(tmp_path / "fts.duckdb", embedder=None)
    live: list[str] = []
    n = 0
    for step in range(12):
        batch = []
        for _ in range(rng.randint(1, 30)):
            batch.append((f"d{n:05d}", _doc(rng)))
            n += 1
        _insert(con, batch)
        live += [i for i, _ in batch]
        if step % 3 == 2 and live:
            gone = rng.sample(live, k=min(len(live), rng.randint(1, 10)))
            _delete(con, gone)
            live = [i for i in live if i not in gone]
    incremental = _scores(con)
    inc_stats = _stats(con)
    assert sum(len(v) for v in incremental.values()) > 0

    rebuild_fts(con)
    rebuilt = _scores(con)
    assert _stats(con)[0] == inc_stats[0] == len(live)
    assert _stats(con)[1] == pytest.approx(inc_stats[1])
    for q in QUERIES:
        assert incremental[q].keys() == rebuilt[q].keys(), q
        for i, s in rebuilt[q].items():
            assert incremental[q][i] == pytest.approx(s, rel=1e-12), (q, i)
    con.close()


def test_sql_bm25_equals_fts_match_bm25(tmp_path):
    rng = random.Random(7)
    con = connect(tmp_path / "m.duckdb", embedder=None)
    _insert(con, [(f"d{i}", _doc(rng)) for i in range(200)])
    _delete(con, ["d3", "d17", "d150"])
    rebuild_fts(con)  # match_bm25 is the extension's own macro over the same tables
    for q in QUERIES[:6]:
        ours = dict(con.execute("SELECT id, score FROM lethe_bm25(?, 1000)", [q]).fetchall())
        theirs = dict(
            con.execute(
                f"SELECT id, s FROM (SELECT id, {FTS_SCHEMA}.match_bm25(id, ?) AS s FROM entries) WHERE s IS NOT NULL",
                [q],
            ).fetchall()
        )
        assert ours.keys() == theirs.keys()
        for k, v in theirs.items():
            assert ours[k] == pytest.approx(v, rel=1e-12)
    con.close()


def test_tokenizer_keeps_digits_and_underscores_without_stemming(tmp_path):
    con = connect(tmp_path / "t.duckdb", embedder=None)
    toks = con.execute("SELECT lethe_tokens('Error 404 in GPT4 v1.2.3 my_var running Runs')").fetchone()[0]
    assert toks == ["error", "404", "in", "gpt4", "v1", "2", "3", "my_var", "running", "runs"]
    _insert(con, [("a", "HTTP 404 from GPT4"), ("b", "running runs")])
    assert [r[0] for r in con.execute("SELECT id FROM lethe_bm25('404', 5)").fetchall()] == ["a"]
    assert [r[0] for r in con.execute("SELECT id FROM lethe_bm25('run', 5)").fetchall()] == []
    con.close()


def test_deleted_terms_leave_the_dictionary(tmp_path):
    con = connect(tmp_path / "d.duckdb", embedder=None)
    _insert(con, [("a", "unique_word shared"), ("b", "shared")])
    _delete(con, ["a"])
    terms = {r[0]: r[1] for r in con.execute(f"SELECT term, df FROM {FTS_SCHEMA}.dict").fetchall()}
    assert terms == {"shared": 1}
    assert con.execute("SELECT count(*) FROM lethe_bm25('unique_word', 5)").fetchone()[0] == 0
    con.close()
