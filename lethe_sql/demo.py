"""``lethe demo``: index the bundled sample memory folder and run a few searches."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

from .resources import sample_memory_dir
from .store import MemoryStore

DEMO_QUERIES = [
    "why did the staging deploy fail",
    "which port does the local postgres use",
    "what did we decide about retries for the payment webhook",
    "flaky test in CI",
]


def run_demo(top_k: int = 3, keep: Path | None = None, echo: Callable[[str], None] = print) -> dict:
    """Index the sample into ``keep`` (else a temporary folder) and run ``DEMO_QUERIES``;
    prints as it goes through ``echo`` and returns the same as a dict (``lethe demo --json``)."""
    sample = sample_memory_dir()
    files = sorted(sample.glob("*.md"))
    out: dict = {"files": len(files), "searches": []}
    with tempfile.TemporaryDirectory(prefix="lethe-demo-") as tmp:
        root = Path(keep).expanduser().resolve() if keep else Path(tmp)
        with MemoryStore(root) as store:
            shutil.copytree(sample, store.memory_dir, dirs_exist_ok=True)
            echo(f"sample: {len(files)} memory files copied to {store.memory_dir}")
            t0 = time.perf_counter()
            report = store.index()
            seconds = time.perf_counter() - t0
            echo(
                f"indexed {report.entries_total} memories from {report.files_indexed} files "
                f"in {seconds:.1f} s -> {store.db_path}"
            )
            out.update(root=str(root) if keep else None, database=str(store.db_path) if keep else None,
                       entries=report.entries_total, files_indexed=report.files_indexed,
                       index_seconds=round(seconds, 3))
            for q in DEMO_QUERIES:
                echo("")
                echo(f"$ lethe search {q!r} --top-k {top_k}")
                t0 = time.perf_counter()
                hits = store.search(q, top_k=top_k)
                ms = (time.perf_counter() - t0) * 1000
                for h in hits:
                    text = " ".join(h.text.split())
                    text = text if len(text) <= 160 else text[:159] + "…"
                    echo(f"{h.rank:>2}. [{h.score:.4f}] {Path(h.source or '?').name} › {h.heading or '-'}")
                    echo(f"    {text}")
                judge = hits[0].judge if hits else None
                how = {
                    "cross-encoder": "reranked by the cross-encoder",
                    "late-interaction": "judged by late interaction over token vectors",
                }.get(judge, "first stage only, not reranked")
                echo(f"    ({len(hits)} results in {ms:.0f} ms; BM25 + context BM25 + dense fused, {how})")
                out["searches"].append({
                    "query": q, "judge": judge, "ms": round(ms, 1),
                    "results": [{"rank": h.rank, "id": h.id, "score": h.score, "source": h.source,
                                 "heading": h.heading, "text": h.text} for h in hits],
                })
    return out
