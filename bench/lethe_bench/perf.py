"""Latency and index-time figures on the synthetic corpus (``lethe bench synthetic 10k,200k``).

Per corpus size, in a fresh project under a temporary folder:

* ingest: ``MemoryStore.put_documents`` of all turns, end to end (embedding, staging,
  insert, FTS maintenance); items/s. With ``--model-throughput`` the bare model then
  encodes the same texts (``Embedder.encode``) so the two rates can be compared
  (meaningful only with real vectors and no cache: ``--vectors real --no-cache``);
* warm search: ``MemoryStore.search(top_k=10)`` per config, real query embedding,
  configs interleaved per query, after warm-up queries; p50/p95;
* add one memory: ``MemoryStore.add`` (append to today's markdown file, incremental
  index), several times, median; then, with the store closed, cold ``lethe add`` and
  ``lethe search`` processes (interpreter start, imports, model load, open, work);
* database size on disk and peak RSS.

``--vectors random`` stores seeded random unit vectors instead of embedding the corpus
(latency-only; the report says so). Queries and added memories are always embedded by
the real model, so their cost is real.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from pathlib import Path

from lethe_sql.markdown import Document

from . import synthetic
from .meta import Log, git_state, machine, now_iso, package_version, peak_rss_mib
from .runner import Options, _percentiles, cold_process

LEARN_TARGETS_MS = {10_000: 10, 200_000: 50}  # issue 4: what the learning update may add to a search
TARGETS = {
    "throughput_ratio": 0.8,
    "add_one_ms_200k": 1000,
    "p50_ms_10k": 30,
    "p50_ms_200k": 250,
}


def _embedder(vectors: str, cache: bool, cache_dir, seed: int):
    from lethe_sql.udfs.embed import Embedder
    from lethe_sql.udfs.models import resolve_embedder

    from .embedders import CachedEmbedder, RandomVectorEmbedder

    if vectors == "random":
        model: list = []

        def factory():
            if not model:
                model.append(Embedder())
            return model[0]

        return RandomVectorEmbedder(factory, resolve_embedder().model_id, seed=seed)
    real = Embedder()
    return CachedEmbedder(real, cache_dir) if cache else real


#: Random vectors come with random token vectors (``RandomVectorEmbedder.encode_full``),
#: held as float32 until stored: 200,000 entries at once would need about 12 GiB. They are
#: written as sources of about this many entries, cut between sessions.
RANDOM_SOURCE_ENTRIES = 20_000


def _sources(docs: list, items: list, vectors: str):
    """(source, documents) to ingest: one source, or for random vectors slices of about
    ``RANDOM_SOURCE_ENTRIES`` that never split a session."""
    if vectors != "random" or len(docs) <= RANDOM_SOURCE_ENTRIES:
        yield "bench/synthetic", docs
        return
    start, n = 0, 0
    for i in range(1, len(docs) + 1):
        if i == len(docs) or (i - start >= RANDOM_SOURCE_ENTRIES and items[i].session != items[i - 1].session):
            yield f"bench/synthetic/{n:03d}", docs[start:i]
            start, n = i, n + 1


def run_size(size: int, opts: Options, vectors: str, model_throughput: bool, n_adds: int, n_cold: int) -> dict:
    from lethe_sql import MemoryStore

    log = opts.log
    configs = opts.configs
    out: dict = {"entries": size}
    items = list(synthetic.generate(size, opts.seed))
    docs = [Document(content=i.text, created_at=i.created_at, session_id=i.session) for i in items]
    qs = synthetic.queries(opts.latency_queries + opts.warmup, opts.seed)
    emb = _embedder(vectors, opts.cache, opts.cache_dir, opts.seed)
    with tempfile.TemporaryDirectory(prefix="lethe-bench-scale-", dir=opts.workdir) as tmp:
        root = Path(tmp) / "project"
        store = MemoryStore(root, embedder=emb)
        try:
            store.con  # open and migrate before the clock starts
            if vectors != "random":
                emb.encode(["warm up the model"])
            texts = [d.content.strip() for d in docs]
            bare_rates = []
            measure_bare = model_throughput and vectors != "random" and not hasattr(emb, "hits")
            if measure_bare:  # before and after the ingest, so load drifts hit both sides alike
                log(f"{size:,}: bare model on the same texts (before)")
                t0 = time.perf_counter()
                emb.encode(texts)
                bare_rates.append(size / (time.perf_counter() - t0))
            log(f"{size:,}: ingesting through put_documents ({vectors} vectors)")
            t0 = time.perf_counter()
            for source, part in _sources(docs, items, vectors):
                store.put_documents(source, part)
            dt = time.perf_counter() - t0
            out["index_seconds"] = round(dt, 2)
            out["index_items_per_s"] = round(size / dt, 1)
            if hasattr(emb, "flush"):
                emb.flush()
            if hasattr(emb, "hits"):
                out["embedding_cache"] = {"hits": emb.hits, "misses": emb.misses}
            log(f"{size:,}: ingested in {dt:.1f} s ({size / dt:.0f} items/s)")
            if model_throughput and not measure_bare:
                out["model_items_per_s"] = None
                out["model_throughput_note"] = "skipped: needs --vectors real --no-cache to compare"
            elif measure_bare:
                log(f"{size:,}: bare model on the same texts (after)")
                t0 = time.perf_counter()
                emb.encode(texts)
                bare_rates.append(size / (time.perf_counter() - t0))
                bare = sum(bare_rates) / len(bare_rates)
                out["model_items_per_s"] = round(bare, 1)
                out["model_items_per_s_runs"] = [round(x, 1) for x in bare_rates]
                out["throughput_ratio"] = round((size / dt) / bare, 3)
                out["model_throughput_note"] = (
                    "bare = Embedder.encode on the same texts (sentence vectors only), timed before and after "
                    "the ingest, mean of the two; the ingest also computes token vectors (encode_full) for "
                    "the token index, quantizes and stores them, merges near-duplicates and updates FTS"
                )
            if hasattr(emb, "use_model"):
                emb.use_model()
            cm = emb.bypass() if hasattr(emb, "bypass") else None
            lat: dict[str, list[float]] = {c.name: [] for c in configs}
            if cm:
                cm.__enter__()
            try:
                for q in qs[: opts.warmup]:
                    for c in configs:
                        c.search(store, q, 10, 30)
                for q in qs[opts.warmup :]:
                    for c in configs:
                        t0 = time.perf_counter()
                        c.search(store, q, 10, 30)
                        lat[c.name].append((time.perf_counter() - t0) * 1000)
                rng = random.Random(opts.seed + size)
                adds = []
                for i in range(n_adds):
                    text = f"Benchmark memory {i} of run {rng.randrange(10**9)}: the staging port moved to {5400 + i}."
                    t0 = time.perf_counter()
                    store.add(text)
                    adds.append((time.perf_counter() - t0) * 1000)
            finally:
                if cm:
                    cm.__exit__(None, None, None)
            out["search"] = {c: _percentiles(v) | {"n": len(v)} for c, v in lat.items()}
            log(f"{size:,}: judge off / judge on / judge on + learning, interleaved")
            out["learning"] = learning_latency(store, emb, qs, opts.warmup)
            lr = out["learning"]
            log(f"{size:,}: learning update p50 {lr['learn_update']['p50_ms']} ms p95 {lr['learn_update']['p95_ms']} ms "
                f"({lr['judge']} judge); refit {lr['refit']['ms']} ms at {lr['refit']['logged_queries']} logged queries")
            out["add_one"] = {"ms": [round(a, 1) for a in adds], "median_ms": round(statistics.median(adds), 1)}
            log(f"{size:,}: warm p50 " + ", ".join(f"{c} {out['search'][c]['p50_ms']} ms" for c in lat)
                + f"; store.add median {out['add_one']['median_ms']} ms")
        finally:
            store.close()
        out["peak_rss_mib"] = peak_rss_mib()
        db = store.db_path
        out["db_mib"] = round(Path(db).stat().st_size / 2**20, 1) if Path(db).exists() else None
        if n_cold:
            log(f"{size:,}: cold `lethe add` / `lethe search` processes x{n_cold}")
            adds, searches = [], []
            for i in range(n_cold):
                a = cold_process(["--root", str(root), "add", f"Cold process memory {i}: deploys run at {7 + i} am."])
                s = cold_process(["--root", str(root), "search", qs[-1 - i], "--json", "--read-only", "--top-k", "10"])
                adds.append(a)
                searches.append(s)
            out["cold_add"] = {"runs": adds, "median_ms": round(statistics.median(a["ms"] for a in adds), 1)}
            out["cold_search"] = {"runs": searches, "median_ms": round(statistics.median(s["ms"] for s in searches), 1),
                                  "mode": "hybrid"}
    return out


class ShuffleJudge:
    """A stand-in judge for stores without a token index (``--vectors random``): a
    pseudo-random score per (query, entry), from a hash, so about half of the pool's
    losers move down and the update has real work to do. It costs next to nothing, so a
    search with it times the first stage and the learning update; the update's work
    does not depend on the judge (it sees the pool's ranks and logits only)."""

    name = "bench-shuffle"
    default_threshold = float("-inf")  # never the deep pass

    def score(self, con, enc, ids):
        import hashlib

        return {i: int.from_bytes(hashlib.blake2b((enc.text + i).encode(), digest_size=4).digest(), "big") / 2**32 * 4 - 2
                for i in ids}

    def logits(self, scores):
        import numpy as np

        x = np.asarray(scores, dtype=np.float64)
        sd = float(x.std()) if len(x) > 1 else 0.0
        return (x - x.mean()) / sd if sd > 1e-9 else np.zeros_like(x)


def learning_latency(store, emb, queries: list[str], warmup: int) -> dict:
    """Per query, interleaved: the pipeline with the judge off, with the judge on and
    learning off, and with the judge on and learning on (``lethe_sql.pipeline.run``, the
    code ``MemoryStore.search`` runs; the query is encoded once, outside the timings).
    The learning update is ``Outcome.timings_ms['learn']``: one search's update applied at
    once (``learn.apply``), the refit check included. The k-means refit itself runs when the query log reaches
    10 x n_clusters queries and then grows by ``refit_growth``; it is timed once here,
    with the log padded to the first refit's size."""
    from lethe_sql.judges import LateInteractionJudge, encode_query
    from lethe_sql.learn import maybe_refit
    from lethe_sql.pipeline import run as pipeline_run

    import lethe_sql.pipeline as P

    con = store.con
    settings = store.settings.with_(rif=True, lifecycle=True)
    li = LateInteractionJudge()
    judge = li if li.available(con) else ShuffleJudge()
    off, on, on_learn, learn, learn_cpu = [], [], [], [], []
    deep = 0
    cpu = [0.0]
    real = P.apply_learning

    def cpu_timed(fn):  # process CPU time (all threads) of the update itself: less sensitive to other load
        def wrapper(*a, **k):
            c0 = time.process_time()
            try:
                return fn(*a, **k)
            finally:
                cpu[0] += (time.process_time() - c0) * 1000

        return wrapper

    P.apply_learning = cpu_timed(real)
    try:
        for i, q in enumerate(queries):
            enc = encode_query(emb, q)
            t0 = time.perf_counter()
            pipeline_run(con, enc, settings, None, learn=False)
            t_off = (time.perf_counter() - t0) * 1000
            t0 = time.perf_counter()
            pipeline_run(con, enc, settings, judge, learn=False)
            t_on = (time.perf_counter() - t0) * 1000
            cpu[0] = 0.0
            t0 = time.perf_counter()
            o = pipeline_run(con, enc, settings, judge, learn=True)
            t_learn = (time.perf_counter() - t0) * 1000
            if i < warmup:
                continue
            off.append(t_off)
            on.append(t_on)
            on_learn.append(t_learn)
            learn.append(o.timings_ms["learn"])
            learn_cpu.append(cpu[0])
            deep += int(o.deep)
    finally:
        P.apply_learning = real
    # One refit at the size of the first one (10 x n_clusters logged queries).
    n_log = con.execute("SELECT count(*) FROM query_log").fetchone()[0]
    need = 10 * settings.n_clusters - n_log
    if need > 0:
        con.execute(
            """INSERT INTO query_log (step, query, embedding, cluster, judge)
               SELECT 1000000 + r.range, q.query, q.embedding, q.cluster, q.judge
               FROM range(?) AS r
               JOIN (SELECT *, row_number() OVER (ORDER BY step) - 1 AS rn FROM query_log) AS q ON q.rn = r.range % ?""",
            [need, n_log],
        )
    con.execute("UPDATE meta SET value = '0' WHERE key = 'rif_fit_queries'")
    step = int(con.execute("SELECT value FROM meta WHERE key = 'search_step'").fetchone()[0])
    t0 = time.perf_counter()
    refitted = maybe_refit(con, settings, step)
    refit_ms = (time.perf_counter() - t0) * 1000
    return {
        "judge": judge.name,
        "judge_note": None if judge is li else "no token index (random vectors): a stand-in judge (bench.perf."
        "ShuffleJudge) orders the pool; the update's work does not depend on the judge",
        "n": len(learn),
        "deep_share": round(deep / len(learn), 3) if learn else None,
        "judge_off": _percentiles(off),
        "judge_on": _percentiles(on),
        "judge_on_learning": _percentiles(on_learn),
        "learn_update": _percentiles(learn),
        "learn_update_cpu": _percentiles(learn_cpu),
        "refit": {"ms": round(refit_ms, 1), "logged_queries": max(n_log, 10 * settings.n_clusters),
                  "refitted": bool(refitted)},
        "what": "pipeline.run per query, encoding excluded; learn_update = Outcome.timings_ms['learn'] (the update "
        "transaction and the refit check; no refit fell inside these searches); learn_update_cpu = process CPU time "
        "(all threads) spent in the update and the refit check, measured by wrapping them (less sensitive to other "
        "load on the machine than wall time)",
    }


def run(size_spec: str, opts: Options, *, vectors: str = "real", model_throughput: bool = False,
        n_adds: int = 5, n_cold: int = 3) -> dict:
    t_start = time.perf_counter()
    started = now_iso()
    sizes = synthetic.parse_sizes(size_spec)
    results = {}
    for size in sizes:
        results[str(size)] = run_size(size, opts, vectors, model_throughput, n_adds, n_cold)
    names = [c.name for c in opts.configs]
    configs = {}
    for c in names:
        by_size = {s: dict(r["search"][c]) for s, r in results.items()}
        last = by_size[str(sizes[-1])]
        configs[c] = {"p50_ms": last["p50_ms"], "p95_ms": last["p95_ms"], "by_size": by_size}
    result = {
        "dataset": "synthetic",
        "protocol": "latency",
        "n_queries": opts.latency_queries,
        "baseline": None,
        "configs": configs,
        "vs_baseline": {},
        "vectors": "real (MiniLM)" + (", embedding cache" if opts.cache else ", no cache")
        if vectors == "real" else "random unit vectors (seeded; latency-only), with one random token vector per wordpiece for the "
        f"late-interaction judge; ingested as sources of about {RANDOM_SOURCE_ENTRIES:,} entries",
        "sizes": results,
        "command": opts.command,
        "data": {"path": f"generated: bench/synthetic.py seed {opts.seed}", "sha256": {}},
        "package_version": package_version(),
        "git": git_state(),
        "machine": machine(),
        "seed": opts.seed,
        "started": started,
        "notes": [
            "no ground truth: latency and index-time figures only",
            f"warm search: {opts.latency_queries} queries per config after {opts.warmup} warm-up queries",
        ],
    }
    result["targets"] = _targets(result)
    result["seconds_total"] = round(time.perf_counter() - t_start, 1)
    return result


def _targets(r: dict) -> list[str]:
    out = []
    for size, s in r["sizes"].items():
        n = int(size)
        if s.get("throughput_ratio") is not None:
            ok = s["throughput_ratio"] >= TARGETS["throughput_ratio"]
            out.append(f"{n:,}: ingest end to end at {s['throughput_ratio']:.0%} of the bare model's rate "
                       f"(target >= 80%): {'met' if ok else 'NOT met'}")
        for c, v in s["search"].items():
            if c in ("bm25", "dense", "hybrid") and v.get("p50_ms") is not None:
                if n == 10_000:
                    lim = TARGETS["p50_ms_10k"]
                elif n == 200_000:
                    lim = TARGETS["p50_ms_200k"]
                else:
                    continue
                out.append(f"{n:,}: warm {c} p50 {v['p50_ms']} ms (target < {lim} ms): "
                           f"{'met' if v['p50_ms'] < lim else 'NOT met'}")
        lr = s.get("learning")
        if lr and n in LEARN_TARGETS_MS:
            lim = LEARN_TARGETS_MS[n]
            p50, p95 = lr["learn_update"]["p50_ms"], lr["learn_update"]["p95_ms"]
            out.append(f"{n:,}: learning update p50 {p50} ms, p95 {p95} ms (target < {lim} ms added to a search): "
                       f"{'met' if p50 is not None and p50 < lim else 'NOT met'} at p50, "
                       f"{'met' if p95 is not None and p95 < lim else 'not met'} at p95")
        if n == 200_000:
            a = s["add_one"]["median_ms"]
            out.append(f"200,000: MemoryStore.add median {a} ms (target < 1000 ms): {'met' if a < 1000 else 'NOT met'}")
            if s.get("cold_add"):
                c = s["cold_add"]["median_ms"]
                out.append(f"200,000: cold `lethe add` process median {c:.0f} ms (target < 1000 ms): "
                           f"{'met' if c < 1000 else 'NOT met'}")
    return out

