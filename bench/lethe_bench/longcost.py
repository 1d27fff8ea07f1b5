"""Index cost and size against text length (issue "Long memories"): the same LoCoMo text
indexed twice, as long memories (one per session, read in windows) and as short ones (one
per turn), so that time and file size per wordpiece can be compared.

    python -m lethe_bench.longcost [PATH] [--out DIR]

Real embedder, no cache; the file size is taken after a CHECKPOINT.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from .meta import machine, machine_line, now_iso


def measure(path: Path) -> list[dict]:
    from lethe_sql import MemoryStore
    from lethe_sql.markdown import Document
    from lethe_sql.udfs.embed import Embedder

    from .locomo import load

    emb = Embedder()
    rows = []
    for proto in ("session-local", "turn-global"):
        items = [it for c in load(path, proto).corpora for it in c.items]
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "p"
            t0 = time.perf_counter()
            with MemoryStore(root, embedder=emb) as st:
                st.put_documents("x", [Document(content=it.text) for it in items])
                secs = time.perf_counter() - t0
                con = st.con
                n = con.execute("SELECT count(*) FROM entries").fetchone()[0]
                wp = con.execute("SELECT count(*) FROM token_vectors").fetchone()[0]
                win = con.execute("SELECT count(*) FROM entry_windows").fetchone()[0]
                con.execute("CHECKPOINT")
            size = (root / ".lethe" / "index" / "lethe.duckdb").stat().st_size
        rows.append({"memories": proto, "entries": n, "wordpieces": wp, "extra_windows": win,
                     "index_seconds": round(secs, 2), "ms_per_1000_wordpieces": round(secs / wp * 1e6, 1),
                     "file_mib": round(size / 2**20, 1), "bytes_per_wordpiece": round(size / wp)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m lethe_bench.longcost")
    ap.add_argument("path", nargs="?", default="../shared/data/locomo/locomo-dev7.json.gz")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    rows = measure(Path(a.path))
    result = {"command": f"python -m lethe_bench.longcost {a.path}" + (f" --out {a.out}" if a.out else ""),
              "machine": machine_line(machine()), "finished": now_iso(), "rows": rows}
    lines = ["# Long memories: index cost and size per wordpiece", "",
             f"- command: `{result['command']}`", f"- machine: {result['machine']}", "",
             "| memories | entries | wordpieces | extra windows | index s | ms / 1,000 wordpieces | file MiB | bytes / wordpiece |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['memories']} | {r['entries']} | {r['wordpieces']} | {r['extra_windows']} | {r['index_seconds']} | "
              f"{r['ms_per_1000_wordpieces']} | {r['file_mib']} | {r['bytes_per_wordpiece']} |" for r in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
        (out / "report.md").write_text(text)


if __name__ == "__main__":
    main()
