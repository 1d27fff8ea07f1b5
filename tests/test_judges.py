"""The judges: late interaction in numpy equals the SQL macro; the pipeline uses them."""

import numpy as np
import pytest

from lethe_sql.judges import LateInteractionJudge, encode_query, ids_literal
from lethe_sql.vectors import vecs_literal

NOTES = [
    "The staging Postgres listens on port 5433 because 5432 is taken by the system one.",
    "Payment webhook retries: five attempts, exponential backoff from two seconds.",
    "The reconcile test was flaky in CI because of a timezone bug; fixed by freezing UTC.",
    "Redis cache TTL is 300 seconds for invoice lookups.",
    "Tomasz owns the CI pipeline and the deploy scripts.",
]


@pytest.fixture()
def filled(project):
    for n in NOTES:
        project.add(n)
    return project


@pytest.mark.parametrize("idf", [True, False])
def test_numpy_maxsim_equals_sql_macro(filled, idf):
    con = filled.con
    enc = encode_query(filled.embedder, "which port does staging postgres use")
    ids = [r[0] for r in con.execute("SELECT id FROM entries ORDER BY id").fetchall()]
    fast = LateInteractionJudge(idf=idf).score(con, enc, ids)
    sql = dict(
        con.execute(
            LateInteractionJudge().sql(),
            [vecs_literal(enc.tok_vecs), "[" + ",".join(map(str, enc.tok_ids.tolist())) + "]", ids_literal(ids), idf],
        ).fetchall()
    )
    assert sql.keys() == set(ids)
    for i in ids:
        assert fast[i] == pytest.approx(sql[i], abs=1e-5)
    best = max(fast, key=fast.get)
    assert con.execute("SELECT text FROM entries WHERE id = ?", [best]).fetchone()[0].startswith("The staging Postgres")


def test_token_vectors_are_int8_with_scale_and_close_to_float(filled):
    con = filled.con
    text = con.execute("SELECT text FROM entries WHERE text LIKE 'Redis%'").fetchone()[0]
    _, toks = filled.embedder.encode_full([text])
    rows = con.execute(
        "SELECT v, scale FROM token_vectors WHERE id = (SELECT id FROM entries WHERE text = ?) ORDER BY pos", [text]
    ).fetchall()
    stored = np.array([np.array(v, dtype=np.float32) * s for v, s in rows])
    assert stored.shape == toks[0].vecs.shape
    assert np.abs(stored - toks[0].vecs).max() < 0.01
    df = dict(con.execute("SELECT token, df FROM token_df").fetchall())
    assert all(df[int(t)] >= 1 for t in toks[0].ids)


def test_token_index_follows_deletes(filled):
    con = filled.con
    f = next(filled.memory_dir.glob("*.md"))
    f.write_text("## only\nnothing else remains here\n")
    import os

    os.utime(f, (1, 1))
    filled.index()
    assert con.execute("SELECT count(DISTINCT id) FROM token_vectors").fetchone()[0] == 1
    n_tok = con.execute("SELECT count(*) FROM token_vectors").fetchone()[0]
    assert con.execute("SELECT sum(df) FROM token_df").fetchone()[0] == con.execute(
        "SELECT count(*) FROM (SELECT DISTINCT id, token FROM token_vectors)").fetchone()[0]
    assert n_tok > 0


def test_ids_literal_refuses_anything_but_hex():
    assert ids_literal(["ab12", "ff"]) == "[ab12,ff]"
    for bad in ["x'); DROP", "a,b", ""]:
        with pytest.raises(ValueError):
            ids_literal([bad])


def test_max_per_key_does_not_depend_on_row_order():
    """The judge fetches token rows unordered (no ORDER BY): grouping must not care."""
    from lethe_sql.judges import max_per_key

    rng = np.random.default_rng(0)
    keys = np.asarray(["b"] * 3 + ["a"] * 4 + ["c"] * 2, dtype=object)
    v = rng.normal(size=(len(keys), 8)).astype(np.float32)
    q = rng.normal(size=(3, 8)).astype(np.float32)
    want = {k: (v[keys == k] @ q.T).max(axis=0) for k in ("a", "b", "c")}
    for perm in (np.arange(len(keys)), rng.permutation(len(keys)), rng.permutation(len(keys))):
        got_keys, best = max_per_key(keys[perm], v[perm], q)
        assert list(got_keys) == ["a", "b", "c"]
        for k, row in zip(got_keys, best):
            np.testing.assert_allclose(row, want[k], rtol=1e-6)
