"""``lethe bench``: the command (registered on the ``lethe`` app by ``lethe_sql/cli/bench.py`` when this
harness is installed).

Heavy imports happen inside the command, so ``lethe --help`` stays fast.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import List, Optional

import typer

from lethe_sql.cli.common import JsonOut, report_error

DATASETS = ("locomo", "longmemeval", "nfcorpus", "beir", "synthetic", "updates", "soak", "facts")
DEFAULT_CONFIGS = ("bm25", "dense", "hybrid")
LEARNING_PROTOCOLS = ("prequential", "split")
DEFAULT_PROTOCOL = {"locomo": "turn-global", "longmemeval": "turn-global", "nfcorpus": "beir", "beir": "beir",
                    "synthetic": "latency"}


def _canonical_command(dataset, path, configs, opts: dict) -> str:
    parts = ["lethe", "bench", dataset, str(path)]
    for c in configs:
        parts += ["--config", c]
    for flag, value in opts.items():
        if value is None or value is False:
            continue
        parts += [flag] if value is True else [flag, str(value)]
    return shlex.join(parts)


def _load(dataset: str, path: Path, protocol: str, limit_conversations, limit_questions, subset=None, split_seed=0):
    if subset is not None and dataset != "locomo":
        raise ValueError("--subset splits LoCoMo conversations; it applies to locomo only")
    if dataset == "locomo":
        from .locomo import load

        return load(path, protocol, limit_conversations=limit_conversations, subset=subset, split_seed=split_seed)
    if dataset == "longmemeval":
        from .longmemeval import load

        return load(path, protocol, limit_questions=limit_questions)
    from .beir import load

    return load(path, protocol, name="nfcorpus" if dataset == "nfcorpus" else None)


def _summary(r: dict) -> str:
    lines = [f"{r['dataset']} / {r['protocol']}: {r['n_queries']} queries, baseline {r.get('baseline')}"]
    if r["protocol"] == "latency":
        for size, s in r["sizes"].items():
            lines.append(
                f"  {int(size):>8,} entries: ingest {s['index_seconds']} s ({s['index_items_per_s']} items/s"
                + (f", bare model {s['model_items_per_s']} items/s, ratio {s['throughput_ratio']}" if s.get("throughput_ratio") else "")
                + f"), store.add median {s['add_one']['median_ms']} ms"
                + (f", cold add {s['cold_add']['median_ms']:.0f} ms, cold search {s['cold_search']['median_ms']:.0f} ms" if s.get("cold_add") else "")
            )
            for c, v in s["search"].items():
                lines.append(f"      {c:<8} p50 {v['p50_ms']} ms  p95 {v['p95_ms']} ms")
            lr = s.get("learning")
            if lr:
                lines.append(
                    f"      {lr['judge']} judge: off p50 {lr['judge_off']['p50_ms']} ms, on p50 {lr['judge_on']['p50_ms']} ms, "
                    f"on + learning p50 {lr['judge_on_learning']['p50_ms']} ms; learning update p50 "
                    f"{lr['learn_update']['p50_ms']} ms p95 {lr['learn_update']['p95_ms']} ms; refit {lr['refit']['ms']} ms")
        lines.extend(f"  target: {t}" for t in r.get("targets", []))
        return "\n".join(lines)
    for name, c in r["configs"].items():
        ci = c["ci95"]["ndcg@10"]
        extra = f"  recall_any@5 {c['recall_any@5']:.3f}" if "recall_any@5" in c else ""
        lines.append(
            f"  {name:<10} NDCG@10 {c['ndcg@10']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]  R@10 {c['recall@10']:.3f}  "
            f"R@30 {c['recall@30']:.3f}  MRR {c['mrr']:.3f}{extra}  p50 {c['p50_ms']} ms  p95 {c['p95_ms']} ms"
        )
    for name, v in r["vs_baseline"].items():
        lines.append(f"  {name} vs {r['baseline']}: dNDCG@10 {v['delta']:+.3f} [{v['ci95'][0]:+.3f}, {v['ci95'][1]:+.3f}] p={v['p']:.4f}")
    for name, p in (r.get("pool_recall") or {}).items():
        lines.append(f"  pool recall {name:<8} " + "  ".join(f"@{d} {x:.3f}" for d, x in p.items()))
    if r.get("bm25_check"):
        b = r["bm25_check"]
        lines.append(f"  independent BM25 NDCG@10 {b['independent_ndcg@10']:.4f} vs SQL {b['sql_ndcg@10']:.4f}")
    lines.extend(_learning_summary(r.get("learning")))
    return "\n".join(lines)


def _learning_summary(lr: dict | None) -> list[str]:
    if not lr:
        return []
    out = [f"  learning protocol: {lr['protocol']}"]
    if lr.get("split"):
        sp = lr["split"]
        out.append(f"  split: learned from {sp['draws']} draws over {sp['train_queries']} training questions "
                   f"({sp['hot_queries']} hot, {sp['hot_draw_share']} of draws), scored {sp['test_queries']} held out")
    for name, p in (lr.get("pairs") or {}).items():
        o = p["overall"]
        out.append(f"  {name} vs {p['against']}: dNDCG@10 {o['delta']:+.4f} [{o['ci95'][0]:+.4f}, {o['ci95'][1]:+.4f}] "
                   f"p={o['p']:.4f} (n={o['n']})")
        if p.get("second_half"):
            h = p["second_half"]
            out.append(f"    second half of the stream: {h['delta']:+.4f} [{h['ci95'][0]:+.4f}, {h['ci95'][1]:+.4f}] "
                       f"p={h['p']:.4f} (n={h['n']})")
    for name, c in (lr.get("configs") or {}).items():
        u, t = c["learn_update_ms"], c["search_with_learning_ms"]
        out.append(f"  {name}: learning update p50 {u['p50_ms']} ms p95 {u['p95_ms']} ms; search with learning "
                   f"p50 {t['p50_ms']} ms p95 {t['p95_ms']} ms ({c['learning_searches']} learning searches)")
    return out


def bench_command(
    dataset: str = typer.Argument(..., help="locomo, longmemeval, nfcorpus (or beir), synthetic, updates, soak, facts or lethe-memory."),
    path: str = typer.Argument(
        ..., help="The data file or folder (never copied). For synthetic: corpus sizes, e.g. 10k,50k,200k. "
        "For soak: how long the loops run, e.g. 30s, 5m."
    ),
    config: Optional[List[str]] = typer.Option(
        None, "--config", "-c", help="A config to run (repeat): bm25, dense, hybrid, fused, hybrid+li, hybrid+rerank, default "
        "(what `lethe search` does, learning off); learning configs hybrid+li+rif, hybrid+rerank+rif, default+rif "
        "(need --protocol prequential or split). Default: bm25, dense, hybrid."
    ),
    queries: Optional[int] = typer.Option(None, "--queries", min=1, help="Score a seeded sample of N queries."),
    seed: int = typer.Option(0, "--seed", help="Seed for sampling, bootstrap and permutations."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write results.json, report.md and chart.png here."),
    json_out: JsonOut = False,
    protocol: Optional[str] = typer.Option(
        None, "--protocol", help="How queries are scored. A corpus construction, each query scored alone "
        "(nothing learns): turn-global (default) or session-local for locomo/longmemeval, beir for BEIR. "
        "Or a learning protocol over the data set's default corpus (or --corpus): prequential (one seeded stream, "
        "each query scored before its own learning update; reported overall and on the second half) or split "
        "(learn on a seeded half of the questions, 70% of draws from a hot 20% of it, freeze, score the other half)."
    ),
    corpus: Optional[str] = typer.Option(
        None, "--corpus", help="Corpus construction under a learning protocol: turn-global, session-local or beir "
        "(default: the data set's default)."
    ),
    train_draws: Optional[int] = typer.Option(
        None, "--train-draws", min=0, help="split: learning searches over the training half (default: twice its size)."
    ),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Config the others are compared with (default hybrid)."),
    pool_diagnostic: bool = typer.Option(
        True, "--pool-diagnostic/--no-pool-diagnostic", help="Candidate-pool recall at 30/100/500."
    ),
    latency_queries: int = typer.Option(100, "--latency-queries", min=1, help="Queries timed per config (warm)."),
    cold: bool = typer.Option(True, "--cold/--no-cold", help="Time one cold `lethe search` process (and `lethe add` for synthetic)."),
    cache: bool = typer.Option(True, "--cache/--no-cache", help="Reuse embeddings from the on-disk bench cache."),
    bm25_check: bool = typer.Option(True, "--bm25-check/--no-bm25-check", help="Compare with an independent BM25."),
    limit_conversations: Optional[int] = typer.Option(None, "--limit-conversations", min=1, help="LoCoMo: first N conversations only."),
    limit_questions: Optional[int] = typer.Option(None, "--limit-questions", min=1, help="LongMemEval: first N questions only."),
    subset: Optional[str] = typer.Option(
        None, "--subset", help="LoCoMo: score only the questions of the tune or report half of the conversations "
        "(seeded split, --split-seed); every conversation is still indexed."
    ),
    split_seed: int = typer.Option(0, "--split-seed", help="Seed of the --subset conversation split."),
    vectors: str = typer.Option("real", "--vectors", help="synthetic: real (MiniLM) or random (seeded unit vectors, latency only)."),
    model_throughput: bool = typer.Option(
        False, "--model-throughput", help="synthetic: also time the bare model on the same texts (use with --no-cache)."
    ),
    workdir: Optional[Path] = typer.Option(None, "--workdir", help="Where the temporary databases go (default: system temp)."),
    projects: Optional[str] = typer.Option(None, "--projects", help="updates: only these projects (comma-separated ids)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines on stderr."),
    adders: int = typer.Option(3, "--adders", min=0, help="soak: concurrent `lethe add` loops."),
    searchers: int = typer.Option(2, "--searchers", min=0, help="soak: concurrent `lethe search --json` loops."),
    indexers: int = typer.Option(1, "--indexers", min=0, help="soak: concurrent `lethe index` loops."),
    hooks: int = typer.Option(1, "--hooks", min=0, help="soak: concurrent Claude Code Stop hook loops (`lethe hook stop`)."),
    size: int = typer.Option(200, "--size", min=1, help="soak: memories in the starting set."),
    lethe: Optional[str] = typer.Option(None, "--lethe", help="soak: the `lethe` executable to test (default: the one beside this Python)."),
    op_timeout: float = typer.Option(120.0, "--op-timeout", min=1, help="soak: seconds before a hung `lethe` process is killed (counted as failed)."),
    keep: bool = typer.Option(False, "--keep", help="soak: keep the temporary project (its path is in the report)."),
    conversations: Optional[str] = typer.Option(
        None, "--conversations", help="lethe-memory: the LoCoMo conversations indexed: the first N, or ids "
        "conv-26,conv-30 (default: the first 4)."
    ),
) -> None:
    """Benchmark retrieval quality and latency on a data set, through the user code path.

    `updates PATH` scores memory that stays true on dated update chains (bench/updates.py):
    cur@1, cur_first, stale@1, past@5, static@5, configs default and default-norevisions
    (and hybrid, bm25); --projects p01,p02 picks projects.

    `soak DURATION` runs concurrent loops of whole `lethe` processes (add, search, index, the
    Stop hook) on a fresh temporary project, then checks that nothing was lost or duplicated
    (bench/soak.py); --adders/--searchers/--indexers/--hooks/--size/--lethe/--keep.

    `facts N` indexes one file of N sections `fact number N about service sK.` and checks
    that each stays a memory and is found by its number (bench/facts.py); --queries S probes
    a seeded sample of S facts (default: every one).

    `lethe-memory PATH` runs lethe-sql and lethe-memory 0.6.0 side by side in process on LoCoMo
    turns (lethe_bench/lethe_memory.py): warm latency interleaved per query and NDCG@10 on both;
    needs `pip install --no-deps lethe-memory==0.6.0 faiss-cpu rank-bm25`."""
    from lethe_sql.errors import LetheError, UsageError

    if dataset.lower() == "updates":
        return _updates(path, config, projects, seed, out, json_out, workdir, quiet)
    if dataset.lower() == "facts":
        return _facts(path, queries, seed, out, json_out, workdir, quiet)
    if dataset.lower() == "lethe-memory":
        return _lethe_memory(path, conversations, queries, seed, out, json_out, workdir, quiet)
    if dataset.lower() == "soak":
        return _soak(path, adders, searchers, indexers, hooks, size, seed, lethe, out, json_out, workdir, keep,
                     op_timeout, quiet)
    try:
        result, per_query = _run(**locals())
    except LetheError as exc:
        report_error(str(exc), exc.kind)
        raise typer.Exit(exc.exit_code) from None
    except (ValueError, FileNotFoundError, KeyError) as exc:
        report_error(str(UsageError(str(exc))), "usage")
        raise typer.Exit(2) from None
    if out is not None:
        from .report import write

        paths = write(result, out, per_query)
        if not json_out:
            typer.echo("wrote " + ", ".join(str(p) for p in paths.values()))
    if json_out:
        typer.echo(json.dumps(result, indent=2, ensure_ascii=False, default=str))
    else:
        typer.echo(_summary(result))


def _updates(path, config, projects, seed, out, json_out, workdir, quiet) -> None:
    from lethe_sql.errors import LetheError

    from . import updates

    names = list(config or ("default", "default-norevisions"))
    picked = [p.strip() for p in projects.split(",") if p.strip()] if projects else None
    command = _canonical_command("updates", path, names, {"--projects": projects, "--seed": seed or None,
                                                          "--out": out, "--json": json_out})
    log = (lambda m: None) if quiet else (lambda m: typer.echo(m, err=True))
    try:
        result, per_query = updates.run(Path(path), names, projects=picked, seed=seed, workdir=workdir, log=log)
    except LetheError as exc:
        report_error(str(exc), exc.kind)
        raise typer.Exit(exc.exit_code) from None
    _emit(result, command, updates.markdown, out, json_out, per_query)


def _emit(result: dict, command: str, markdown, out, json_out: bool, per_query: dict | None = None) -> None:
    """Write a run's ``results.json``, ``report.md`` (and ``per_query.json``) under ``out``,
    then print the result as JSON or as its markdown report."""
    result["command"] = command
    report = markdown(result, command)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
        if per_query is not None:
            (out / "per_query.json").write_text(json.dumps(per_query, separators=(",", ":")) + "\n")
        (out / "report.md").write_text(report)
    typer.echo(json.dumps(result, indent=2, default=str) if json_out else report)


def _facts(path, queries, seed, out, json_out, workdir, quiet) -> None:
    from lethe_sql.errors import LetheError

    from . import facts

    from .synthetic import parse_sizes

    try:
        sizes = parse_sizes(path)
    except ValueError as exc:
        report_error(f"facts takes a number of sections (e.g. 10000 or 10k): {exc}", "usage")
        raise typer.Exit(2) from None
    if len(sizes) != 1:
        report_error(f"facts takes one number of sections, not {path!r}", "usage")
        raise typer.Exit(2)
    n = sizes[0]
    command = _canonical_command("facts", path, [], {"--queries": queries, "--seed": seed or None,
                                                    "--out": out, "--json": json_out})
    log = (lambda m: None) if quiet else (lambda m: typer.echo(m, err=True))
    try:
        result = facts.run(n, sample=queries or 0, seed=seed, workdir=workdir, log=log)
    except LetheError as exc:
        report_error(str(exc), exc.kind)
        raise typer.Exit(exc.exit_code) from None
    _emit(result, command, facts.markdown, out, json_out)


def _lethe_memory(path, conversations, queries, seed, out, json_out, workdir, quiet) -> None:
    from .lethe_memory import cli_main

    command = _canonical_command("lethe-memory", path, [], {"--conversations": conversations, "--queries": queries,
                                                           "--seed": seed or None, "--out": out, "--json": json_out})
    code = cli_main(path, conversations=conversations, queries=queries, seed=seed, out=out, json_out=json_out,
                    workdir=workdir, quiet=quiet, command=command)
    if code:
        raise typer.Exit(code)


def _soak(duration, adders, searchers, indexers, hooks, size, seed, lethe, out, json_out, workdir, keep,
          op_timeout, quiet) -> None:
    from lethe_sql.errors import LetheError

    from .soak import cli_main

    try:
        code = cli_main(duration, adders=adders, searchers=searchers, indexers=indexers, hooks=hooks, size=size,
                        seed=seed, lethe=lethe, out=out, json_out=json_out, workdir=workdir, keep=keep,
                        op_timeout=op_timeout, quiet=quiet)
    except LetheError as exc:
        report_error(str(exc), exc.kind)
        raise typer.Exit(exc.exit_code) from None
    if code:
        raise typer.Exit(code)


def _run(**kw):
    from lethe_sql.errors import UsageError

    from .configs import resolve
    from .meta import Log
    from .runner import Options

    dataset = kw["dataset"].lower()
    if dataset not in DATASETS:
        raise UsageError(f"unknown data set {kw['dataset']!r}; choose one of {', '.join(DATASETS)}")
    names = list(kw["config"] or DEFAULT_CONFIGS)
    configs = resolve(names)
    protocol = kw["protocol"] or DEFAULT_PROTOCOL[dataset]
    learning = None
    if protocol in LEARNING_PROTOCOLS:
        if dataset == "synthetic":
            raise UsageError("the synthetic corpus has only the latency protocol")
        learning, protocol = protocol, kw["corpus"] or DEFAULT_PROTOCOL[dataset]
    elif kw["corpus"] is not None:
        raise UsageError(f"--corpus goes with --protocol prequential or split; --protocol {protocol} is a corpus already")
    if kw["train_draws"] is not None and learning != "split":
        raise UsageError("--train-draws goes with --protocol split")
    from .configs import learns

    if learning is None and any(learns(c) for c in configs):
        raise UsageError(f"{', '.join(c.name for c in configs if learns(c))} learn(s) from every search: run with "
                         "--protocol prequential or --protocol split")
    if kw["vectors"] not in ("real", "random"):
        raise UsageError("--vectors is real or random")
    command = _canonical_command(
        dataset, kw["path"], names,
        {"--protocol": kw["protocol"], "--corpus": kw["corpus"], "--train-draws": kw["train_draws"],
         "--queries": kw["queries"], "--seed": kw["seed"], "--baseline": kw["baseline"],
         "--no-pool-diagnostic": not kw["pool_diagnostic"], "--latency-queries": kw["latency_queries"],
         "--no-cold": not kw["cold"], "--no-cache": not kw["cache"], "--no-bm25-check": not kw["bm25_check"],
         "--limit-conversations": kw["limit_conversations"], "--limit-questions": kw["limit_questions"],
         "--subset": kw["subset"], "--split-seed": kw["split_seed"] if kw["subset"] else None,
         "--vectors": kw["vectors"] if dataset == "synthetic" else None,
         "--model-throughput": kw["model_throughput"], "--json": kw["json_out"],
         "--out": kw["out"]},
    )
    opts = Options(
        configs=configs,
        baseline=kw["baseline"],
        n_queries=kw["queries"],
        seed=kw["seed"],
        pool_diagnostic=kw["pool_diagnostic"],
        latency_queries=kw["latency_queries"],
        cold=kw["cold"],
        cache=kw["cache"],
        bm25_check=kw["bm25_check"],
        workdir=kw["workdir"],
        command=command,
        log=Log(not kw["quiet"]),
        learning=learning,
        train_draws=kw["train_draws"],
    )
    if dataset == "synthetic":
        if protocol != "latency":
            raise UsageError("the synthetic corpus has only the latency protocol")
        from . import perf

        result = perf.run(kw["path"], opts, vectors=kw["vectors"], model_throughput=kw["model_throughput"],
                          n_cold=3 if kw["cold"] else 0)
        return result, None
    path = Path(kw["path"]).expanduser()
    if not path.exists():
        raise UsageError(f"no such data file or folder: {path}")
    from .runner import run

    opts.log(f"loading {dataset} ({protocol}{', ' + learning if learning else ''}) from {path}")
    bench = _load(dataset, path, protocol, kw["limit_conversations"], kw["limit_questions"], kw["subset"],
                  kw["split_seed"])
    if kw["baseline"] and kw["baseline"] not in [c.name for c in configs]:
        raise UsageError(f"--baseline {kw['baseline']!r} is not among the configs run ({', '.join(c.name for c in configs)})")
    result = run(bench, opts)
    per_query = result.pop("per_query", None)
    return result, per_query


if __name__ == "__main__":  # pragma: no cover
    typer.run(bench_command)
