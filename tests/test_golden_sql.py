"""Golden answers of every SQL macro and view on a fixed corpus (tests/golden_corpus.py).

Each test renders what a macro returns for 2-3 queries (ranked ids and scores, floats to
4 decimals) as a small text table and compares it with the committed file
``tests/golden/<name>.txt``. A mismatch fails with a unified diff. After a deliberate
change of ranking, rewrite the files and review the diff before committing:

    LETHE_UPDATE_GOLDEN=1 pytest tests/test_golden_sql.py

The goldens are anchored to truth, not only to themselves: BM25 (both fields), cosine and
RRF are recomputed here in plain Python from the stored texts and vectors and must equal
what the macros return.

The corpus is indexed through the real path (markdown files, ``MemoryStore.index``, the
real int8 MiniLM embedder). Floats are compared to 2e-4 so that the last printed digit of an
embedding-derived score may flip between CPUs; ids, ranks and order are compared exactly.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections import Counter
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from golden_corpus import IDS, LABELS, TEXT, build
from lethe_sql.judges import encode_query, ids_literal
from lethe_sql.vectors import vec_literal, vecs_literal

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("LETHE_UPDATE_GOLDEN") == "1"
#: a float in a golden may differ by this much (the 4th decimal of an embedding-derived score)
FLOAT_TOL = 2e-4


# -- the snapshot machinery -------------------------------------------------------------


def _cell(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        s = f"{v:.4f}"
        return "0.0000" if s == "-0.0000" else s
    if isinstance(v, datetime):
        return v.isoformat(sep=" ")
    if isinstance(v, str) and v in LABELS:
        return f"{v}:{LABELS[v]}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_cell(x) for x in v) + "]"
    return str(v).replace("\n", "\\n")


def table(title: str, cur) -> str:
    """A section of a golden: ``## title``, then the rows of ``cur`` (a DuckDB result) as
    aligned columns (ids shown as ``id:label``)."""
    names = [d[0] for d in cur.description]
    rows = [[_cell(v) for v in r] for r in cur.fetchall()]
    widths = [max(len(n), *(len(r[i]) for r in rows)) if rows else len(n) for i, n in enumerate(names)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    out = [f"## {title}", line(names)] + [line(r) for r in rows]
    if not rows:
        out.append("(no rows)")
    return "\n".join(out) + "\n"


_FLOAT = re.compile(r"^-?\d+\.\d{4}$")


def _same(expected: str, actual: str) -> bool:
    """Equal line by line and cell by cell; 4-decimal floats within ``FLOAT_TOL``."""
    a, b = expected.splitlines(), actual.splitlines()
    if len(a) != len(b):
        return False
    for la, lb in zip(a, b):
        ca, cb = la.split(), lb.split()
        if len(ca) != len(cb):
            return False
        for x, y in zip(ca, cb):
            if x == y:
                continue
            if _FLOAT.match(x) and _FLOAT.match(y) and abs(float(x) - float(y)) <= FLOAT_TOL:
                continue
            return False
    return True


def check_golden(name: str, actual: str) -> None:
    path = GOLDEN / f"{name}.txt"
    header = (f"# golden: {name} (tests/test_golden_sql.py on tests/golden_corpus.py)\n"
              "# rewrite: LETHE_UPDATE_GOLDEN=1 pytest tests/test_golden_sql.py\n\n")
    actual = header + actual
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or not _same(path.read_text(encoding="utf-8"), actual):
            path.write_text(actual, encoding="utf-8")
        return
    if not path.exists():
        pytest.fail(f"no golden file {path}; write it with LETHE_UPDATE_GOLDEN=1 pytest {__file__}")
    expected = path.read_text(encoding="utf-8")
    if not _same(expected, actual):
        diff = "".join(difflib.unified_diff(
            expected.splitlines(keepends=True), actual.splitlines(keepends=True),
            fromfile=f"tests/golden/{name}.txt (expected)", tofile=f"{name} (actual)"))
        pytest.fail(f"golden mismatch for {name} (floats compared to {FLOAT_TOL}):\n{diff}", pytrace=False)


def test_the_comparison_can_fail():
    """The float tolerance does not swallow real differences."""
    assert _same("a  1.0000\n", "a  1.0001\n") and _same("x 0.5000", "x 0.5002")
    assert not _same("a  1.0000\n", "a  1.0010\n")
    assert not _same("1 aa:x 0.1\n2 bb:y 0.1\n", "1 bb:y 0.1\n2 aa:x 0.1\n")
    assert not _same("a 1.0000\n", "a 1.0000\nb 2.0000\n")


# -- the corpus ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def golden(tmp_path_factory, embedder):
    store, _ = build(tmp_path_factory.mktemp("golden") / "proj", embedder)
    assert store.con.execute("SELECT count(*) FROM entries").fetchone()[0] == len(IDS)
    yield store
    store.close()


def qvec(store, q: str) -> str:
    return vec_literal(store.embed_query(q))


# -- lethe_tokens, lethe_query_terms, lethe_content_query -------------------------------

TERM_INPUTS = [
    "What did the team say about the Postgres port?",
    "the and of",                      # only stopwords: every term is kept
    "Deploy-pipeline: BM25_k1 = 1.2!",
    "ÜBER café naïve",                 # no accent stripping: [^a-z0-9_] splits them
    "   ",
]


def test_query_terms(golden):
    con = golden.con
    out = []
    for s in TERM_INPUTS:
        out.append(table(f"terms of {s!r}", con.execute(
            "SELECT lethe_tokens($s) AS tokens, lethe_query_terms($s) AS query_terms, "
            "lethe_content_query($s) AS content_query", {"s": s})))
    check_golden("query_terms", "\n".join(out))


# -- BM25 over the entry text and over the context field --------------------------------

BM25_QUERIES = ["staging postgres port", "redis session TTL", "the reconcile test in staging"]
CTX_QUERIES = ["postgres port", "timezone test", "redis ttl login complaints"]


def test_bm25(golden):
    con = golden.con
    out = [table(f"lethe_bm25({q!r}, 5)", con.execute("SELECT * FROM lethe_bm25($q, 5)", {"q": q}))
           for q in BM25_QUERIES]
    check_golden("lethe_bm25", "\n".join(out))


def test_bm25_ctx(golden):
    con = golden.con
    out = [table(f"lethe_bm25_ctx({q!r}, 5)", con.execute("SELECT * FROM lethe_bm25_ctx($q, 5)", {"q": q}))
           for q in CTX_QUERIES]
    check_golden("lethe_bm25_ctx", "\n".join(out))


def _tokens(s: str) -> list[str]:
    """The tokenizer of sql/00_tokens.sql, in Python."""
    return [t for t in re.split(r"\s+", re.sub(r"[^a-z0-9_]+", " ", s.lower())) if t]


def bm25_reference(docs: dict[str, str], query: str, k1: float = 1.2, b: float = 0.75) -> dict[str, float]:
    """Okapi BM25 as the FTS extension defines it (log base 10, idf = log((N - df + .5) /
    (df + .5) + 1), distinct query terms), computed from the raw texts."""
    toks = {i: _tokens(t) for i, t in docs.items()}
    n = len(toks)
    avgdl = sum(len(t) for t in toks.values()) / n
    terms = set(_tokens(query))
    df = {t: sum(1 for d in toks.values() if t in d) for t in terms}
    out = {}
    for i, d in toks.items():
        tf = Counter(d)
        s = 0.0
        for t in terms:
            if tf[t]:
                idf = math.log10((n - df[t] + 0.5) / (df[t] + 0.5) + 1)
                s += idf * tf[t] * (k1 + 1) / (tf[t] + k1 * (1 - b + b * len(d) / avgdl))
        if s:
            out[i] = s
    return out


@pytest.mark.parametrize("field", ["text", "ctx"])
def test_bm25_equals_the_formula_computed_from_the_texts(golden, field):
    con = golden.con
    if field == "text":
        docs = dict(con.execute("SELECT id, text FROM entries").fetchall())
        macro, queries = "lethe_bm25", BM25_QUERIES
    else:
        docs = dict(con.execute("SELECT id, text FROM entry_context").fetchall())
        macro, queries = "lethe_bm25_ctx", CTX_QUERIES
    assert set(docs) == set(IDS.values())
    for q in queries:
        want = bm25_reference(docs, q)
        got = {i: s for i, s, _ in con.execute(f"SELECT * FROM {macro}($q, 100)", {"q": q}).fetchall()}
        assert got.keys() == want.keys(), q
        for i in want:
            assert got[i] == pytest.approx(want[i], rel=1e-9), (q, LABELS[i])
        order = sorted(want, key=lambda i: (-round(want[i], 9), i))
        assert [i for i, *_ in con.execute(f"SELECT * FROM {macro}($q, 100)", {"q": q}).fetchall()] == order


def test_one_bm25_score_by_hand(golden):
    """One score worked out step by step: 'redis' in the entry text. Two of the 16 entries
    hold it once each, so idf = log10((16 - 2 + .5) / (2 + .5) + 1) = log10(6.8)."""
    con = golden.con
    lens = {i: len(_tokens(t)) for i, t in con.execute("SELECT id, text FROM entries").fetchall()}
    avgdl = sum(lens.values()) / 16
    i = IDS["redis-ttl-old"]  # "Redis caches user sessions with a 300 second TTL." : 9 tokens
    assert lens[i] == 9
    want = math.log10(6.8) * (1 * 2.2) / (1 + 1.2 * (0.25 + 0.75 * 9 / avgdl))
    got = dict((r[0], r[1]) for r in con.execute("SELECT * FROM lethe_bm25('redis', 10)").fetchall())
    assert set(got) == {IDS["redis-ttl-old"], IDS["redis-ttl-new"]}
    assert got[i] == pytest.approx(want, rel=1e-12)


# -- dense, hybrid (RRF), fused ----------------------------------------------------------

DENSE_QUERIES = ["which port does the staging database use", "how long do user sessions stay cached",
                 "when do we deploy to production"]


def test_dense(golden):
    con = golden.con
    out = [table(f"lethe_dense(embed({q!r}), 5)",
                 con.execute("SELECT * FROM lethe_dense($v, 5)", {"v": qvec(golden, q)})) for q in DENSE_QUERIES]
    check_golden("lethe_dense", "\n".join(out))


def test_dense_scores_are_the_cosines_of_the_embedded_texts(golden):
    con = golden.con
    ids = list(IDS.values())
    mat = np.asarray(golden.embedder.encode([TEXT[LABELS[i]] for i in ids]), dtype=np.float64)
    for q in DENSE_QUERIES:
        v = np.asarray(golden.embed_query(q), dtype=np.float64)
        cos = dict(zip(ids, mat @ v))
        got = con.execute("SELECT id, score, rank FROM lethe_dense($v, 5)", {"v": vec_literal(v)}).fetchall()
        assert [i for i, *_ in got] == sorted(cos, key=lambda i: -cos[i])[:5], q
        for i, s, _ in got:
            assert s == pytest.approx(cos[i], abs=1e-5)


def test_hybrid(golden):
    con = golden.con
    out = [table(f"lethe_hybrid({q!r}, embed(...), 5, depth := 4)",
                 con.execute("SELECT * FROM lethe_hybrid($q, $v, 5, depth := 4)", {"q": q, "v": qvec(golden, q)}))
           for q in DENSE_QUERIES]
    check_golden("lethe_hybrid", "\n".join(out))


def test_hybrid_is_reciprocal_rank_fusion_with_k_60(golden):
    con = golden.con
    for q in DENSE_QUERIES:
        v = qvec(golden, q)
        b = {i: r for i, _, r in con.execute("SELECT * FROM lethe_bm25($q, 6)", {"q": q}).fetchall()}
        d = {i: r for i, _, r in con.execute("SELECT * FROM lethe_dense($v, 6)", {"v": v}).fetchall()}
        rrf = {i: (1 / (60 + b[i]) if i in b else 0) + (1 / (60 + d[i]) if i in d else 0) for i in b.keys() | d.keys()}
        want = sorted(rrf, key=lambda i: (-rrf[i], i))[:4]
        got = con.execute("SELECT id, score FROM lethe_hybrid($q, $v, 4, depth := 6)", {"q": q, "v": v}).fetchall()
        assert [i for i, _ in got] == want, q
        for i, s in got:
            assert s == pytest.approx(rrf[i], rel=1e-12)


def test_fused(golden):
    con = golden.con
    out = []
    for q in DENSE_QUERIES[:2]:
        out.append(table(f"lethe_fused({q!r}, embed(...), 6, depth := 4)", con.execute(
            "SELECT * FROM lethe_fused($q, $v, 6, depth := 4)", {"q": q, "v": qvec(golden, q)})))
    q = "redis session TTL"
    out.append(table(f"lethe_fused({q!r}, embed(...), 6, depth := 4, w_bm25 := 0.5, w_ctx := 0, w_dense := 2)",
                     con.execute("SELECT * FROM lethe_fused($q, $v, 6, depth := 4, w_bm25 := 0.5, w_ctx := 0, "
                                 "w_dense := 2)", {"q": q, "v": qvec(golden, q)})))
    check_golden("lethe_fused", "\n".join(out))


# -- lethe_candidates (with suppression and the apoptotic filter), lethe_cue ---------------


def test_candidates(golden):
    con = golden.con
    out = []
    q = DENSE_QUERIES[0]
    v = qvec(golden, q)
    out.append(table(f"lethe_candidates({q!r}, embed(...), 5, depth := 4)", con.execute(
        "SELECT * FROM lethe_candidates($q, $v, 5, depth := 4)", {"q": q, "v": v})))
    out.append(table(f"lethe_candidates({q!r}, embed(...), 5, depth := 4, rrf := true)", con.execute(
        "SELECT * FROM lethe_candidates($q, $v, 5, depth := 4, rrf := true)", {"q": q, "v": v})))
    # learned state, rolled back afterwards: suppression in cue 1, one entry apoptotic
    con.execute("BEGIN TRANSACTION")
    try:
        con.executemany("INSERT INTO rif_suppression VALUES (?, ?, ?, ?)", [
            [1, IDS["pg-port-new"], 2.0, 0], [1, IDS["backups"], 0.5, 8], [2, IDS["pg-port-old"], 5.0, 10]])
        con.execute("UPDATE entries SET tier = 'apoptotic' WHERE id = ?", [IDS["onboarding"]])
        out.append(table("lethe_suppression_at(1, 10)", con.execute(
            "SELECT * FROM lethe_suppression_at(1, 10) ORDER BY id")))
        out.append(table(f"lethe_candidates({q!r}, embed(...), 5, depth := 4, cue := 1, step := 10) "
                         "with suppression in cue 1 and 'onboarding' apoptotic", con.execute(
                             "SELECT * FROM lethe_candidates($q, $v, 5, depth := 4, cue := 1, step := 10)",
                             {"q": q, "v": v})))
    finally:
        con.execute("ROLLBACK")
    check_golden("lethe_candidates", "\n".join(out))


def test_cue(golden):
    con = golden.con
    out = []
    queries = ["staging postgres port", "session cache TTL", "GPU training overnight"]
    rows = lambda: con.execute(  # noqa: E731
        "SELECT q, lethe_cue(CAST(v AS FLOAT[384])) AS cue FROM (VALUES " + ", ".join(["(?, ?)"] * len(queries))
        + ") AS t(q, v)", [x for q in queries for x in (q, qvec(golden, q))])
    out.append(table("lethe_cue before the first fit", rows()))
    con.execute("BEGIN TRANSACTION")
    try:
        for c, label in [(1, "pg-port-old"), (2, "redis-ttl-old"), (3, "gpu")]:
            con.execute("INSERT INTO rif_centroids SELECT ?, embedding, 1, 0 FROM entries WHERE id = ?", [c, IDS[label]])
        out.append(table("lethe_cue with centroids 1 = pg-port-old, 2 = redis-ttl-old, 3 = gpu", rows()))
    finally:
        con.execute("ROLLBACK")
    check_golden("lethe_cue", "\n".join(out))


# -- lethe_maxsim (the late-interaction judge) --------------------------------------------


def test_maxsim(golden):
    con = golden.con
    ids = sorted(IDS.values())
    out = []
    for q, idf in [("which port does staging postgres use", True), ("redis session TTL", True),
                   ("redis session TTL", False)]:
        enc = encode_query(golden.embedder, q)
        args = [vecs_literal(enc.tok_vecs), "[" + ",".join(map(str, enc.tok_ids.tolist())) + "]", ids_literal(ids), idf]
        out.append(table(f"lethe_maxsim(tokens({q!r}), all 16 ids, idf := {str(idf).lower()}) top 5", con.execute(
            "SELECT id, score, row_number() OVER (ORDER BY round(score, 6) DESC, id) AS rank "
            "FROM lethe_maxsim(?, ?, ?, idf := ?) ORDER BY rank LIMIT 5", args)))
    check_golden("lethe_maxsim", "\n".join(out))


# -- revisions: lethe_revisions, lethe_versions, lethe_current, lethe_as_of ---------------


def test_revision_views(golden):
    con = golden.con
    out = [
        table("lethe_revisions", con.execute(
            "SELECT old_id, new_id, origin, score, valid_from, valid_to FROM lethe_revisions ORDER BY valid_from, old_id")),
        table("lethe_versions", con.execute(
            "SELECT id, valid_from, valid_to, superseded_by, is_current FROM lethe_versions ORDER BY valid_from, id")),
        table("lethe_current", con.execute("SELECT id, valid_from FROM lethe_current ORDER BY valid_from, id")),
    ]
    for ts in ["2025-03-01", "2025-03-05", "2025-03-10 14:00", "2025-03-17 09:30", "2025-05-01"]:
        out.append(table(f"lethe_as_of('{ts}')", con.execute(
            "SELECT id, valid_from, valid_to FROM lethe_as_of(?) ORDER BY valid_from, id", [ts])))
    check_golden("lethe_revisions", "\n".join(out))
