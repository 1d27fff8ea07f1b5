"""Hybrid latency of this checkout against another commit (a git worktree), one process each:

    git worktree add /tmp/old 04a563f
    for w in old new old new; do .venv/bin/python bench/lever_study/hybrid_ab.py $w; done

Builds a 10,000-entry store with random vectors per side once (/tmp/s14/hyb-<side>), then times
100 hybrid searches (30 warm-up) with random query vectors: the SQL path only.
"""
import sys, time, statistics
from pathlib import Path
which = sys.argv[1]
if which == "old":
    sys.path.insert(0, "/tmp/old/bench"); sys.path.insert(0, "/tmp/old")
else:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import lethe_sql
from lethe_bench import synthetic
from lethe_bench.perf import _embedder, _sources
from lethe_sql import MemoryStore
from lethe_sql.store import Document
root = Path(f"/tmp/s14/hyb-{which}")
fresh = not root.exists()
emb = _embedder("random", False, None, 0)
store = MemoryStore(root, embedder=emb)
if fresh:
    items = list(synthetic.generate(10000, 0))
    docs = [Document(content=i.text, created_at=i.created_at, session_id=i.session) for i in items]
    for source, part in _sources(docs, items, "random"):
        store.put_documents(source, part)
qs = synthetic.queries(130, 0)
lat = []
for i, q in enumerate(qs):
    t = time.perf_counter(); store.search(q, top_k=10, mode="hybrid"); d = (time.perf_counter() - t) * 1000
    if i >= 30: lat.append(d)
print(which, lethe_sql.__file__, "hybrid p50 %.2f" % statistics.median(lat))
