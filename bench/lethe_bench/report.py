"""Write a result: ``results.json``, ``report.md`` and ``chart.png`` (when matplotlib is there).

The chart has two panels: quality per config with 95% bootstrap CIs (NDCG@10,
Recall@10, MRR), and warm search latency (p50, with p95 as the upper whisker) per
corpus size. Latency-only results (synthetic corpora) draw the latency panel alone.
"""

from __future__ import annotations

import json
from pathlib import Path

QUALITY_PLOT = ("ndcg@10", "recall@10", "recall@30", "mrr", "recall_any@5")


def _f(x, nd: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def _ci(ci) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "-"


def write(result: dict, out: Path, per_query: dict | None = None) -> dict[str, Path]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "results.json", "markdown": out / "report.md"}
    paths["json"].write_text(json.dumps(result, indent=2, ensure_ascii=False, default=str) + "\n")
    if per_query:
        paths["per_query"] = out / "per_query.json"
        paths["per_query"].write_text(json.dumps(per_query, separators=(",", ":")) + "\n")
    chart = out / "chart.png"
    why = write_chart(result, chart)
    if why is None:
        paths["chart"] = chart
    paths["markdown"].write_text(markdown(result, chart_note=why))
    return paths


def markdown(r: dict, chart_note: str | None = None) -> str:
    from .meta import git_text

    L: list[str] = []
    latency_only = r.get("protocol") == "latency"
    corpus = f", {r['corpus']} corpus" if r.get("corpus") and r.get("corpus") != r.get("protocol") else ""
    L.append(f"# lethe bench: {r['dataset']} ({r['protocol']}{corpus})\n")
    env = " ".join(f"{k}={v}" for k, v in (r.get("environment") or {}).items())
    L.append(f"- command: `{(env + ' ') if env else ''}{r.get('command') or '?'}`")
    data = r.get("data") or {}
    if data.get("path"):
        L.append(f"- data: `{data['path']}`")
    for name, digest in (data.get("sha256") or {}).items():
        L.append(f"  - `{name}` sha256 `{digest}`")
    m = r.get("machine") or {}
    git = git_text(r.get("git"))
    code = f" ({git})" if git else ""
    L.append(f"- lethe-sql {r.get('package_version')}{code}, seed {r.get('seed')}, started {r.get('started')}, "
             f"{r.get('seconds_total')} s in all")
    L.append(f"- machine: {m.get('platform')}, {m.get('cpu_count')} CPU(s) ({m.get('processor')}), "
             f"{m.get('memory_gib')} GiB, Python {m.get('python')}, DuckDB {m.get('duckdb')}, "
             f"onnxruntime {m.get('onnxruntime')}; load average at the end {m.get('load_avg_1_5_15')}")
    if not latency_only:
        L.append(f"- queries scored: {r['n_queries']}; baseline: `{r.get('baseline')}`")
    for note in r.get("notes") or []:
        L.append(f"- {note}")
    L.append("")
    if latency_only:
        L.extend(_latency_only(r))
    else:
        L.extend(_quality(r))
    if chart_note:
        L.append(f"\n_Chart skipped: {chart_note}_\n")
    else:
        L.append("\n![quality and latency](chart.png)\n")
    return "\n".join(L) + "\n"


def _quality(r: dict) -> list[str]:
    L: list[str] = []
    cfgs = r["configs"]
    first = next(iter(cfgs.values()))
    keys = [k for k in ("ndcg@10", "recall@10", "recall@30", "mrr", "recall_any@5") if k in first]
    L.append("## Quality (mean over queries, 95% bootstrap CI)\n")
    L.append("| config | " + " | ".join(keys) + " | p50 ms | p95 ms |")
    L.append("|---|" + "---|" * (len(keys) + 2))
    for name, c in cfgs.items():
        cells = [f"{c[k]:.3f} {_ci(c.get('ci95', {}).get(k))}" for k in keys]
        L.append(f"| {name} | " + " | ".join(cells) + f" | {_f(c.get('p50_ms'), 1)} | {_f(c.get('p95_ms'), 1)} |")
    if r.get("vs_baseline"):
        L.append(f"\n## Against the baseline `{r['baseline']}` (paired; NDCG@10, Recall@10, MRR)\n")
        L.append("| config | ΔNDCG@10 [95% CI] | p | ΔRecall@10 [95% CI] | p | ΔMRR [95% CI] | p |")
        L.append("|---|---|---|---|---|---|---|")
        for name, v in r["vs_baseline"].items():
            rec, mrr = v.get("recall@10", {}), v.get("mrr", {})
            L.append(
                f"| {name} | {v['delta']:+.3f} {_ci(v['ci95'])} | {v['p']:.4f} | "
                f"{rec.get('delta', 0):+.3f} {_ci(rec.get('ci95'))} | {_f(rec.get('p'), 4)} | "
                f"{mrr.get('delta', 0):+.3f} {_ci(mrr.get('ci95'))} | {_f(mrr.get('p'), 4)} |"
            )
        st = r.get("statistics") or {}
        L.append(f"\n{st.get('bootstrap', '')}; {st.get('permutation', '')}.")
    if r.get("learning"):
        L.extend(_learning(r))
    if "top1_exact" in first:
        L.append("\n## What the first result is (turn-level)\n")
        L.append("| config | exact hit | sibling (right session, wrong turn) | wrong family (unrelated session) |")
        L.append("|---|---|---|---|")
        for name, c in cfgs.items():
            L.append(f"| {name} | {c['top1_exact']:.3f} | {c['top1_sibling']:.3f} | {c['top1_wrong_family']:.3f} |")
    if "per_category" in first:
        names = r.get("category_names") or {}
        L.append("\n## Per category (NDCG@10 / Recall@10" + (" / Recall_any@5" if "recall_any@5" in first else "") + ")\n")
        cats = list(first["per_category"])
        L.append("| category | n | " + " | ".join(cfgs) + " |")
        L.append("|---|---|" + "---|" * len(cfgs))
        for cat in cats:
            label = f"{cat} {names.get(cat, '')}".strip() if names.get(cat, cat) != cat else cat
            n = first["per_category"][cat]["n"]
            cells = []
            for c in cfgs.values():
                pc = c["per_category"][cat]
                cell = f"{pc['ndcg@10']:.3f} / {pc['recall@10']:.3f}"
                if "recall_any@5" in pc:
                    cell += f" / {pc['recall_any@5']:.3f}"
                cells.append(cell)
            L.append(f"| {label} | {n} | " + " | ".join(cells) + " |")
    if r.get("pool_recall"):
        depths = list(next(iter(r["pool_recall"].values())))
        L.append("\n## Candidate-pool recall (the ceiling any reranker over this pool faces)\n")
        L.append("| config | " + " | ".join(f"recall@{d}" for d in depths) + " |")
        L.append("|---|" + "---|" * len(depths))
        for name, p in r["pool_recall"].items():
            L.append(f"| {name} | " + " | ".join(f"{p[d]:.3f}" for d in depths) + " |")
        L.append("\nFor `hybrid` at depth N, each list contributes its top N and the fused list is cut at N.")
    if r.get("bm25_check"):
        b = r["bm25_check"]
        L.append("\n## Independent BM25 check\n")
        L.append(f"{b['what']}: NDCG@10 {b['independent_ndcg@10']:.4f} vs SQL `lethe_bm25` "
                 f"{b['sql_ndcg@10']:.4f} (|diff| {b['abs_diff']:.4f}); same top-1 on "
                 f"{100 * b['top1_agreement']:.1f}% of queries.")
    ix = r.get("index") or {}
    lat = r.get("latency") or {}
    L.append("\n## Index and latency\n")
    L.append(f"- {ix.get('items')} items -> {ix.get('entries')} entries in {ix.get('stores')} store(s): "
             f"{ix.get('collapsed_items')} items share an entry with another item (identical text, or "
             f"{ix.get('near_duplicate_items', 0)} merged as near-duplicates by the store's dedup); ingest "
             f"{ix.get('seconds')} s ({ix.get('items_per_s')} items/s)")
    emb = ix.get("embedder") or {}
    if emb.get("cache"):
        cache = emb["cache"]
        L.append(f"- embedder `{emb.get('model_id')}`; embedding cache hits {cache['hits']}, misses {cache['misses']} "
                 "(ingest time excludes cached embeddings)")
    else:
        L.append(f"- embedder `{emb.get('model_id')}`, no cache")
    L.append(f"- warm search: {lat.get('warm')}; {lat.get('warm_queries')} queries")
    cold = lat.get("cold_search")
    if cold:
        L.append(f"- one cold `lethe search --mode {cold.get('mode')}` process: {cold['ms']:.0f} ms wall "
                 f"(exit {cold['exit']}), peak RSS {cold['peak_rss_mib']} MiB")
    L.append(f"- peak RSS of the bench process: {lat.get('peak_rss_mib')} MiB")
    return L


def _learning(r: dict) -> list[str]:
    lr = r["learning"]
    L = [f"\n## Learning protocol: {lr['protocol']}\n", lr.get("what", "") + "."]
    if lr.get("split"):
        sp = lr["split"]
        L.append(f"\nTraining half: {sp['train_queries']} questions ({sp['hot_queries']} hot); {sp['draws']} learning "
                 f"draws ({sp['hot_draw_share']} from the hot set, {sp['distinct_trained']} distinct questions); "
                 f"held-out half scored: {sp['test_queries']} questions.")
    if lr.get("pairs"):
        L.append("\n### Each learning config against the same pipeline without learning (paired)\n")
        L.append("| learning config | against | queries | ΔNDCG@10 [95% CI] | p | ΔRecall@10 [95% CI] | p | ΔMRR [95% CI] | p |")
        L.append("|---|---|---|---|---|---|---|---|---|")
        for name, p in lr["pairs"].items():
            o, rec, mrr = p["overall"], p["recall@10"], p["mrr"]
            L.append(f"| {name} | {p['against']} | {o['n']} | {o['delta']:+.4f} {_ci(o['ci95'])} | {o['p']:.4f} | "
                     f"{rec['delta']:+.4f} {_ci(rec['ci95'])} | {rec['p']:.4f} | {mrr['delta']:+.4f} {_ci(mrr['ci95'])} | "
                     f"{mrr['p']:.4f} |")
            if p.get("second_half"):
                h = p["second_half"]
                L.append(f"| {name}, second half of the stream | {p['against']} | {h['n']} | {h['delta']:+.4f} "
                         f"{_ci(h['ci95'])} | {h['p']:.4f} | | | | |")
    sh = lr.get("second_half")
    if sh:
        L.append(f"\n### Second half of the stream ({sh['n']} queries)\n")
        L.append("| config | NDCG@10 [95% CI] | Recall@10 | MRR |")
        L.append("|---|---|---|---|")
        for name, c in sh["configs"].items():
            L.append(f"| {name} | {c['ndcg@10']:.3f} {_ci(c['ci95']['ndcg@10'])} | {c['recall@10']:.3f} | {c['mrr']:.3f} |")
    if lr.get("configs"):
        L.append("\n### What was learned, and what learning costs\n")
        L.append("| config | judge | learning searches | learning update p50 / p95 ms | search with learning p50 / p95 ms "
                 "| logged queries | suppression rows | clusters |")
        L.append("|---|---|---|---|---|---|---|---|")
        for name, c in lr["configs"].items():
            st = c["stores"]
            u, t = c["learn_update_ms"], c["search_with_learning_ms"]
            L.append(f"| {name} | {c['judge']} | {c['learning_searches']} | {_f(u['p50_ms'], 1)} / {_f(u['p95_ms'], 1)} | "
                     f"{_f(t['p50_ms'], 1)} / {_f(t['p95_ms'], 1)} | {sum(x['logged_queries'] for x in st)} | "
                     f"{sum(x['suppression_rows'] for x in st)} | {max((x['clusters'] for x in st), default=0)} |")
        L.append("\nThe learning update is `Outcome.timings_ms['learn']` of `lethe_sql/pipeline.run` (the update "
                 "transaction and the k-means refit check); the search time includes the query encoding, the judge "
                 "and the update.")
    if lr.get("settings"):
        L.append("\nSettings: " + ", ".join(f"`{k}={v}`" for k, v in lr["settings"].items()))
    return L


def _latency_only(r: dict) -> list[str]:
    L: list[str] = []
    sizes = r.get("sizes") or {}
    L.append(f"Vectors: **{r.get('vectors')}**.\n")
    L.append("## Warm search latency (ms, `MemoryStore.search(top_k=10)`, real query embedding)\n")
    cfgs = list(r["configs"])
    L.append("| entries | " + " | ".join(f"{c} p50 / p95" for c in cfgs) + " |")
    L.append("|---|" + "---|" * len(cfgs))
    for size in sizes:
        cells = []
        for c in cfgs:
            s = r["configs"][c]["by_size"].get(size, {})
            cells.append(f"{_f(s.get('p50_ms'), 1)} / {_f(s.get('p95_ms'), 1)}")
        L.append(f"| {int(size):,} | " + " | ".join(cells) + " |")
    if any(s.get("learning") for s in sizes.values()):
        L.append("\n## Judge and learning update (ms, `lethe_sql.pipeline.run`, query encoding excluded)\n")
        L.append("| entries | judge | judge off p50 / p95 | judge on p50 / p95 | judge on + learning p50 / p95 | "
                 "learning update p50 / p95 | update CPU time p50 / p95 | k-means refit (once) |")
        L.append("|---|---|---|---|---|---|---|---|")
        for size, s in sizes.items():
            lr = s.get("learning")
            if not lr:
                continue
            pp = lambda d: f"{_f(d.get('p50_ms'), 1)} / {_f(d.get('p95_ms'), 1)}"  # noqa: E731
            L.append(f"| {int(size):,} | {lr['judge']} | {pp(lr['judge_off'])} | {pp(lr['judge_on'])} | "
                     f"{pp(lr['judge_on_learning'])} | {pp(lr['learn_update'])} | {pp(lr['learn_update_cpu'])} | "
                     f"{lr['refit']['ms']} ms at {lr['refit']['logged_queries']} logged queries |")
        notes = {lr.get("judge_note") for s in sizes.values() if (lr := s.get("learning")) and lr.get("judge_note")}
        for note in notes:
            L.append(f"\n{note}.")
        what = next((s["learning"]["what"] for s in sizes.values() if s.get("learning")), None)
        if what:
            L.append(f"\n{what}.")
    L.append("\n## Index, add, cold processes\n")
    L.append("| entries | ingest s | ingest items/s | bare model items/s | ratio | store.add median ms | "
             "cold `lethe add` ms | cold `lethe search` ms | DB MiB | peak RSS MiB |")
    L.append("|---|---|---|---|---|---|---|---|---|---|")
    for size, s in sizes.items():
        L.append(
            f"| {int(size):,} | {_f(s.get('index_seconds'), 1)} | {_f(s.get('index_items_per_s'), 1)} | "
            f"{_f(s.get('model_items_per_s'), 1)} | {_f(s.get('throughput_ratio'), 2)} | "
            f"{_f((s.get('add_one') or {}).get('median_ms'), 1)} | {_f((s.get('cold_add') or {}).get('median_ms'), 0)} | "
            f"{_f((s.get('cold_search') or {}).get('median_ms'), 0)} | {_f(s.get('db_mib'), 1)} | {_f(s.get('peak_rss_mib'), 0)} |"
        )
    for size, s in sizes.items():
        if s.get("model_throughput_note"):
            runs = s.get("model_items_per_s_runs")
            L.append(f"\n{int(size):,}: {s['model_throughput_note']}" + (f" (runs: {runs} items/s)." if runs else "."))
        if s.get("embedding_cache"):
            L.append(f"\n{int(size):,}: embedding cache {s['embedding_cache']} (ingest time excludes cached embeddings).")
    targets = r.get("targets")
    if targets:
        L.append("\n## Issue 2 targets (reported, not asserted)\n")
        for t in targets:
            L.append(f"- {t}")
    return L


def write_chart(r: dict, path: Path) -> str | None:
    """Draw the chart; returns None when written, else why it was skipped."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install 'lethe-sql[bench]')"
    latency_only = r.get("protocol") == "latency"
    cfgs = r["configs"]
    ncols = 1 if latency_only else 2
    fig, axes = plt.subplots(1, ncols, figsize=(6.5 * ncols, 4.2), squeeze=False)
    axes = axes[0]
    if not latency_only:
        ax = axes[0]
        first = next(iter(cfgs.values()))
        keys = [k for k in QUALITY_PLOT if k in first]
        width = 0.8 / max(1, len(cfgs))
        for i, (name, c) in enumerate(cfgs.items()):
            xs = [j + i * width for j in range(len(keys))]
            ys = [c[k] for k in keys]
            lo = [c[k] - c["ci95"][k][0] for k in keys]
            hi = [c["ci95"][k][1] - c[k] for k in keys]
            ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=name)
        ax.set_xticks([j + width * (len(cfgs) - 1) / 2 for j in range(len(keys))])
        ax.set_xticklabels(keys)
        ax.set_ylim(0, 1)
        ax.set_title(f"{r['dataset']} {r['protocol']}: quality (n={r['n_queries']}, 95% CI)")
        ax.legend()
    ax = axes[-1]
    if latency_only:
        for name, c in cfgs.items():
            by = c.get("by_size") or {}
            xs = sorted(int(s) for s in by if by[s].get("p50_ms") is not None)
            if not xs:
                continue
            p50 = [by[str(s)]["p50_ms"] for s in xs]
            p95 = [by[str(s)]["p95_ms"] for s in xs]
            ax.errorbar(xs, p50, yerr=[[0] * len(xs), [b - a for a, b in zip(p50, p95)]], marker="o", capsize=3,
                        label=name)
        ax.set_xscale("log")
        ax.set_xlabel("entries in the index")
        ax.legend()
    else:  # one corpus size: one bar per config
        timed = [(n, c) for n, c in cfgs.items() if c.get("p50_ms") is not None]
        xs = list(range(len(timed)))
        p50 = [c["p50_ms"] for _, c in timed]
        p95 = [c["p95_ms"] for _, c in timed]
        colors = [f"C{i}" for i, n in enumerate(cfgs) if cfgs[n].get("p50_ms") is not None]
        ax.bar(xs, p50, yerr=[[0] * len(xs), [b - a for a, b in zip(p50, p95)]], capsize=3, color=colors)
        ax.set_xticks(xs)
        ax.set_xticklabels([n for n, _ in timed])
        ax.set_xlabel(f"config, at {r.get('index', {}).get('entries')} entries per store")
    ax.set_ylabel("warm search ms (p50, whisker to p95)")
    ax.set_title("latency per corpus size")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
