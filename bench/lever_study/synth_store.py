"""The store the latency A/B scripts share (``learn_ab.py``, ``hybrid_ab.py``): ``lethe bench
synthetic``'s generated memories with random vectors, built once at ``root`` and reused. It
imports whichever ``lethe_sql`` and ``lethe_bench`` the caller put first on ``sys.path``."""

from __future__ import annotations

from pathlib import Path


def open_store(root: Path, size: int = 10000, seed: int = 0):
    """A MemoryStore at ``root`` with random vectors (for documents and queries); the
    ``size`` generated memories are put in when the index does not exist yet."""
    from lethe_bench import synthetic
    from lethe_bench.perf import _embedder, _sources
    from lethe_sql import MemoryStore
    from lethe_sql.store import Document

    fresh = not (Path(root) / ".lethe" / "index" / "lethe.duckdb").exists()
    store = MemoryStore(Path(root), embedder=_embedder("random", False, None, seed))
    if fresh:
        items = list(synthetic.generate(size, seed))
        docs = [Document(content=i.text, created_at=i.created_at, session_id=i.session) for i in items]
        for source, part in _sources(docs, items, "random"):
            store.put_documents(source, part)
    return store
