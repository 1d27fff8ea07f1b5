"""Hybrid latency of this checkout against another commit (a git worktree), one process each:

    git worktree add /tmp/old 04a563f
    for w in old new old new; do .venv/bin/python bench/lever_study/hybrid_ab.py $w; done

Builds a 10,000-entry store with random vectors per side once (``synth_store``,
/tmp/hybrid-ab-<side>), then times 100 hybrid searches (30 warm-up) with random query
vectors: the SQL path only.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "new"
    if which == "old":
        sys.path[:0] = ["/tmp/old", "/tmp/old/bench"]
    else:
        sys.path.insert(0, str(HERE.parent))
    import lethe_sql
    from lethe_bench import synthetic
    from synth_store import open_store

    store = open_store(Path(f"/tmp/hybrid-ab-{which}"))
    lat = []
    for i, q in enumerate(synthetic.queries(130, 0)):
        t = time.perf_counter()
        store.search(q, top_k=10, mode="hybrid")
        if i >= 30:
            lat.append((time.perf_counter() - t) * 1000)
    print(which, lethe_sql.__file__, f"hybrid p50 {statistics.median(lat):.2f}")


if __name__ == "__main__":
    main()
