"""Cross-project search latency: ``--all`` over N projects vs one database holding the same entries.

    python -m lethe_bench.federation --projects 9 --per-project 5000 --out bench/results/federation-9x5k

Builds, under a temporary folder, N projects of ``--per-project`` synthetic turns each
(``bench/synthetic.py``, one corpus of N x per-project turns split at session boundaries,
each part indexed as its own project) and one project holding all of them (same sources,
so entries, context fields and FTS statistics match). Entries get seeded random unit
vectors (``bench.embedders.random_unit_vectors``) and seeded random int8 token vectors
(one per word + 2, at most 48, wordpiece ids drawn Zipf-like), so the late-interaction
judge has the work it has on real data; queries are embedded by the real model, once,
outside the timings (the same encoding for both sides).

Per query, interleaved, the first of the two alternating (the machine's load drifts alike for both sides):

* single: ``lethe_sql.pipeline.run(con, enc, settings, LateInteractionJudge(), learn=False)``
  on the one database, opened read-only: the search ``lethe search --read-only`` runs;
* federated: ``lethe_sql.federation.run`` over the N attached databases (one
  ``Federation`` kept open: warm), with the judge counting its batches;
* federated, cold attach: a fresh ``Federation`` (N ATTACHes and their schema checks)
  plus the search, every ``--attach-every`` queries.

Two settings: ``shallow`` (the judge scores the top k_shallow = 30 of the pool once:
one judge batch, the deep pass off via rerank_threshold = -inf) and ``default`` (the
late-interaction judge scores the whole first-stage pool, k_deep = 100, in one batch).

No ground truth: time only. Writes results.json and report.md to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TARGET_RATIO = 1.5


def split_by_session(items, n_parts: int, per_part: int):
    parts = [[] for _ in range(n_parts)]
    i = 0
    last_session = None
    for it in items:
        if len(parts[i]) >= per_part and it.session != last_session and i < n_parts - 1:
            i += 1
        parts[i].append(it)
        last_session = it.session
    return parts


def token_rows(ids: list[str], texts: list[str], seed: int):
    """Seeded random int8 token vectors per entry (a pure function of seed and id)."""
    import hashlib

    import pyarrow as pa

    rid, rpos, rtok, rv, rscale = [], [], [], [], []
    vocab = np.arange(1000, 30522)
    w = 1.0 / np.arange(1, len(vocab) + 1) ** 1.07
    cw = np.cumsum(w) / w.sum()
    for i, t in zip(ids, texts):
        s = int.from_bytes(hashlib.sha256(f"{seed}:{i}".encode()).digest()[:8], "little")
        rng = np.random.default_rng(s)
        n = min(len(t.split()) + 2, 48)
        u = rng.standard_normal((n, 384), dtype=np.float32)
        u /= np.linalg.norm(u, axis=1, keepdims=True)
        m = np.abs(u).max(axis=1, keepdims=True)
        rv.append(np.round(u / m * 127).astype(np.int8))
        rscale.append((m[:, 0] / 127).astype(np.float32))
        rtok.append(vocab[np.searchsorted(cw, rng.random(n))].astype(np.int32))
        rpos.append(np.arange(n, dtype=np.int16))
        rid.extend([i] * n)
    v = np.concatenate(rv)
    return pa.table({
        "id": pa.array(rid, pa.string()),
        "pos": pa.array(np.concatenate(rpos)),
        "token": pa.array(np.concatenate(rtok)),
        "v": pa.FixedSizeListArray.from_arrays(pa.array(v.reshape(-1)), 384),
        "scale": pa.array(np.concatenate(rscale)),
    })


def add_token_index(con, tbl) -> None:
    con.register("_bench_tv", tbl)
    con.execute("BEGIN TRANSACTION")
    con.execute("INSERT INTO token_vectors SELECT id, pos, token, CAST(v AS TINYINT[384]), scale FROM _bench_tv")
    con.execute("DELETE FROM token_df")
    con.execute("INSERT INTO token_df SELECT token, count(DISTINCT id) FROM token_vectors GROUP BY token")
    con.execute("COMMIT")
    con.unregister("_bench_tv")


def pct(ms: list[float]) -> dict:
    a = np.asarray(ms)
    return {"p50_ms": round(float(np.percentile(a, 50)), 1), "p95_ms": round(float(np.percentile(a, 95)), 1),
            "mean_ms": round(float(a.mean()), 1), "n": len(ms)}


def build(workdir: Path, n_projects: int, per_project: int, seed: int, log) -> tuple[list, Path, dict]:
    from lethe_sql import MemoryStore
    from lethe_sql.markdown import Document
    from lethe_sql.registry import Project
    from lethe_sql.settings import Settings
    from lethe_sql.udfs.models import resolve_embedder

    from . import synthetic
    from .embedders import RandomVectorEmbedder

    emb = RandomVectorEmbedder(lambda: None, resolve_embedder().model_id, seed=seed)
    items = list(synthetic.generate(n_projects * per_project, seed))
    parts = split_by_session(items, n_projects, per_project)
    settings = Settings().with_(dedup=False)  # random vectors: nothing to merge; keep both sides identical
    single_root = workdir / "all-in-one"
    projects = []
    info = {"sizes": [], "build_s": {}}
    t0 = time.perf_counter()
    # token_index=False: the stores get the bench's own seeded token index below (add_token_index)
    with MemoryStore(single_root, embedder=emb, settings=settings, token_index=False) as one:
        for k, part in enumerate(parts):
            docs = [Document(content=i.text, created_at=i.created_at, session_id=i.session) for i in part]
            root = workdir / f"proj{k}"
            with MemoryStore(root, embedder=emb, settings=settings, token_index=False) as store:
                store.put_documents(f"bench/part{k}", docs)
                ids, texts = map(list, zip(*store.con.execute("SELECT id, text FROM entries ORDER BY id").fetchall()))
                tbl = token_rows(ids, texts, seed)
                add_token_index(store.con, tbl)
            one.put_documents(f"bench/part{k}", docs)
            add_token_index(one.con, tbl)
            projects.append(Project(f"proj{k}", str(root), ""))
            info["sizes"].append(len(ids))
            log(f"  project {k}: {len(ids)} entries, {tbl.num_rows} token vectors ({time.perf_counter() - t0:.0f} s)")
        info["entries_total"] = one.con.execute("SELECT count(*) FROM entries").fetchone()[0]
        info["token_vectors_total"] = one.con.execute("SELECT count(*) FROM token_vectors").fetchone()[0]
    info["build_s"] = round(time.perf_counter() - t0, 1)
    info["db_mib"] = {
        "single": round((single_root / ".lethe/index/lethe.duckdb").stat().st_size / 2**20, 1),
        "projects_sum": round(sum(p.db_path.stat().st_size for p in projects) / 2**20, 1),
    }
    return projects, single_root, info


def measure(projects, single_root: Path, n_queries: int, warmup: int, attach_every: int, seed: int, log) -> dict:
    from lethe_sql import MemoryStore, federation
    from lethe_sql.judges import LateInteractionJudge, encode_query
    from lethe_sql.pipeline import run as run_one
    from lethe_sql.settings import Settings
    from lethe_sql.udfs.embed import Embedder

    from . import synthetic

    real = Embedder()
    qs = synthetic.queries(n_queries + warmup, seed)
    t0 = time.perf_counter()
    encs = [encode_query(real, q) for q in qs]
    enc_ms = (time.perf_counter() - t0) * 1000 / len(qs)
    configs = {
        "shallow": Settings().with_(rerank_threshold=float("-inf")),
        "default": Settings(),
    }
    out: dict = {"query_encoding_ms_mean": round(enc_ms, 1), "configs": {}}
    one = MemoryStore(single_root, read_only=True, embedder=real)
    t0 = time.perf_counter()
    fed = federation.Federation(projects, model_id=real.model_id)
    out["attach_ms_first"] = round((time.perf_counter() - t0) * 1000, 1)
    assert not fed.skipped, fed.warnings
    try:
        for name, s in configs.items():
            lat = {"single": [], "federated": [], "federated_cold_attach": []}
            batches, deep_single, deep_fed, same_top = [], 0, 0, 0
            stages = {"single_first_stage": [], "federated_first_stage": [], "single_judge": [], "federated_judge": []}
            for n, enc in enumerate(encs):
                judge = federation.pick_judge(fed, "late-interaction")  # fresh batch counter
                # alternate which side runs first, so neither always follows the other
                for side in (("single", "federated") if n % 2 == 0 else ("federated", "single")):
                    t0 = time.perf_counter()
                    if side == "single":
                        a = run_one(one.con, enc, s, LateInteractionJudge(), learn=False)
                    else:
                        b = federation.run(fed, enc, s, judge)
                    dt = (time.perf_counter() - t0) * 1000
                    if n >= warmup:
                        lat[side].append(dt)
                if n < warmup:
                    continue
                stages["single_first_stage"].append(a.timings_ms["first_stage"])
                stages["federated_first_stage"].append(b.timings_ms["first_stage"])
                stages["single_judge"].append(a.timings_ms.get("judge", 0.0))
                stages["federated_judge"].append(b.timings_ms.get("judge", 0.0))
                batches.append(judge.batches)
                deep_single += a.deep
                deep_fed += b.deep
                same_top += [c.id for c in a.results] == [c.id for c in b.results]
                if attach_every and (n - warmup) % attach_every == 0:
                    t3 = time.perf_counter()
                    with federation.Federation(projects, model_id=real.model_id) as f2:
                        federation.run(f2, enc, s, federation.pick_judge(f2, "late-interaction"))
                    lat["federated_cold_attach"].append((time.perf_counter() - t3) * 1000)
            res = {k: pct(v) for k, v in lat.items() if v}
            res["stages"] = {k: pct(v) for k, v in stages.items()}
            res["ratio_p50"] = round(res["federated"]["p50_ms"] / res["single"]["p50_ms"], 3)
            res["judge_batches_per_search"] = sorted(set(batches))
            res["deep_pass_searches"] = {"single": deep_single, "federated": deep_fed, "of": len(batches)}
            res["same_top_k_as_single"] = f"{same_top}/{len(batches)}"
            out["configs"][name] = res
            log(f"  {name}: single p50 {res['single']['p50_ms']} ms, federated p50 {res['federated']['p50_ms']} ms, "
                f"ratio {res['ratio_p50']}, judge batches {res['judge_batches_per_search']}, same top-k {res['same_top_k_as_single']}")
    finally:
        fed.close()
        one.close()
    return out


def report(r: dict) -> str:
    c = r["configs"]
    lines = [
        f"# Cross-project search: `--all` over {r['n_projects']} projects vs one database",
        "",
        f"- command: `{r['command']}`",
        f"- lethe-sql {r['version']} (git {r['git']}), seed {r['seed']}, started {r['started']}, {r['seconds']:.0f} s in all",
        f"- machine: {r['machine']}",
        f"- data: {r['n_projects']} projects of ~{r['per_project']:,} synthetic turns (bench/synthetic.py, split at session "
        f"boundaries: {', '.join(map(str, r['build']['sizes']))}), {r['build']['entries_total']:,} entries in all; "
        f"the single database holds the same {r['build']['entries_total']:,} entries from the same sources",
        f"- vectors: seeded random unit vectors; {r['build']['token_vectors_total']:,} seeded random int8 token vectors "
        "(late interaction has real work); queries embedded by the real model once, outside the timings "
        f"({r['measure']['query_encoding_ms_mean']} ms a query)",
        f"- {r['queries']} queries after {r['warmup']} warm-up queries, single and federated interleaved per query "
        "(which runs first alternates); "
        "no ground truth (time only)",
        f"- databases: single {r['build']['db_mib']['single']} MiB, the {r['n_projects']} projects "
        f"{r['build']['db_mib']['projects_sum']} MiB together",
        "",
        "## Warm search latency (ms)",
        "",
        "| settings | single p50 / p95 | `--all` p50 / p95 | ratio of p50s (target <= 1.5) | judge batches per federated search | deep passes (single / federated) | same top-10 as single |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, x in c.items():
        lines.append(
            f"| {name} | {x['single']['p50_ms']} / {x['single']['p95_ms']} | {x['federated']['p50_ms']} / "
            f"{x['federated']['p95_ms']} | **{x['ratio_p50']}** ({'met' if x['ratio_p50'] <= TARGET_RATIO else 'NOT met'}) | "
            f"{', '.join(map(str, x['judge_batches_per_search']))} | {x['deep_pass_searches']['single']} / "
            f"{x['deep_pass_searches']['federated']} of {x['deep_pass_searches']['of']} | {x['same_top_k_as_single']} |"
        )
    lines += ["", "Stages (p50 ms): first stage and judge, as `timings_ms` of each pipeline records them.", "",
              "| settings | single first stage | `--all` first stage | single judge | `--all` judge |", "|---|---|---|---|---|"]
    for name, x in c.items():
        st = x["stages"]
        lines.append(f"| {name} | {st['single_first_stage']['p50_ms']} | {st['federated_first_stage']['p50_ms']} | "
                     f"{st['single_judge']['p50_ms']} | {st['federated_judge']['p50_ms']} |")
    lines += ["", f"Opening: attaching the {r['n_projects']} databases READ_ONLY with their schema checks took "
              f"{r['measure']['attach_ms_first']} ms the first time; a fresh attach plus one search (what one "
              "`lethe search --all` process does after loading the model):"]
    for name, x in c.items():
        if "federated_cold_attach" in x:
            lines.append(f"- {name}: p50 {x['federated_cold_attach']['p50_ms']} ms (n = {x['federated_cold_attach']['n']})")
    lines += [
        "",
        "Settings: `shallow` judges the top k_shallow = 30 once (rerank_threshold = -inf: no deep pass), so a federated "
        "search makes exactly one judge batch over the merged pool; `default` judges the whole first-stage pool of "
        "k_deep = 100 in one batch (the late-interaction judge's threshold is +inf), on both sides. "
        "The single side is `pipeline.run(..., learn=False)` on a read-only connection (RIF on, no clusters yet: "
        "suppression is an empty join); the federated side applies no suppression.",
        "",
        "Both sides rank identically by construction (global BM25 statistics, union-wide z-scores: "
        "tests/test_federation.py checks equality on real data); the 'same top-10' column counts queries where the "
        "final ids agree here.",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lethe_bench.federation", description=__doc__.split("\n\n")[0])
    ap.add_argument("--projects", type=int, default=9)
    ap.add_argument("--per-project", type=int, default=5000)
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--attach-every", type=int, default=5, help="time a fresh attach + search every N queries (0: never)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)

    from lethe_sql import __version__

    from .meta import git_state, git_text, machine, now_iso

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    started, t_all = now_iso(), time.perf_counter()
    command = "python -m lethe_bench.federation " + " ".join(shlex.quote(x) for x in (argv if argv is not None else sys.argv[1:]))
    with tempfile.TemporaryDirectory(prefix="lethe-bench-fed-", dir=a.workdir) as tmp:
        log(f"building {a.projects} projects of {a.per_project} entries and one of {a.projects * a.per_project}")
        projects, single, info = build(Path(tmp), a.projects, a.per_project, a.seed, log)
        log(f"built in {info['build_s']} s; measuring")
        m = measure(projects, single, a.queries, a.warmup, a.attach_every, a.seed, log)
    g = git_state() or {}
    mc = machine()
    r = {
        "command": command, "version": __version__,
        "git": git_text(g) or "?",
        "seed": a.seed, "started": started, "seconds": round(time.perf_counter() - t_all, 1),
        "machine": ", ".join(f"{k} {v}" for k, v in mc.items()) if isinstance(mc, dict) else str(mc),
        "machine_info": mc,
        "n_projects": a.projects, "per_project": a.per_project, "queries": a.queries, "warmup": a.warmup,
        "build": info, "measure": m, "configs": m["configs"], "target_ratio": TARGET_RATIO,
    }
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "results.json").write_text(json.dumps(r, indent=2, default=str) + "\n")
    (a.out / "report.md").write_text(report(r))
    log(f"wrote {a.out / 'results.json'} and {a.out / 'report.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
