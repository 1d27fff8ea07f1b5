"""One table over every committed result: ``python -m lethe_bench.summary bench/results``.

Writes (or prints) ``bench/results/README.md``: per run, the data set and protocol,
queries, and per config NDCG@10 [95% CI], Recall@10, Recall@30, MRR (Recall_any@5 for
session-local) and warm p50/p95; then the synthetic latency runs; then the soak runs
(``lethe bench soak``: per operation kind attempted / failed, p50 / p95 s; lost, duplicated).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _quality_rows(r: dict, folder: str) -> list[str]:
    rows = []
    for name, c in r["configs"].items():
        ci = c["ci95"]["ndcg@10"]
        any5 = f"{c['recall_any@5']:.3f}" if "recall_any@5" in c else "-"
        rows.append(
            f"| [{folder}]({folder}/report.md) | {r['protocol']} | {r['n_queries']} | {name} | "
            f"{c['ndcg@10']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}] | {c['recall@10']:.3f} | {c['recall@30']:.3f} | "
            f"{c['mrr']:.3f} | {any5} | {c.get('p50_ms')} / {c.get('p95_ms')} |"
        )
    return rows


def _latency_rows(r: dict, folder: str, names: list[str]) -> list[str]:
    rows = []
    for size, s in r["sizes"].items():
        lat = " | ".join(f"{s['search'][n]['p50_ms']} / {s['search'][n]['p95_ms']}" if n in s["search"] else "-"
                         for n in names)
        learn = (s.get("learning") or {}).get("learn_update") or {}
        rows.append(
            f"| [{folder}]({folder}/report.md) | {r['vectors']} | {int(size):,} | {s['index_items_per_s']} | "
            f"{s.get('model_items_per_s') or '-'} | {s['add_one']['median_ms']} | "
            f"{(s.get('cold_add') or {}).get('median_ms', '-')} | {lat} | "
            f"{learn.get('p50_ms', '-')} / {learn.get('p95_ms', '-')} |"
        )
    return rows


def _soak_row(r: dict, folder: str) -> str:
    p, v = r["params"], r.get("verification") or {}
    ops = "; ".join(f"{k} {s['attempted']} / {s['failed']}, {s['p50_s']} / {s['p95_s']}" for k, s in r["ops"].items())
    return (f"| [{folder}]({folder}/report.md) | {r['duration_s']:g} | {p['adders']}/{p['searchers']}/{p['indexers']}/"
            f"{p['hooks']} | {ops} | {v.get('lost', '-')} | {v.get('duplicated', '-')} | "
            f"{v.get('failed_but_written', '-')} |")


def summarize(root: Path) -> str:
    quality, runs, names, soaks = [], [], [], []
    for res in sorted(root.glob("*/results.json")):
        r = json.loads(res.read_text())
        folder = res.parent.name
        if r.get("dataset") == "soak":
            soaks.append(_soak_row(r, folder))
        elif r.get("protocol") == "latency":
            names += [n for n in r["configs"] if n not in names]
            runs.append((r, folder))
        elif all("ci95" in c for c in (r.get("configs") or {}).values()) and r.get("configs"):
            quality.extend(_quality_rows(r, folder))
        # other runs (e.g. federation-9x5k) have their own report.md
    latency = [row for r, folder in runs for row in _latency_rows(r, folder, names)]
    out = ["# Committed benchmark results", "",
           "Each folder holds `results.json`, `report.md` (command, data sha256, version, machine, seed) and "
           "`chart.png`. Regenerate this table with `python -m lethe_bench.summary bench/results`.", ""]
    if quality:
        out += ["## Quality", "",
                "| run | protocol | queries | config | NDCG@10 [95% CI] | Recall@10 | Recall@30 | MRR | Recall_any@5 | "
                "warm p50 / p95 ms |",
                "|---|---|---|---|---|---|---|---|---|---|", *quality, ""]
    if latency:
        cols = " | ".join(f"{n} p50 / p95 ms" for n in (names or []))
        out += ["## Scale and latency (synthetic corpus)", "",
                f"| run | vectors | entries | ingest items/s | bare model items/s | store.add ms | cold `lethe add` ms | {cols} "
                "| learning update p50 / p95 ms |",
                "|---|---|---|---|---|---|---|" + "---|" * (len(names) + 1), *latency, ""]
    if soaks:
        out += ["## Soak: many agents, one store (`lethe bench soak`)", "",
                "| run | seconds | adders/searchers/indexers/hooks | per kind: attempted / failed, p50 / p95 s | lost | "
                "duplicated | failed but written |",
                "|---|---|---|---|---|---|---|", *soaks, ""]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print("usage: python -m lethe_bench.summary [FOLDER]  (default bench/results): writes FOLDER/README.md, "
              "one table over every result in it, and prints it")
        return
    if len(argv) > 1 or (argv and not Path(argv[0]).is_dir()):
        raise SystemExit(f"lethe_bench.summary: {' '.join(argv)!r} is not one folder of results")
    root = Path(argv[0] if argv else "bench/results")
    text = summarize(root)
    (root / "README.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
