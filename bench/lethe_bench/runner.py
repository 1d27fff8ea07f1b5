"""Run a quality benchmark through the user code path and score it.

For each corpus of a loaded data set (``data.BenchData``):

1. a fresh ``MemoryStore`` under a temporary folder (on disk for a one-corpus
   protocol, ``:memory:`` for the many small corpora of ``session-local``);
2. ingest with ``store.put_documents(source, [Document(...)])``, the path markdown
   indexing takes (content-hash ids, FTS updated incrementally). A document carries the
   item's text, a heading, its date and its session; relevance never reaches the index;
3. every query through each config's search (``configs.py``: ``MemoryStore.search``),
   30 results deep, scored with ``metrics.score_query``;
4. optional diagnostics: candidate-pool recall at 30/100/500, warm latency with real
   query embeddings, one cold ``lethe search`` process, an independent BM25.

Learning protocols (``Options.learning``; a learning config must never be scored on a
query it learned from). Each learning config (``configs.LearningConfig``) gets its own
copy of the freshly built store, so its learned state never reaches another config;
non-learning configs share the base store, which the runner checks is still unlearned
at the end.

* ``prequential``: every corpus's queries in one seeded order; at each position every
  config answers the same query (paired), a learning config through ``step`` (scored on
  the ranking computed before its own update; the update then carries forward).
  Reported overall and on the second half of each corpus's stream.
* ``split``: the questions (grouped by their text, so a repeated question never sits
  on both sides) split in seeded halves; learning configs learn from a stream of draws
  over the training half only (70% of draws from a hot 20% of it), then freeze (learning
  off, learned state applied) and every config is scored on the other half. The runner
  refuses to score a query that was learned from, by id, by text and by the learning
  store's own query log.

Items and entries. An entry id is the hash of its text, so items with identical text
(two ``"Thanks!"`` turns) become one entry; and when the store merges near-duplicates on
write (``Settings.dedup``, cosine >= 0.95), an absorbed item is held by the entry that
absorbed it (``MemoryStore.absorbed_map``). Scoring is done over entries: an entry is
relevant with the highest grade of the items it stands for, belongs to every session of
those items, and the ideal ranking is built from all relevant entries. Reports give the
number of items collapsed either way.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lethe_sql.markdown import Document

from . import metrics as M
from . import stats
from .configs import Config, learns
from .data import BenchData, Corpus
from .meta import Log, git_state, machine, now_iso, package_version, peak_rss_mib

MAIN_METRICS = ("ndcg@10", "recall@10", "recall@30", "mrr")
BEHAVIOUR_METRICS = ("top1_exact", "top1_sibling", "top1_wrong_family")
RESULT_DEPTH = 30  # results fetched per query: enough for recall@30 and MRR@30
LEARNING_PROTOCOLS = ("prequential", "split")
SPLIT_HOT_FRACTION = 0.2  # of the training half
SPLIT_HOT_SHARE = 0.7  # of the training draws


@dataclass
class Options:
    configs: list[Config]
    baseline: str | None = None
    n_queries: int | None = None
    seed: int = 0
    pool_diagnostic: bool = True
    pool_depths: tuple[int, ...] = (30, 100, 500)
    latency_queries: int = 100
    warmup: int = 3
    cold: bool = True
    cache: bool = True
    cache_dir: Path | None = None
    bm25_check: bool = True
    workdir: Path | None = None
    command: str = ""
    log: Log = field(default_factory=lambda: Log(False))
    embedder: object = None  # injected (tests, reuse across runs); built when None
    learning: str | None = None  # None (each query scored alone, nothing learns), prequential or split
    train_draws: int | None = None  # split: learning draws; default twice the training half


def make_embedder(cache: bool = True, cache_dir: Path | None = None, *, token_index: bool = False):
    """The model, behind the on-disk cache when ``cache``. With ``token_index`` the
    embedder also offers ``encode_full`` (token vectors for late interaction), which
    always runs the model: token vectors are not cached."""
    from lethe_sql.udfs.embed import Embedder

    from .embedders import CachedEmbedder, CachedFullEmbedder

    real = Embedder()
    if not cache:
        return real
    if token_index and hasattr(real, "encode_full"):
        return CachedFullEmbedder(real, cache_dir)
    return CachedEmbedder(real, cache_dir)


@contextlib.contextmanager
def real_queries(emb):
    """Embed queries for real inside the block (no cache hits in timed searches)."""
    bypass = getattr(emb, "bypass", None)
    if bypass is None:
        yield
    else:
        with bypass():
            yield


@dataclass
class Built:
    store: object
    entry_items: dict[str, list[str]]
    entry_sessions: dict[str, set]
    item_entry: dict[str, str]
    seconds: float
    n_items: int
    n_absorbed: int = 0  # items whose entry was merged into a near-duplicate


def build_store(store, corpus: Corpus, source: str) -> Built:
    """Ingest ``corpus`` into ``store`` through ``put_documents``; the item -> entry map.

    An item's entry is the content hash of its text, or, when the store merged it into a
    near-duplicate (``MemoryStore.absorbed_map``), the live entry that absorbed it.
    """
    docs = []
    hashed: list[tuple[str, str, str]] = []  # (item id, content id, session)
    for it in corpus.items:
        text = it.text.strip()
        if not text:
            continue
        doc = Document(content=it.text, heading=it.heading, created_at=it.created_at, session_id=it.session)
        # the id ingestion gives it (its text as the index holds it: secrets redacted)
        hashed.append((it.id, doc.to_chunk(0, source).id, it.session if it.session is not None else it.id))
        docs.append(doc)
    t0 = time.perf_counter()
    store.put_documents(source, docs)
    seconds = time.perf_counter() - t0
    live = {r[0] for r in store.con.execute("SELECT id FROM entries").fetchall()}
    absorbed_map = getattr(store, "absorbed_map", None)
    absorbed = absorbed_map() if absorbed_map is not None else {}
    entry_items: dict[str, list[str]] = defaultdict(list)
    entry_sessions: dict[str, set] = defaultdict(set)
    item_entry: dict[str, str] = {}
    n_absorbed = 0
    for item_id, cid, session in hashed:
        eid = cid
        if eid not in live:
            eid = absorbed.get(cid)
            if eid not in live:
                raise RuntimeError(f"item {item_id} (entry {cid}) is neither in the index nor merged into an entry")
            n_absorbed += 1
        entry_items[eid].append(item_id)
        entry_sessions[eid].add(session)
        item_entry[item_id] = eid
    if len(entry_items) != len(live):
        raise RuntimeError(f"{len(entry_items)} entries expected after ingest, the store holds {len(live)}")
    built = Built(store, dict(entry_items), dict(entry_sessions), item_entry, seconds, len(docs))
    built.n_absorbed = n_absorbed
    return built


def entry_relevance(relevant: dict[str, int], item_entry: dict[str, str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item, grade in relevant.items():
        eid = item_entry.get(item)
        if eid is not None and grade > 0:
            out[eid] = max(out.get(eid, 0), grade)
    return out


def select_queries(bench: BenchData, n: int | None, seed: int) -> None:
    """Keep a seeded sample of ``n`` queries (in their original order); in place."""
    if not n or n >= bench.n_queries:
        return
    all_ids = [q.id for c in bench.corpora for q in c.queries]
    keep = set(random.Random(seed).sample(all_ids, n))
    for c in bench.corpora:
        c.queries = [q for q in c.queries if q.id in keep]
    bench.notes.append(f"a seeded sample of {n} queries (seed {seed}) of {len(all_ids)}")


def _rng(seed: int, corpus: str, what: str) -> random.Random:
    return random.Random(f"{seed}:{corpus}:{what}")  # str seeds are hashed with sha512: stable across runs


def prequential_order(queries: list, seed: int, corpus: str) -> list:
    """The fixed seeded order the stream follows (a permutation of ``queries``)."""
    order = list(queries)
    _rng(seed, corpus, "prequential").shuffle(order)
    return order


def split_halves(queries: list, seed: int, corpus: str) -> tuple[list, list]:
    """(train, test): the questions split by their text in seeded halves, so a repeated
    question is on one side only; ``queries`` are (query, text, relevance) triples."""
    groups: dict[str, list] = {}
    for item in queries:
        groups.setdefault(item[1], []).append(item)
    texts = sorted(groups)
    _rng(seed, corpus, "split").shuffle(texts)
    train: list = []
    i = 0
    while i < len(texts) and len(train) < len(queries) // 2:
        train.extend(groups[texts[i]])
        i += 1
    test = [x for t in texts[i:] for x in groups[t]]
    return train, test


def split_stream(train: list, n_draws: int, seed: int, corpus: str) -> tuple[list, list]:
    """(draws, hot): ``n_draws`` draws over ``train`` with repeats, a share
    ``SPLIT_HOT_SHARE`` of them from a seeded hot ``SPLIT_HOT_FRACTION`` of it."""
    if not train or n_draws <= 0:
        return [], []
    rng = _rng(seed, corpus, "stream")
    pool = list(train)
    rng.shuffle(pool)
    n_hot = max(1, round(SPLIT_HOT_FRACTION * len(pool)))
    hot, cold = pool[:n_hot], pool[n_hot:] or pool[:n_hot]
    draws = [rng.choice(hot) if rng.random() < SPLIT_HOT_SHARE else rng.choice(cold) for _ in range(n_draws)]
    return draws, hot


def learned_state(store) -> dict:
    """What a store has learned: logged searches, suppression rows, clusters, the step."""
    q, s, c, step = store.con.execute(
        "SELECT (SELECT count(*) FROM query_log), (SELECT count(*) FROM rif_suppression), "
        "(SELECT count(*) FROM rif_centroids), (SELECT value FROM meta WHERE key = 'search_step')"
    ).fetchone()
    return {"logged_queries": int(q), "suppression_rows": int(s), "clusters": int(c), "step": int(step or 0)}


class LeakError(RuntimeError):
    """A learning protocol would score a query its learner has learned from."""


def _copy_store(store, make, path: Path):
    """Close ``store``, copy its database file to ``path``; (reopened store, copy store)."""
    store.con.execute("CHECKPOINT")
    src = Path(store.db_path)
    store.close()
    shutil.copyfile(src, path)
    return make(src), make(path)


def _percentiles(ms: list[float]) -> dict:
    if not ms:
        return {"p50_ms": None, "p95_ms": None}
    a = np.asarray(ms)
    return {"p50_ms": round(float(np.percentile(a, 50)), 2), "p95_ms": round(float(np.percentile(a, 95)), 2)}


def lethe_command() -> list[str]:
    exe = Path(sys.executable).parent / "lethe"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "lethe_sql.cli"]


def cold_process(args: list[str], timeout: float = 300) -> dict:
    """Run one ``lethe`` process; its wall time and the peak RSS of finished children."""
    t0 = time.perf_counter()
    proc = subprocess.run(lethe_command() + args, capture_output=True, text=True, timeout=timeout)
    ms = (time.perf_counter() - t0) * 1000
    out = {"ms": round(ms, 1), "exit": proc.returncode, "peak_rss_mib": peak_rss_mib(children=True)}
    if proc.returncode != 0:
        out["stderr"] = proc.stderr.strip()[-500:]
    return out


class _Fetcher:
    """One query's ranked lists, fetched once: a prefix-stable config is searched once,
    as deep as the run needs, and cut; any other config once per depth."""

    def __init__(self, store, text: str, configs: dict[str, Config], deep: int) -> None:
        self.store, self.text, self.configs, self.deep = store, text, configs, deep
        self.memo: dict[tuple[str, int], list[str]] = {}

    def __call__(self, name: str, depth: int) -> list[str]:
        from .configs import REGISTRY

        cfg = self.configs.get(name) or REGISTRY[name]
        if cfg.prefix_stable:
            n = max(depth, self.deep)
            if (name, n) not in self.memo:
                self.memo[(name, n)] = cfg.search(self.store, self.text, n, n)
            return self.memo[(name, n)][:depth]
        if (name, depth) not in self.memo:
            self.memo[(name, depth)] = cfg.search(self.store, self.text, depth, depth)
        return self.memo[(name, depth)]


def run(bench: BenchData, opts: Options) -> dict:
    log = opts.log
    t_start = time.perf_counter()
    started = now_iso()
    configs = opts.configs
    names = [c.name for c in configs]
    baseline = opts.baseline or ("hybrid" if "hybrid" in names else names[0])
    if baseline not in names:
        from lethe_sql.errors import UsageError

        raise UsageError(f"baseline {baseline!r} is not among the configs run ({', '.join(names)})")
    from lethe_sql.errors import UsageError
    from lethe_sql.search import clean_query

    select_queries(bench, opts.n_queries, opts.seed)
    token_index = any(c.needs_token_index for c in configs)
    emb = opts.embedder or make_embedder(opts.cache, opts.cache_dir, token_index=token_index)
    single = len(bench.corpora) == 1
    all_qids = [q.id for c in bench.corpora for q in c.queries]
    lat_ids = set(random.Random(opts.seed + 1).sample(all_qids, min(opts.latency_queries, len(all_qids))))

    learning = opts.learning
    learners = [c for c in configs if learns(c)]
    if learning is not None and learning not in LEARNING_PROTOCOLS:
        raise UsageError(f"unknown learning protocol {learning!r}; choose {' or '.join(LEARNING_PROTOCOLS)}")
    if learners and learning is None:
        raise UsageError(
            f"{', '.join(c.name for c in learners)} learn(s) from every search, so a query would be scored on "
            "state learned from the queries before it in an arbitrary order: run it with --protocol prequential "
            "or --protocol split"
        )
    per_query: dict[str, list[dict]] = {n: [] for n in names}
    q_meta: list[tuple[str, str | None]] = []
    second_half: list[bool] = []  # prequential: the query sits in the second half of its corpus's stream
    pool: dict[str, dict[int, list[float]]] = {n: {d: [] for d in opts.pool_depths} for n in names}
    lat: dict[str, list[float]] = {n: [] for n in names}
    learn_ms: dict[str, list[float]] = {c.name: [] for c in learners}
    step_ms: dict[str, list[float]] = {c.name: [] for c in learners}
    deep_steps: dict[str, int] = {c.name: 0 for c in learners}  # learning searches that took the deep pass
    learn_info: dict[str, dict] = {c.name: {"stores": []} for c in learners}
    split_info = {"train_queries": 0, "test_queries": 0, "hot_queries": 0, "draws": 0, "hot_draws": 0,
                  "distinct_trained": 0}
    settings_used = None
    ref_ndcg: list[float] = []
    sql_bm25_ndcg: list[float] = []
    top1_agree: list[float] = []
    pool_check: dict[str, dict] = {}
    index = {"items": 0, "entries": 0, "seconds": 0.0, "stores": 0, "absorbed": 0}
    cold: dict | None = None
    skipped_queries = 0
    warmed = False
    shared_store_learned: list[str] = []

    tmp_ctx = tempfile.TemporaryDirectory(prefix="lethe-bench-", dir=opts.workdir)
    with tmp_ctx as tmp:
        from lethe_sql import MemoryStore
        from lethe_sql.errors import LetheError

        root = Path(tmp) / "project"
        for ci, corpus in enumerate(bench.corpora):
            if not corpus.queries:
                continue
            db_path = None if single else ":memory:"
            if learners and not single:  # learning stores are copies of the built file
                db_path = Path(tmp) / f"corpus-{ci}.duckdb"
            store = MemoryStore(root, db_path=db_path, embedder=emb)
            lstores: dict[str, object] = {}
            try:
                if single or ci == 0:
                    log(f"ingesting {len(corpus.items)} items of {bench.dataset}/{corpus.name}")
                built = build_store(store, corpus, f"bench/{bench.dataset}/{corpus.name}")
                index["items"] += built.n_items
                index["entries"] += len(built.entry_items)
                index["absorbed"] += built.n_absorbed
                index["seconds"] += built.seconds
                index["stores"] += 1
                if single:
                    log(f"indexed {built.n_items} items as {len(built.entry_items)} entries in {built.seconds:.1f} s")
                if token_index:
                    n_tok = store.con.execute("SELECT count(*) FROM token_vectors").fetchone()[0]
                    if not n_tok:
                        need = ", ".join(c.name for c in configs if c.needs_token_index)
                        raise LetheError(f"{need} needs the token index, and this store has none: the embedder "
                                         "gives no token vectors (encode_full), or the store was built without them")
                for cfg in learners:  # each learner on its own copy of the freshly built store
                    def make(path):
                        return MemoryStore(root, db_path=path, embedder=emb)

                    slug = cfg.name.replace("+", "_")
                    store, lstores[cfg.name] = _copy_store(store, make, Path(tmp) / f"corpus-{ci}-{slug}.duckdb")
                    before = learned_state(lstores[cfg.name])
                    if before["logged_queries"] or before["suppression_rows"] or before["step"]:
                        raise LetheError(f"the store copied for {cfg.name} has learned state before its first search")
                    settings_used = settings_used or lstores[cfg.name].settings
                    if not lstores[cfg.name].settings.rif:
                        raise UsageError(f"{cfg.name} needs RIF on (LETHE_RIF or the project config turns it off)")
                queries = []
                for q in corpus.queries:
                    try:
                        text = clean_query(q.text)
                    except UsageError:
                        skipped_queries += 1
                        continue
                    rel = entry_relevance(q.relevant, built.item_entry)
                    if not rel:
                        skipped_queries += 1
                        continue
                    queries.append((q, text, rel))
                if hasattr(emb, "flush"):
                    emb.encode([t for _, t, _ in queries])  # query vectors into the cache, one batch
                    emb.flush()
                ref = None
                if opts.bm25_check and single and "bm25" in names:
                    from .bm25ref import BM25

                    eids = list(built.entry_items)
                    texts = {}
                    for it in corpus.items:
                        if it.id in built.item_entry:
                            texts.setdefault(built.item_entry[it.id], it.text.strip())
                    ref = BM25(eids, [texts[e] for e in eids])
                sessions_of = (lambda e, s=built.entry_sessions: s.get(e, ())) if bench.turn_level else None
                by_name = {c.name: c for c in configs}
                do_pool = opts.pool_diagnostic and single
                deep = max(RESULT_DEPTH, *opts.pool_depths) if do_pool else RESULT_DEPTH
                store_of = {c.name: lstores.get(c.name, store) for c in configs}

                # What is scored, in which order; what the learners learn from first.
                scored = queries
                trained_ids: set[str] = set()
                trained_texts: set[str] = set()
                if learning == "prequential":
                    scored = prequential_order(queries, opts.seed, corpus.name)
                elif learning == "split":
                    train, scored = split_halves(queries, opts.seed, corpus.name)
                    n_draws = opts.train_draws if opts.train_draws is not None else 2 * len(train)
                    draws, hot = split_stream(train, n_draws, opts.seed, corpus.name)
                    hot_ids = {q.id for q, _, _ in hot}
                    split_info["train_queries"] += len(train)
                    split_info["test_queries"] += len(scored)
                    split_info["hot_queries"] += len(hot)
                    split_info["draws"] += len(draws)
                    split_info["hot_draws"] += sum(q.id in hot_ids for q, _, _ in draws)
                    split_info["distinct_trained"] += len({q.id for q, _, _ in draws})
                    if learners:
                        log(f"split: {len(draws)} learning draws over {len(train)} training questions "
                            f"({len(hot)} hot), then {len(scored)} held-out questions scored frozen")
                    for di, (q, text, _) in enumerate(draws):
                        trained_ids.add(q.id)
                        trained_texts.add(text)
                        for cfg in learners:
                            _, tm = cfg.step(lstores[cfg.name], text, RESULT_DEPTH)
                            learn_ms[cfg.name].append(tm.get("learn", float("nan")))
                            step_ms[cfg.name].append(tm.get("total", float("nan")))
                            deep_steps[cfg.name] += int(bool(tm.get("deep")))
                        if single and (di + 1) % 250 == 0:
                            log(f"learned from {di + 1}/{len(draws)} draws")
                    test_texts = {t for _, t, _ in scored}
                    for cfg in learners:
                        logged = {r[0] for r in lstores[cfg.name].con.execute("SELECT DISTINCT query FROM query_log").fetchall()}
                        if logged & test_texts:
                            raise LeakError(f"{cfg.name} logged {len(logged & test_texts)} held-out question(s) "
                                            "while learning")
                        if logged - trained_texts:
                            raise LeakError(f"{cfg.name} learned from searches outside the training stream")
                frozen = {c.name: learned_state(lstores[c.name]) for c in learners} if learning == "split" else {}

                for qi, (q, text, rel) in enumerate(scored):
                    if learning == "split" and (q.id in trained_ids or text in trained_texts):
                        raise LeakError(f"query {q.id} would be scored after learning from it")
                    q_meta.append((q.id, q.category))
                    second_half.append(qi >= len(scored) // 2)
                    fetch = _Fetcher(store, text, by_name, deep)
                    for cfg in configs:
                        if cfg.name in lstores:
                            if learning == "prequential":  # scored on the ranking before its own update
                                ids, tm = cfg.step(lstores[cfg.name], text, RESULT_DEPTH)
                                learn_ms[cfg.name].append(tm.get("learn", float("nan")))
                                step_ms[cfg.name].append(tm.get("total", float("nan")))
                                deep_steps[cfg.name] += int(bool(tm.get("deep")))
                            else:  # split: frozen
                                ids = cfg.search(lstores[cfg.name], text, RESULT_DEPTH, RESULT_DEPTH)
                        else:
                            ids = fetch(cfg.name, RESULT_DEPTH)
                        m = M.score_query(ids, rel, sessions_of=sessions_of, session_level=bench.session_level)
                        per_query[cfg.name].append(m)
                        if cfg.name == "bm25" and ref is not None:
                            mine = ref.search(text, 10)
                            ref_ndcg.append(M.ndcg_at_k(mine, rel, 10))
                            sql_bm25_ndcg.append(m["ndcg@10"])
                            top1_agree.append(float(mine[:1] == ids[:1]))
                        if do_pool and cfg.name not in lstores:
                            if cfg.pool is not None:
                                pools = cfg.pool(fetch, opts.pool_depths)
                                if cfg.pool_is_own_order:
                                    chk = pool_check.setdefault(cfg.name, {"checked": 0, "mismatches": 0})
                                    chk["checked"] += 1
                                    cut = min(opts.pool_depths)
                                    chk["mismatches"] += int(pools[cut] != fetch(cfg.name, cut))
                            else:
                                pools = {d: fetch(cfg.name, d) for d in opts.pool_depths}
                            for d in opts.pool_depths:
                                pool[cfg.name][d].append(M.recall_at_k(pools[d], rel, d))
                    if single and (qi + 1) % 250 == 0:
                        log(f"scored {qi + 1}/{len(scored)} queries")
                for name, before in frozen.items():
                    if learned_state(lstores[name]) != before:
                        raise LeakError(f"{name} changed its learned state while frozen")
                timed = [(q, text) for q, text, _ in scored if q.id in lat_ids]
                if timed:
                    with real_queries(emb):
                        if not warmed:
                            for cfg in configs:
                                for _, text in timed[: opts.warmup]:
                                    cfg.search(store_of[cfg.name], text, 10, RESULT_DEPTH)
                            warmed = True
                        for _, text in timed:
                            for cfg in configs:  # interleaved, so load drifts hit every config alike
                                t0 = time.perf_counter()
                                by_name[cfg.name].search(store_of[cfg.name], text, 10, RESULT_DEPTH)
                                lat[cfg.name].append((time.perf_counter() - t0) * 1000)
                for name, st in lstores.items():
                    learn_info[name]["stores"].append(learned_state(st))
                base = learned_state(store)
                if base["logged_queries"] or base["suppression_rows"] or base["step"]:
                    shared = [c.name for c in configs if c.name not in lstores]
                    msg = (f"the store shared by {', '.join(shared)} changed its learned state during the run "
                           f"({base}): one of them learns from its searches and is not a learning config")
                    if learning is not None:
                        raise LeakError(msg)
                    shared_store_learned.append(msg)
            finally:
                store.close()
                for st in lstores.values():
                    st.close()
            if single and opts.cold and queries:
                mode = baseline if baseline in ("bm25", "dense", "hybrid") else "hybrid"
                log("one cold `lethe search` process")
                cold = cold_process(["--root", str(root), "search", queries[0][1], "--json", "--read-only",
                                     "--mode", mode, "--top-k", "10"])
                cold["mode"] = mode
        if hasattr(emb, "flush"):
            emb.flush()

    n = len(q_meta)
    if n == 0:
        from lethe_sql.errors import LetheError

        raise LetheError("no query could be scored (no query with relevant items in the index)")
    metric_keys = list(MAIN_METRICS)
    if bench.session_level:
        metric_keys.append("recall_any@5")
    if bench.turn_level:
        metric_keys.extend(BEHAVIOUR_METRICS)
    arrays = {c: {k: np.array([m[k] for m in per_query[c]]) for k in metric_keys} for c in names}

    cats = sorted({c for _, c in q_meta if c is not None}, key=lambda s: (len(s), s))
    out_configs = {}
    for c in names:
        a = arrays[c]
        entry = {k: round(float(a[k].mean()), 4) for k in metric_keys}
        entry["ci95"] = {
            k: [round(v, 4) for v in stats.bootstrap_ci(a[k], seed=opts.seed)]
            for k in metric_keys
            if k not in BEHAVIOUR_METRICS
        }
        entry.update(_percentiles(lat[c]))
        entry["n_latency_queries"] = len(lat[c])
        if cats:
            entry["per_category"] = {}
            for cat in cats:
                mask = np.array([qc == cat for _, qc in q_meta])
                entry["per_category"][cat] = {"n": int(mask.sum())} | {
                    k: round(float(a[k][mask].mean()), 4) for k in metric_keys
                }
        out_configs[c] = entry

    vs = {}
    for c in names:
        if c == baseline:
            continue
        res = stats.compare(arrays[baseline]["ndcg@10"], arrays[c]["ndcg@10"], seed=opts.seed)
        vs[c] = {"metric": "ndcg@10", "delta": round(res["delta"], 4), "ci95": [round(x, 4) for x in res["ci95"]],
                 "p": round(res["p"], 4), "n": res["n"]}
        for k in ("recall@10", "mrr"):
            r = stats.compare(arrays[baseline][k], arrays[c][k], seed=opts.seed)
            vs[c][k] = {"delta": round(r["delta"], 4), "ci95": [round(x, 4) for x in r["ci95"]], "p": round(r["p"], 4)}

    result = {
        "dataset": bench.dataset,
        "protocol": learning or bench.protocol,
        "corpus": bench.protocol,
        "n_queries": n,
        "baseline": baseline,
        "configs": out_configs,
        "vs_baseline": vs,
        "command": opts.command,
        "environment": {k: v for k, v in sorted(os.environ.items()) if k.startswith("LETHE_")},
        "data": {"path": str(bench.path), "sha256": bench.files},
        "package_version": package_version(),
        "git": git_state(),
        "machine": machine(),
        "seed": opts.seed,
        "started": started,
        "statistics": {
            "bootstrap": f"paired percentile bootstrap of the mean difference, {stats.N_RESAMPLES} resamples, seed {opts.seed}",
            "permutation": f"paired sign-flip permutation test, two-sided, {stats.N_RESAMPLES} permutations, seed {opts.seed}",
        },
        "index": {
            "items": index["items"],
            "entries": index["entries"],
            "collapsed_items": index["items"] - index["entries"],
            "near_duplicate_items": index["absorbed"],
            "stores": index["stores"],
            "seconds": round(index["seconds"], 2),
            "items_per_s": round(index["items"] / index["seconds"], 1) if index["seconds"] else None,
            "embedder": _embedder_info(emb),
        },
        "latency": {
            "warm_queries": len(lat_ids),
            "warm": "MemoryStore.search(top_k=10) with a real query embedding (cache off), after "
            f"{opts.warmup} warm-up queries per config; configs interleaved per query",
            "cold_search": cold,
            "peak_rss_mib": peak_rss_mib(),
        },
        "category_names": {c: bench.category_names.get(c, c) for c in cats},
        "notes": list(bench.notes),
        "seconds_total": None,
    }
    if learning is not None:
        result["learning"] = _learning_section(
            learning, opts, configs, arrays, second_half, learn_ms, step_ms, learn_info, split_info, settings_used)
        for name, n_deep in deep_steps.items():
            result["learning"]["configs"][name]["deep_pass_searches"] = n_deep
    result["notes"].extend(shared_store_learned)
    if skipped_queries:
        result["notes"].append(f"{skipped_queries} query(ies) skipped: empty text or no relevant item indexed")
    if opts.pool_diagnostic and single:
        result["pool_recall"] = {
            c: {str(d): round(float(np.mean(pool[c][d])), 4) for d in opts.pool_depths} for c in names
            if pool[c][opts.pool_depths[0]]
        }
    if pool_check:
        result["pool_check"] = {
            c: dict(v, what=f"pools computed from the component lists equal the config's own search at depth "
                    f"{min(opts.pool_depths)} on {v['checked'] - v['mismatches']} of {v['checked']} queries "
                    "(a mismatch is a swap of near-tied entries: lethe_bm25 scores vary in their last bits "
                    "between calls)")
            for c, v in pool_check.items()
        }
    if ref_ndcg:
        sql = float(np.mean(sql_bm25_ndcg))
        ind = float(np.mean(ref_ndcg))
        result["bm25_check"] = {
            "independent_ndcg@10": round(ind, 4),
            "sql_ndcg@10": round(sql, 4),
            "abs_diff": round(abs(ind - sql), 4),
            "top1_agreement": round(float(np.mean(top1_agree)), 4),
            "what": "numpy Okapi BM25 (bench/bm25ref.py), same tokenizer, k1=1.2, b=0.75, over the same entries",
        }
    result["per_query"] = {
        "ids": [qid for qid, _ in q_meta],
        "order": {"prequential": "stream order", "split": "the held-out half"}.get(learning, "data set order"),
        "ndcg@10": {c: [round(float(x), 4) for x in arrays[c]["ndcg@10"]] for c in names},
    }
    if learning == "prequential":
        result["per_query"]["second_half"] = [bool(x) for x in second_half]
    result["seconds_total"] = round(time.perf_counter() - t_start, 1)
    return result


def _compare(a, b, seed: int) -> dict:
    r = stats.compare(a, b, seed=seed)
    return {"delta": round(r["delta"], 4), "ci95": [round(x, 4) for x in r["ci95"]], "p": round(r["p"], 4),
            "n": r["n"]}


def _learning_section(learning, opts, configs, arrays, second_half, learn_ms, step_ms, learn_info, split_info,
                      settings_used) -> dict:
    """What the learning protocol did, and each learner against its non-learning twin."""
    import dataclasses

    seed = opts.seed
    names = [c.name for c in configs]
    out: dict = {"protocol": learning}
    if learning == "prequential":
        out["what"] = ("every corpus's queries in one seeded order; each query is scored on the ranking a learning "
                       "config gives before its own update, and what it learns carries forward; non-learning configs "
                       "answer the same stream (paired)")
        mask = np.array(second_half, dtype=bool)
        out["second_half"] = {"n": int(mask.sum()), "configs": {}}
        for c in names:
            a = arrays[c]
            out["second_half"]["configs"][c] = {
                k: round(float(a[k][mask].mean()), 4) for k in ("ndcg@10", "recall@10", "mrr")
            } | {"ci95": {"ndcg@10": [round(v, 4) for v in stats.bootstrap_ci(a["ndcg@10"][mask], seed=seed)]}}
    else:
        out["what"] = (f"questions split by text in seeded halves; learning configs learn from {split_info['draws']} "
                       f"draws over the training half ({SPLIT_HOT_SHARE:.0%} of draws from a hot "
                       f"{SPLIT_HOT_FRACTION:.0%} of it), then freeze; every config is scored on the held-out half, "
                       "which no learner has searched (checked by id, by text and against each learner's query log)")
        out["split"] = dict(split_info)
        out["split"]["hot_draw_share"] = round(split_info["hot_draws"] / split_info["draws"], 3) if split_info["draws"] else None
    out["configs"] = {}
    for c in configs:
        if not learns(c):
            continue
        info = {"judge": c.judge or "auto", "static": c.static, "stores": learn_info[c.name]["stores"],
                "learning_searches": len(learn_ms[c.name]),
                "learn_update_ms": _percentiles([x for x in learn_ms[c.name] if x == x]),
                "search_with_learning_ms": _percentiles([x for x in step_ms[c.name] if x == x])}
        out["configs"][c.name] = info
    if settings_used is not None:
        out["settings"] = {k: v for k, v in dataclasses.asdict(settings_used).items()
                           if k.startswith(("rif", "n_clusters", "refit", "lifecycle", "top_k", "k_", "depth", "rerank",
                                            "fusion", "w_", "blend"))}
    pairs = {}
    for c in configs:
        if learns(c) and c.static in arrays:
            pair = {"against": c.static, "metric": "ndcg@10",
                    "overall": _compare(arrays[c.static]["ndcg@10"], arrays[c.name]["ndcg@10"], seed)}
            for k in ("recall@10", "mrr"):
                pair[k] = _compare(arrays[c.static][k], arrays[c.name][k], seed)
            if learning == "prequential":
                mask = np.array(second_half, dtype=bool)
                pair["second_half"] = _compare(arrays[c.static]["ndcg@10"][mask], arrays[c.name]["ndcg@10"][mask], seed)
            pairs[c.name] = pair
    out["pairs"] = pairs
    return out


def _embedder_info(emb) -> dict:
    info = {"model_id": getattr(emb, "model_id", None)}
    if hasattr(emb, "hits"):
        info["cache"] = {"folder": str(emb.folder), "hits": emb.hits, "misses": emb.misses}
        info["note"] = (
            "vectors from the on-disk embedding cache where present (identical to the model's); "
            "index time then excludes most embedding work"
        )
    else:
        info["cache"] = None
    return info
