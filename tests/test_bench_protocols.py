"""Learning protocols of `lethe bench` (issue 4): prequential and split.

A learning config must never be scored on a query it learned from, must never leak
its learned state into another config, and in prequential each query is scored on
the ranking computed before its own update. Real DuckDB stores, fake vectors.
"""

from dataclasses import dataclass, field

import pytest
from test_bench_harness import FakeFullEmbedder

from lethe_bench import configs as C
from lethe_bench import runner as R
from lethe_bench.data import BenchData, Corpus, Item, Query
from lethe_sql.errors import UsageError

WORDS = ["dog", "beach", "violin", "garden", "pizza", "chess", "river", "paint", "hike", "jazz", "kayak", "lemon"]


def _bench(tmp_path, n_queries=16) -> BenchData:
    items = []
    for i in range(48):
        a, b = WORDS[i % len(WORDS)], WORDS[(i * 5 + 3) % len(WORDS)]
        items.append(Item(f"c:D{i // 4}:{i % 4}", f"Ann: day {i} we talked about {a} and {b} again",
                          session=f"s{i // 4}"))
    queries = []
    for j in range(n_queries):
        a, b = WORDS[j % len(WORDS)], WORDS[(j * 7 + 1) % len(WORDS)]
        rel = {it.id: 1 for it in items if a in it.text and b in it.text} or {items[j].id: 1}
        queries.append(Query(f"q{j}", f"what about {a} and {b}", rel, str(1 + j % 2)))
    queries.append(Query("q-dup", f"what about {WORDS[0]} and {WORDS[1]}", {items[0].id: 1}, "1"))  # same text as q0
    return BenchData("locomo", "turn-global", tmp_path / "fixture.json", [Corpus("all", items, queries)],
                     turn_level=True, files={"fixture.json": "0" * 64})


def _opts(tmp_path, configs, **kw):
    kw = {"cold": False, "latency_queries": 2, "warmup": 1, "workdir": tmp_path, "command": "lethe bench test",
          "bm25_check": False, "pool_diagnostic": False} | kw
    cfgs = [C.REGISTRY[c] if isinstance(c, str) else c for c in configs]
    return R.Options(configs=cfgs, embedder=FakeFullEmbedder(), **kw)


@pytest.fixture(autouse=True)
def _shallow_only(monkeypatch):
    """Fake vectors score low, so every search would take the deep pass; keep it shallow
    (the bench's point here is the protocol, not the depth rule)."""
    monkeypatch.setenv("LETHE_RERANK_THRESHOLD", "-1")


def _need_pipeline():
    if "hybrid+li+rif" not in C.REGISTRY or C.REGISTRY["hybrid+li+rif"].missing():
        pytest.skip("no judged pipeline in this lethe-sql")


@dataclass(frozen=True)
class SpyConfig(C.LearningConfig):
    """hybrid+li+rif that records what it learns from and what it is scored on, and checks
    that each learning search ranks exactly as a frozen search just before it would."""

    log: dict = field(default_factory=lambda: {"learned": [], "searched": [], "steps_before": [], "mismatch": 0})

    def step(self, store, query, depth=30):
        frozen = store.search_outcome(query, top_k=depth, judge=self.judge, learn=False,
                                      settings=self.settings(store))  # unlogged
        score = {c.id: c.judge_score for c in frozen.results}
        self.log["steps_before"].append(R.learned_state(store)["step"])
        ids, tm = C.LearningConfig.step(self, store, query, depth)
        # The scored ranking is a ranking of the state before the update: the same entries, in
        # an order the frozen judge scores agree with (equal scores may swap: their tie-break
        # follows first-stage scores whose last bits vary between calls).
        ok = set(ids) == set(score) and all(score[a] >= score[b] - 1e-9 for a, b in zip(ids, ids[1:]))
        self.log["mismatch"] += int(not ok)
        self.log["learned"].append(query)
        return ids, tm


def _spy(name="spy+rif"):
    base = C.REGISTRY["hybrid+li+rif"]
    spy = SpyConfig(name, "spy", None, base.missing, needs_token_index=True, judge=base.judge, static="hybrid+li",
                    overrides=base.overrides)
    search = base.search

    def searched(store, query, top_k=10, depth=30):
        spy.log["searched"].append(query)
        return search(store, query, top_k, depth)

    object.__setattr__(spy, "search", searched)
    return spy


# -- configs and CLI shape -------------------------------------------------------------


def test_learning_configs_are_registered_with_their_static_twin():
    _need_pipeline()
    li = C.REGISTRY["hybrid+li+rif"]
    assert C.learns(li) and li.static == "hybrid+li" and li.judge == "late-interaction"
    assert not C.learns(C.REGISTRY["hybrid+li"]) and not C.learns(C.REGISTRY["hybrid"])
    assert C.REGISTRY["hybrid+rerank+rif"].static == "hybrid+rerank"
    assert C.REGISTRY["default+rif"].static == "default"


def test_cross_encoder_learning_config_says_what_to_install():
    from lethe_sql.udfs.models import resolve_reranker

    if resolve_reranker() is not None:
        pytest.skip("a cross-encoder is installed here")
    with pytest.raises(UsageError, match=r"hybrid\+rerank\+rif.*lethe models pull.*LETHE_RERANK_MODEL"):
        C.resolve(["hybrid", "hybrid+rerank+rif"])


def test_a_learning_config_needs_a_learning_protocol(tmp_path):
    _need_pipeline()
    with pytest.raises(UsageError, match="--protocol prequential or --protocol split"):
        R.run(_bench(tmp_path), _opts(tmp_path, ["hybrid+li", "hybrid+li+rif"]))


def test_cli_protocol_and_corpus_options(tmp_path):
    from typer.testing import CliRunner

    from lethe_sql.cli import app

    data = tmp_path / "x.json"
    data.write_text("[]")
    r = CliRunner().invoke(app, ["bench", "locomo", str(data), "--protocol", "turn-global", "--corpus", "beir"])
    assert r.exit_code != 0 and "--corpus goes with --protocol prequential or split" in r.output
    r = CliRunner().invoke(app, ["bench", "locomo", str(data), "--train-draws", "5"])
    assert r.exit_code != 0 and "--train-draws goes with --protocol split" in r.output
    r = CliRunner().invoke(app, ["bench", "--help"])
    assert "prequential" in r.output and "split" in r.output


# -- stream and split construction ----------------------------------------------------


def test_prequential_order_is_a_seeded_permutation():
    qs = [(f"q{i}", f"t{i}", {}) for i in range(50)]
    a = R.prequential_order(qs, 0, "all")
    assert a == R.prequential_order(qs, 0, "all") and sorted(a) == sorted(qs) and a != qs
    assert R.prequential_order(qs, 1, "all") != a


def test_split_keeps_a_repeated_question_on_one_side_and_draws_from_a_hot_set():
    qs = [(f"q{i}", f"text {i % 40}", None) for i in range(60)]  # 20 texts asked twice
    train, test = R.split_halves(qs, 0, "all")
    assert len(train) + len(test) == 60 and abs(len(train) - len(test)) <= 2
    assert not {t for _, t, _ in train} & {t for _, t, _ in test}
    draws, hot = R.split_stream(train, 2000, 0, "all")
    assert len(hot) == round(0.2 * len(train)) and set(draws) <= set(train)
    share = sum(d in hot for d in draws) / len(draws)
    assert 0.65 < share < 0.75


# -- runs ------------------------------------------------------------------------------


def test_prequential_scores_each_query_before_its_own_update(tmp_path):
    _need_pipeline()
    spy = _spy()
    r = R.run(_bench(tmp_path), _opts(tmp_path, ["hybrid+li", spy], learning="prequential"))
    n = r["n_queries"]
    assert r["protocol"] == "prequential" and r["corpus"] == "turn-global" and n == 17
    log = spy.log
    assert log["steps_before"][:n] == list(range(n))  # state carried forward, one update per query
    assert log["mismatch"] == 0  # every scored ranking is the one before that query's update
    pq = r["per_query"]["ndcg@10"]
    assert pq["spy+rif"][0] == pq["hybrid+li"][0]  # nothing learned yet at the first query
    lr = r["learning"]
    assert lr["second_half"]["n"] == n - n // 2 and sum(r["per_query"]["second_half"]) == n - n // 2
    pair = lr["pairs"]["spy+rif"]
    assert pair["against"] == "hybrid+li" and pair["overall"]["n"] == n and "second_half" in pair
    st = lr["configs"]["spy+rif"]["stores"][0]
    assert st["logged_queries"] == n and st["step"] == n and st["suppression_rows"] > 0  # it did learn
    assert lr["configs"]["spy+rif"]["learn_update_ms"]["p50_ms"] > 0


def test_learning_never_leaks_into_other_configs(tmp_path):
    """The non-learning configs of a learning run score exactly as in a run without any learner."""
    _need_pipeline()
    bench = _bench(tmp_path)
    alone = R.run(bench, _opts(tmp_path, ["hybrid", "hybrid+li"]))
    mixed = R.run(_bench(tmp_path), _opts(tmp_path, ["hybrid", "hybrid+li", "hybrid+li+rif"], learning="prequential"))
    for name in ("hybrid", "hybrid+li"):
        a = dict(zip(alone["per_query"]["ids"], alone["per_query"]["ndcg@10"][name]))
        b = dict(zip(mixed["per_query"]["ids"], mixed["per_query"]["ndcg@10"][name]))
        assert set(a) == set(b)
        # Equal but for swaps of exactly tied entries (first-stage scores vary in their last bits
        # between processes and calls); learned suppression would move whole entries.
        differ = [q for q in a if abs(a[q] - b[q]) > 1e-9]
        assert len(differ) <= 2, (name, differ)
    assert mixed["learning"]["configs"]["hybrid+li+rif"]["stores"][0]["suppression_rows"] > 0


def test_a_config_that_learns_on_the_shared_store_is_refused(tmp_path):
    _need_pipeline()

    def rogue(store, query, top_k=10, depth=30):  # learns, but is not declared a learning config
        return [h.id for h in store.search(query, top_k=top_k, mode="default", judge="late-interaction", learn=True)]

    cfg = C.Config("rogue", "learns behind the runner's back", rogue, needs_token_index=True)
    with pytest.raises(R.LeakError, match="rogue"):
        R.run(_bench(tmp_path), _opts(tmp_path, ["hybrid+li", cfg, "hybrid+li+rif"], learning="prequential"))


def test_split_never_scores_a_learned_from_query(tmp_path):
    _need_pipeline()
    spy = _spy()
    bench = _bench(tmp_path)
    r = R.run(bench, _opts(tmp_path, ["hybrid+li", spy], learning="split", train_draws=30))
    sp = r["learning"]["split"]
    assert sp["draws"] == 30 and sp["train_queries"] + sp["test_queries"] == 17
    assert r["n_queries"] == sp["test_queries"]
    learned, searched = set(spy.log["learned"]), set(spy.log["searched"])
    assert learned and searched and not learned & searched
    scored_ids = set(r["per_query"]["ids"])
    by_id = {q.id: q.text for q in bench.corpora[0].queries}
    assert not {by_id[i] for i in scored_ids} & learned
    assert ("q0" in scored_ids) == ("q-dup" in scored_ids)  # same text, same side
    st = r["learning"]["configs"]["spy+rif"]["stores"][0]
    assert st["logged_queries"] == 30 and st["step"] == 30  # frozen while scoring: no step added


def test_split_refuses_to_score_a_query_it_learned_from(tmp_path, monkeypatch):
    _need_pipeline()

    def leaky(queries, seed, corpus):
        return list(queries), list(queries)  # the same questions on both sides

    monkeypatch.setattr(R, "split_halves", leaky)
    with pytest.raises(R.LeakError):
        R.run(_bench(tmp_path), _opts(tmp_path, ["hybrid+li", "hybrid+li+rif"], learning="split", train_draws=5))


def test_report_has_the_learning_section(tmp_path):
    _need_pipeline()
    from lethe_bench import report

    r = R.run(_bench(tmp_path), _opts(tmp_path, ["hybrid+li", "hybrid+li+rif"], learning="prequential",
                                      baseline="hybrid+li"))
    per_query = r.pop("per_query")
    md = report.write(r, tmp_path / "out", per_query)["markdown"].read_text()
    assert "Learning protocol: prequential" in md and "second half of the stream" in md
    assert "learning update p50 / p95 ms" in md
