"""Bench harness pieces: config registry, embedding cache, synthetic corpus, runner, report."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lethe_bench import configs as C
from lethe_bench import synthetic
from lethe_bench.data import BenchData, Corpus, Item, Query
from lethe_bench.embedders import CachedEmbedder, random_unit_vectors
from lethe_sql.errors import UsageError

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


class FakeEmbedder:
    """Deterministic vectors, no model: fast runs of the real harness code."""

    model_id = "fake-embedder:1"

    def __init__(self):
        self.calls = 0
        self.texts = 0

    def encode(self, texts, progress=None):
        self.calls += 1
        self.texts += len(texts)
        if progress:
            progress(len(texts))
        return random_unit_vectors(list(texts), 0)


# -- configs ---------------------------------------------------------------


def test_known_configs_resolve_in_order():
    assert [c.name for c in C.resolve(["hybrid", "bm25", "dense"])] == ["hybrid", "bm25", "dense"]


def test_unknown_config_names_the_available_ones():
    with pytest.raises(UsageError, match=r"unknown config 'bm26'; available: bm25, dense, hybrid"):
        C.resolve(["bm25", "bm26"])


@pytest.mark.parametrize("name,missing", [("hybrid+enrich", "enrich"), ("bm25+enrich", "enrich")])
def test_planned_configs_fail_naming_what_is_missing(name, missing):
    with pytest.raises(UsageError) as exc:
        C.resolve([name])
    msg = str(exc.value)
    assert f"needs {missing}:" in msg and "not built yet" in msg
    assert "needs rerank" not in msg  # rerank exists (hybrid+rerank): only what is missing is named


def test_cross_encoder_config_says_what_to_install():
    from lethe_sql.udfs.models import resolve_reranker

    if resolve_reranker() is not None:
        pytest.skip("a cross-encoder is installed here")
    with pytest.raises(UsageError, match=r"config 'hybrid\+rerank' is unavailable: no cross-encoder installed"):
        C.resolve(["hybrid", "hybrid+rerank"])


def test_a_registered_config_with_a_missing_piece_says_why():
    cfg = C.Config("test-only", "x", lambda *a: [], missing=lambda: "no cross-encoder installed")
    C.register(cfg)
    try:
        with pytest.raises(UsageError, match="config 'test-only' is unavailable: no cross-encoder installed"):
            C.resolve(["test-only"])
    finally:
        del C.REGISTRY["test-only"]


# -- embedding cache -------------------------------------------------------


def test_cache_gives_identical_vectors_and_skips_the_model(tmp_path):
    inner = FakeEmbedder()
    cache = CachedEmbedder(inner, tmp_path)
    texts = ["alpha", "beta", "alpha", "gamma"]
    first = cache.encode(texts)
    assert inner.texts == 3  # the duplicate is embedded once
    assert np.array_equal(first, random_unit_vectors(texts, 0))
    again = cache.encode(["gamma", "alpha"])
    assert inner.texts == 3 and np.array_equal(again, first[[3, 0]])
    cache.flush()
    fresh = CachedEmbedder(FakeEmbedder(), tmp_path)
    assert np.array_equal(fresh.encode(texts), first) and fresh.inner.texts == 0
    assert fresh.model_id == "fake-embedder:1" and fresh.folder.parent == tmp_path
    with fresh.bypass():
        fresh.encode(["alpha"])
    assert fresh.inner.texts == 1


def test_cache_matches_the_real_model(tmp_path, embedder):
    texts = ["The staging DB is on port 5433.", "short", "a longer sentence about webhooks " * 8]
    direct = embedder.encode(texts)
    cache = CachedEmbedder(embedder, tmp_path)
    cache.encode(texts[1:])  # different batch composition first
    cache.flush()
    assert np.array_equal(CachedEmbedder(embedder, tmp_path).encode(texts)[1:], direct[1:])
    assert np.array_equal(cache.encode(texts), direct)


# -- synthetic corpus ------------------------------------------------------


def test_synthetic_is_deterministic():
    a = list(synthetic.generate(300, seed=1))
    assert a == list(synthetic.generate(300, seed=1))
    assert a != list(synthetic.generate(300, seed=2))
    assert len(a) == 300 and len({i.text for i in a}) == 300
    assert all(":" in i.text and i.session for i in a)
    assert synthetic.queries(5, 1) == synthetic.queries(5, 1)
    assert synthetic.parse_sizes("10k, 50K,200000") == [10_000, 50_000, 200_000]
    with pytest.raises(ValueError):
        synthetic.parse_sizes("lots")


# -- runner and report -----------------------------------------------------


def _tiny_bench(tmp_path) -> BenchData:
    items = [
        Item("c:D1:1", "Ann: I adopted a dog named Rex.", session="s1"),
        Item("c:D1:2", "Bob: Thanks!", session="s1"),
        Item("c:D2:1", "Ann: Rex loves the beach.", session="s2"),
        Item("c:D2:2", "Bob: Thanks!", session="s2"),  # same text as D1:2: one entry
        Item("c:D3:1", "Ann: My sister plays the violin.", session="s3"),
    ]
    queries = [
        Query("q1", "What is the dog called?", {"c:D1:1": 1}, "4"),
        Query("q2", "Where does Rex like to go?", {"c:D2:1": 1}, "4"),
        Query("q3", "thanks", {"c:D2:2": 1}, "2"),
        Query("q4", "violin", {"c:D3:1": 1}, "2"),
    ]
    return BenchData("locomo", "turn-global", tmp_path / "fixture.json", [Corpus("all", items, queries)],
                     turn_level=True, files={"fixture.json": "0" * 64}, category_names={"2": "temporal", "4": "single-hop"})


def _opts(tmp_path, names=("bm25", "dense", "hybrid"), **kw):
    from lethe_bench.runner import Options

    kw = {"cold": False, "latency_queries": 3, "workdir": tmp_path, "command": "lethe bench test"} | kw
    return Options(configs=C.resolve(list(names)), embedder=FakeEmbedder(), **kw)


def test_runner_scores_entries_and_reports_shape(tmp_path):
    from lethe_bench.runner import run

    r = run(_tiny_bench(tmp_path), _opts(tmp_path))
    assert r["dataset"] == "locomo" and r["protocol"] == "turn-global" and r["n_queries"] == 4
    assert r["baseline"] == "hybrid" and set(r["vs_baseline"]) == {"bm25", "dense"}
    assert r["index"]["items"] == 5 and r["index"]["entries"] == 4 and r["index"]["collapsed_items"] == 1
    for name, c in r["configs"].items():
        for k in ("ndcg@10", "recall@10", "recall@30", "mrr", "top1_exact", "top1_sibling", "top1_wrong_family"):
            assert 0.0 <= c[k] <= 1.0, (name, k)
        assert c["top1_exact"] + c["top1_sibling"] + c["top1_wrong_family"] == pytest.approx(1.0)
        assert set(c["ci95"]) == {"ndcg@10", "recall@10", "recall@30", "mrr"}
        assert set(c["per_category"]) == {"2", "4"} and c["per_category"]["2"]["n"] == 2
        assert c["p50_ms"] > 0 and c["n_latency_queries"] == 3
    # "thanks" finds the one entry that stands for both "Bob: Thanks!" turns: an exact hit
    bm25 = r["configs"]["bm25"]
    assert r["per_query"]["ndcg@10"]["bm25"][2] == 1.0
    assert bm25["recall@30"] == 1.0  # every query term matches its evidence
    v = r["vs_baseline"]["bm25"]
    assert set(v) >= {"delta", "ci95", "p"} and 0 < v["p"] <= 1
    assert r["bm25_check"]["abs_diff"] <= 0.02
    assert set(r["pool_recall"]["hybrid"]) == {"30", "100", "500"}
    assert r["pool_check"]["hybrid"]["checked"] == 4 and r["pool_check"]["hybrid"]["mismatches"] == 0
    assert r["machine"]["cpu_count"] and r["package_version"] and r["command"] == "lethe bench test"


def test_relevance_never_reaches_the_index(tmp_path):
    from lethe_sql import MemoryStore
    from lethe_bench.runner import build_store

    bench = _tiny_bench(tmp_path)
    store = MemoryStore(tmp_path / "p", embedder=FakeEmbedder())
    try:
        built = build_store(store, bench.corpora[0], "bench/x")
        rows = store.con.execute("SELECT content, text, heading FROM entries").fetchall()
    finally:
        store.close()
    assert built.entry_items[built.item_entry["c:D1:2"]] == ["c:D1:2", "c:D2:2"]
    blob = json.dumps(rows)
    for q in bench.corpora[0].queries:  # no query id, no question sentence in what is indexed
        assert f'"{q.id}' not in blob and (len(q.text.split()) < 2 or q.text not in blob)


def test_baseline_must_be_run(tmp_path):
    from lethe_bench.runner import run

    with pytest.raises(UsageError, match="baseline 'hybrid'"):
        run(_tiny_bench(tmp_path), _opts(tmp_path, ("bm25",), baseline="hybrid"))


def test_report_files(tmp_path):
    from lethe_bench import report
    from lethe_bench.runner import run

    r = run(_tiny_bench(tmp_path), _opts(tmp_path))
    per_query = r.pop("per_query")
    paths = report.write(r, tmp_path / "out", per_query)
    md = paths["markdown"].read_text()
    assert "lethe bench test" in md and "0" * 64 in md and "CPU" in md and "seed 0" in md
    assert json.loads(paths["json"].read_text())["n_queries"] == 4
    pytest.importorskip("matplotlib")
    assert paths["chart"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(not (SHARED_DATA / "locomo" / "locomo-dev7.json.gz").exists(), reason="LoCoMo data absent")
def test_sql_bm25_matches_an_independent_bm25_on_locomo(tmp_path):
    from lethe_bench import locomo
    from lethe_bench.runner import run

    bench = locomo.load(SHARED_DATA / "locomo" / "locomo-dev7.json.gz", limit_conversations=1)
    r = run(bench, _opts(tmp_path, ("bm25",), pool_diagnostic=False, latency_queries=1))
    check = r["bm25_check"]
    assert check["abs_diff"] <= 0.02, check
    assert check["top1_agreement"] >= 0.95


class FakeFullEmbedder(FakeEmbedder):
    """Also gives token vectors (one per whitespace word), so the store builds its token index."""

    def encode_full(self, texts, progress=None, *, windows=True):
        from types import SimpleNamespace

        vecs = self.encode(texts, progress)
        toks = []
        for t in texts:
            words = t.lower().split() or [" "]
            ids = np.array([abs(hash(w)) % 30000 for w in words], dtype=np.int32)
            toks.append(SimpleNamespace(ids=ids, vecs=random_unit_vectors(words, 1)))
        return vecs, toks


def test_late_interaction_config_runs_over_the_token_index(tmp_path):
    from lethe_bench.runner import run

    if "hybrid+li" not in C.REGISTRY or C.REGISTRY["hybrid+li"].missing():
        pytest.skip("no judged pipeline in this lethe-sql")
    opts = _opts(tmp_path, ("hybrid", "hybrid+li"))
    opts.embedder = FakeFullEmbedder()
    r = run(_tiny_bench(tmp_path), opts)
    assert set(r["configs"]) == {"hybrid", "hybrid+li"} and r["n_queries"] == 4
    assert 0 <= r["configs"]["hybrid+li"]["ndcg@10"] <= 1
    assert r["pool_recall"]["hybrid+li"] == r["pool_recall"]["hybrid"]  # the judge reorders the hybrid pool
    assert "hybrid+li" not in r.get("pool_check", {})


def test_late_interaction_without_token_vectors_is_an_error(tmp_path):
    from lethe_bench.runner import run
    from lethe_sql.errors import LetheError

    if "hybrid+li" not in C.REGISTRY or C.REGISTRY["hybrid+li"].missing():
        pytest.skip("no judged pipeline in this lethe-sql")
    with pytest.raises(LetheError, match="hybrid\\+li needs the token index"):
        run(_tiny_bench(tmp_path), _opts(tmp_path, ("hybrid+li",)))


def test_random_vectors_come_with_a_token_index_of_real_size(embedder):
    """RandomVectorEmbedder.encode_full: one random unit vector per real wordpiece, the
    same for the same text; after use_model() the real model answers."""
    from lethe_bench.embedders import RandomVectorEmbedder

    texts = ["the staging port moved to 5433", "", "Ada reviewed the rosmiroshal alert twice"]
    r = RandomVectorEmbedder(lambda: embedder, embedder.model_id, seed=3)
    vecs, toks = r.encode_full(texts)
    assert np.array_equal(vecs, random_unit_vectors(texts, 3))
    want = embedder.wordpieces(texts)
    real_vecs, real_toks = embedder.encode_full(texts)
    for t, ids, real in zip(toks, want, real_toks):
        assert np.array_equal(t.ids, ids) and np.array_equal(t.ids, real.ids)
        assert t.vecs.shape == (len(ids), 384)
        np.testing.assert_allclose(np.linalg.norm(t.vecs, axis=1), 1.0, rtol=1e-5)
    again = r.encode_full(texts)[1]
    assert all(np.array_equal(a.vecs, b.vecs) for a, b in zip(toks, again))
    r.use_model()
    assert np.array_equal(r.encode_full(texts)[0], real_vecs)


def test_random_ingest_slices_never_split_a_session():
    from lethe_bench import perf

    items = list(synthetic.generate(3000, 0))
    docs = list(range(len(items)))
    assert list(perf._sources(docs, items, "real")) == [("bench/synthetic", docs)]
    old = perf.RANDOM_SOURCE_ENTRIES
    perf.RANDOM_SOURCE_ENTRIES = 500
    try:
        parts = list(perf._sources(docs, items, "random"))
    finally:
        perf.RANDOM_SOURCE_ENTRIES = old
    assert [d for _, part in parts for d in part] == docs
    assert len({s for s, _ in parts}) == len(parts) > 2
    for _, part in parts[:-1]:
        assert len(part) >= 500 and items[part[-1]].session != items[part[-1] + 1].session


def test_federation_bench_runs_end_to_end(tmp_path):
    """`python -m bench.federation` at toy size: both stores built (the bench's own token
    index), both sides searched, the same top 10 (a session-11 change once broke its build)."""
    out = tmp_path / "fed"
    proc = subprocess.run(
        [sys.executable, "-m", "lethe_bench.federation", "--projects", "2", "--per-project", "40", "--queries", "2",
         "--warmup", "1", "--attach-every", "1", "--seed", "0", "--out", str(out), "--workdir", str(tmp_path)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env=dict(os.environ, HOME=str(tmp_path / "home")),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads((out / "results.json").read_text())
    assert r["n_projects"] == 2 and r["build"]["token_vectors_total"] > 0
    for name in ("shallow", "default"):
        c = r["measure"]["configs"][name]
        assert c["same_top_k_as_single"] == "2/2" and c["judge_batches_per_search"] == [1]


def test_the_summary_takes_help_and_refuses_what_is_not_a_folder(tmp_path, capsys):
    from lethe_bench import summary

    summary.main(["--help"])
    assert capsys.readouterr().out.startswith("usage: python -m lethe_bench.summary [FOLDER]")
    assert not Path("--help").exists()
    with pytest.raises(SystemExit, match="is not one folder of results"):
        summary.main([str(tmp_path / "missing")])
    summary.main([str(tmp_path)])  # an empty folder: a table with no rows, written there
    assert (tmp_path / "README.md").read_text().startswith("# Committed benchmark results")


def _repo(path, *files):
    """A git checkout at ``path`` with ``files`` committed (each holding its own name)."""
    path.mkdir(parents=True)
    for f in files:
        (path / f).parent.mkdir(parents=True, exist_ok=True)
        (path / f).write_text(f)
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "PATH": os.environ.get("PATH", "")}
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "x"], ["rev-parse", "HEAD"]):
        out = subprocess.run(["git", *args], cwd=path, env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_a_report_names_the_checkout_of_the_code_it_measured_and_a_harness_from_another(tmp_path):
    """A worktree's harness run from the repository root imports the root's lethe_sql: the
    report must name that checkout, and the harness's beside it."""
    from lethe_bench.meta import git_state, git_text

    code = _repo(tmp_path / "root", "lethe_sql/a.py", "bench/lethe_bench/b.py")
    harness = _repo(tmp_path / "worktree", "bench/lethe_bench/b.py")
    one = git_state(tmp_path / "root" / "lethe_sql", tmp_path / "root" / "bench" / "lethe_bench")
    assert one == {"commit": code, "dirty": False}
    assert git_text(one) == f"git {code[:12]}"
    (tmp_path / "root" / "lethe_sql" / "a.py").write_text("changed")
    two = git_state(tmp_path / "root" / "lethe_sql", tmp_path / "worktree" / "bench" / "lethe_bench")
    assert two["commit"] == code and two["dirty"] is True and two["harness"]["commit"] == harness
    assert git_text(two) == f"git {code[:12]}, with local changes; harness from git {harness[:12]}"
    assert git_state(tmp_path) is None and git_text(None) == ""      # no checkout: nothing claimed
