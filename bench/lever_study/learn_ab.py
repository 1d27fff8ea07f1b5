"""A/B of the learning update: the previous ``learn.update`` (git 04a563f) against today's, on
alternate searches of one 10,000-entry synthetic store, in one process.

    .venv/bin/python bench/lever_study/learn_ab.py [--store /tmp/learn10k]

The store is built once (``synth_store``: random vectors, `bench synthetic`'s generator) and reused.
Prints p50/p95 of ``Outcome.timings_ms['learn']`` (the update transaction and the refit
check) for each side, warm-up searches left out. 2026-11-24: 11.76 -> 9.98 ms p50 on a fresh store; 11.08 -> 9.21 with maybe_refit's
reads folded in.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import lethe_sql.learn as L  # noqa: E402
import lethe_sql.pipeline as P  # noqa: E402
from lethe_bench import synthetic  # noqa: E402
from synth_store import open_store  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", default="/tmp/learn10k")
    ap.add_argument("--before", default="04a563f")
    a = ap.parse_args()
    src = subprocess.run(["git", "show", f"{a.before}:lethe_sql/learn.py"], capture_output=True, text=True,
                         cwd=REPO, check=True).stdout
    ns = dict(vars(L))
    exec(re.search(r"^def update\(.*?(?=^def )", src, re.S | re.M).group(0), ns)
    sides = {"before": ns["update"], "now": L.update}
    store = open_store(Path(a.store))
    res: dict[str, list[float]] = {k: [] for k in sides}
    for i, q in enumerate(synthetic.queries(300, 1)):
        side = "before" if i % 2 else "now"
        P.update = sides[side]
        out = store.search_outcome(q, top_k=10)
        if i >= 20:
            res[side].append(out.timings_ms["learn"])
    for k, v in res.items():
        v = sorted(v)
        print(f"{k}: learning update p50 {statistics.median(v):.2f} ms, p95 {v[int(0.95 * len(v))]:.2f} ms, n {len(v)}")


if __name__ == "__main__":
    main()
