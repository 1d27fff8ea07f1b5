"""``lethe bench facts N``: every distinct fact of a file of N near-identical sections stays
a memory of its own and is found by its number.

The store of issue "Memory that stays true": one memory file holding N sections
``## fact N`` / ``fact number N about service sK.`` (K = N mod 97), texts that differ in one
number only and whose cosines are all above 0.95. The old near-duplicate merge absorbed
8,765 of 10,000 of them. Checked here:

* ``entries``: memories in the index after ``lethe index`` (must be N), and ``absorbed``
  (must be 0);
* ``top1`` / ``top5``: for each probed fact, ``store.search_outcome("fact number N")``
  (the default pipeline, learning off) ranks that fact first / in the top 5. ``--sample S``
  probes S facts drawn with the seed (0: every fact).
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

SERVICES = 97


def section(n: int) -> str:
    return f"## fact {n}\n\nfact number {n} about service s{n % SERVICES}.\n"


def write_file(root: Path, n: int) -> Path:
    mem = root / ".lethe" / "memory"
    mem.mkdir(parents=True, exist_ok=True)
    path = mem / "facts.md"
    path.write_text("# facts\n\n" + "\n".join(section(i) for i in range(1, n + 1)), encoding="utf-8")
    return path


def run(n: int, *, sample: int = 1000, seed: int = 0, workdir: Path | None = None, log=print) -> dict:
    import numpy as np

    from lethe_sql import MemoryStore
    from lethe_sql.udfs.embed import Embedder

    from .meta import machine, now_iso

    rng = random.Random(seed)
    probes = list(range(1, n + 1)) if sample <= 0 or sample >= n else sorted(rng.sample(range(1, n + 1), sample))
    top1 = top5 = 0
    misses: list[dict] = []
    latency: list[float] = []
    with tempfile.TemporaryDirectory(prefix="lethe-bench-facts-", dir=workdir) as tmp:
        root = Path(tmp)
        write_file(root, n)
        with MemoryStore(root, embedder=Embedder()) as store:
            t0 = time.perf_counter()
            store.index()
            index_s = time.perf_counter() - t0
            con = store.con
            entries = con.execute("SELECT count(*) FROM entries").fetchone()[0]
            absorbed = con.execute("SELECT count(*) FROM absorbed").fetchone()[0]
            number = {i: h for i, h in con.execute("SELECT id, heading FROM entries").fetchall()}
            log(f"indexed {entries} entries ({absorbed} absorbed) in {index_s:.1f} s; probing {len(probes)} facts")
            for k, want in enumerate(probes, 1):
                t1 = time.perf_counter()
                out = store.search_outcome(f"fact number {want}", top_k=5, learn=False)
                latency.append((time.perf_counter() - t1) * 1000)
                got = [number.get(c.id, "") for c in out.results]
                target = f"fact {want}"
                top1 += bool(got) and got[0] == target
                top5 += target in got
                if target not in got and len(misses) < 20:
                    misses.append({"fact": want, "top5": got})
                if k % 500 == 0:
                    log(f"  {k}/{len(probes)}: top5 {top5 / k:.4f}")
    lat = np.asarray(latency)
    return {
        "dataset": "facts", "n_sections": n, "entries": entries, "absorbed": absorbed,
        "probed": len(probes), "sample_seed": seed, "top1": round(top1 / len(probes), 4),
        "top5": round(top5 / len(probes), 4), "misses": misses, "index_seconds": round(index_s, 1),
        "p50_ms": round(float(np.percentile(lat, 50)), 1), "p95_ms": round(float(np.percentile(lat, 95)), 1),
        "machine": machine(), "finished": now_iso(),
    }


def markdown(r: dict, command: str) -> str:
    from .meta import machine_line

    lines = [
        "# lethe bench: facts", "",
        f"- command: `{command}`",
        f"- machine: {machine_line(r['machine'])}; finished {r['finished']}",
        f"- {r['n_sections']} sections `fact number N about service sK.` in one memory file", "",
        "| entries | absorbed | probed | top1 | top5 | index s | p50 ms | p95 ms |",
        "|---|---|---|---|---|---|---|---|",
        f"| {r['entries']} | {r['absorbed']} | {r['probed']} | {r['top1']:.4f} | {r['top5']:.4f} | "
        f"{r['index_seconds']} | {r['p50_ms']} | {r['p95_ms']} |",
    ]
    if r["misses"]:
        lines += ["", "Not in the top 5 (first 20):", ""]
        lines += [f"- fact {m['fact']}: {', '.join(m['top5'])}" for m in r["misses"]]
    return "\n".join(lines) + "\n"
