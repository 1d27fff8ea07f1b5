"""``lethe bench updates PATH``: memory that stays true, on sets of dated update chains.

The format (a file, or a folder of ``*.json`` files whose projects are concatenated)::

    {"projects": [{"id": "p01",
       "memories": [{"id": "p01-m001", "date": "2026-03-02", "time": "09:14", "title": "...", "text": "..."}],
       "queries": [{"id": "...", "question": "...", "kind": "current", "current": "p01-m017", "stale": ["p01-m003"]},
                   {"id": "...", "question": "...", "kind": "past", "target": "p01-m003", "newer": ["p01-m017"]},
                   {"id": "...", "question": "...", "kind": "static", "target": "p01-m021"}]}]}

Each project is written as a user's memory folder (``.lethe/memory/<date>.md``: ``# <date>``,
then ``## <time> <title>`` sections in time order), indexed with ``MemoryStore.index`` and
searched through ``MemoryStore.search_outcome`` (top 10, learning off), per config:

* ``default``: what ``lethe search`` does;
* ``default-norevisions``: the same store and pipeline with ``revisions = false`` (no
  time-aware ranking): the baseline, in the same process;
* ``hybrid`` / ``bm25``: one first-stage macro alone.

Metrics per config, each a mean over its queries with a 95% bootstrap CI:
``cur@1`` (top 1 is the current version), ``cur_first`` (the current version is in the top
10 and above every stale version there), ``stale@1`` (top 1 is a superseded version),
``past@5`` (the target of a past question in the top 5), ``static@5``. Detection is
scored against the chains the queries imply (a pair (stale, current) or (target, newer)
is one chain): ``link recall`` (gold pairs connected by the links, in the right
direction) and ``link precision`` (links whose two memories belong to one chain).
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass
from datetime import date as Date, datetime
from pathlib import Path

from lethe_sql.errors import UsageError
from lethe_sql.revisions import Graph

CONFIGS = ("default", "default-norevisions", "hybrid", "bm25")
METRICS = ("cur@1", "cur_first", "stale@1", "past@5", "static@5")
TOP_K = 10


@dataclass
class Project:
    id: str
    memories: list[dict]
    queries: list[dict]


def load(path: Path, projects: list[str] | None = None) -> list[Project]:
    """The projects of ``path`` (a file or a folder of ``*.json``), checked; a problem is one
    UsageError line naming the project and the item."""
    path = Path(path).expanduser()
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    if not files or not all(f.is_file() for f in files):
        raise UsageError(f"no update set at {path}")
    out: list[Project] = []
    for f in files:
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise UsageError(f"{f}: not a JSON update set ({exc})") from None
        for p in data.get("projects", []) if isinstance(data, dict) else []:
            out.append(_check(p, f.name))
    if projects:
        want = set(projects)
        missing = want - {p.id for p in out}
        if missing:
            raise UsageError(f"no project {', '.join(sorted(missing))} in {path}")
        out = [p for p in out if p.id in want]
    if not out:
        raise UsageError(f"{path} holds no projects")
    ids = [p.id for p in out]
    if len(set(ids)) != len(ids):
        raise UsageError(f"{path}: a project id occurs twice")
    return out


def _check(p: dict, name: str) -> Project:
    pid = p.get("id")
    if not pid or not isinstance(p.get("memories"), list) or not isinstance(p.get("queries"), list):
        raise UsageError(f"{name}: a project needs id, memories and queries")
    mem = {}
    for m in p["memories"]:
        mid = m.get("id")
        if not mid or mid in mem:
            raise UsageError(f"{name} {pid}: memory without an id, or a repeated id ({mid})")
        if not m.get("date"):
            raise UsageError(f"{name} {pid}: memory {mid} has no date")
        try:
            Date.fromisoformat(m["date"])
            if m.get("time"):
                datetime.strptime(m["time"], "%H:%M")
        except ValueError:
            raise UsageError(f"{name} {pid}: memory {mid} has a bad date or time ({m.get('date')} {m.get('time')})") from None
        if not (m.get("text") or "").strip():
            raise UsageError(f"{name} {pid}: memory {mid} has no text")
        mem[mid] = m
    for q in p["queries"]:
        kind = q.get("kind")
        refs = ([q.get("current")] + list(q.get("stale") or [])) if kind == "current" else \
            ([q.get("target")] + list(q.get("newer") or [])) if kind in ("past", "static") else None
        if refs is None or not q.get("question"):
            raise UsageError(f"{name} {pid}: query {q.get('id')} needs a question and kind current, past or static")
        bad = [r for r in refs if r not in mem]
        if bad:
            raise UsageError(f"{name} {pid}: query {q.get('id')} names unknown memories {', '.join(map(str, bad))}")
    return Project(pid, p["memories"], p["queries"])


def write_project(p: Project, root: Path) -> None:
    """``p``'s memories as a user's folder: one file per date, sections in time order."""
    mem_dir = root / ".lethe" / "memory"
    mem_dir.mkdir(parents=True, exist_ok=True)
    by_day: dict[str, list[dict]] = {}
    for m in p.memories:
        by_day.setdefault(m["date"], []).append(m)
    for day, ms in by_day.items():
        ms = sorted(ms, key=lambda m: (m.get("time") or "", m["id"]))
        parts = [f"# {day}\n"]
        for m in ms:
            title = " ".join(f"{m.get('time') or ''} {m.get('title') or ''}".split()) or m["id"]
            parts.append(f"## {title}\n\n{m['text'].strip()}\n")
        (mem_dir / f"{day}.md").write_text("\n".join(parts), encoding="utf-8")


def _metrics(q: dict, ranked: list[str]) -> dict[str, float]:
    top = ranked[:TOP_K]
    if q["kind"] == "current":
        cur, stale = q["current"], set(q.get("stale") or [])
        first = top[0] if top else None
        above = cur in top and all(top.index(cur) < top.index(s) for s in stale if s in top)
        return {"cur@1": float(first == cur), "cur_first": float(above), "stale@1": float(first in stale)}
    if q["kind"] == "past":
        return {"past@5": float(q["target"] in top[:5])}
    return {"static@5": float(q["target"] in top[:5])}


#: what ranked first when a current question's current version did not (``miss``)
MISSES = ("stale version, linked", "stale version, not linked", "another memory, current in the top 10",
          "another memory, current not in the top 10")


def miss(q: dict, ranked: list[str], linked) -> str | None:
    """Why a current question missed at rank 1 (one of ``MISSES``), None when it did not:
    a stale version first, whether or not the store links it to the current version
    (``linked(stale, current)``), or another memory first, with the current version in the
    top ``TOP_K`` or not."""
    top = ranked[:TOP_K]
    if q["kind"] != "current" or (top and top[0] == q["current"]):
        return None
    if top and top[0] in set(q.get("stale") or []):
        return MISSES[0] if linked(top[0], q["current"]) else MISSES[1]
    return MISSES[2] if q["current"] in top else MISSES[3]


def _gold_pairs(p: Project) -> set[tuple[str, str]]:
    """(older, newer) pairs the queries imply."""
    out = set()
    for q in p.queries:
        if q["kind"] == "current":
            out |= {(s, q["current"]) for s in q.get("stale") or []}
        elif q["kind"] == "past":
            out |= {(q["target"], n) for n in q.get("newer") or []}
    return out


def _chains(pairs: set[tuple[str, str]]) -> list[set[str]]:
    comp: dict[str, set[str]] = {}
    for a, b in pairs:
        s = comp.get(a, {a}) | comp.get(b, {b})
        for x in s:
            comp[x] = s
    seen, out = set(), []
    for s in comp.values():
        if id(s) not in seen:
            seen.add(id(s))
            out.append(s)
    return out


def _search(store, config: str, question: str) -> list[str]:
    if config in ("hybrid", "bm25", "dense"):
        return [h.id for h in store.search(question, top_k=TOP_K, mode=config)]
    settings = store.settings.with_(top_k=TOP_K, revisions=config != "default-norevisions")
    out = store.search_outcome(question, top_k=TOP_K, learn=False, settings=settings)
    return [c.id for c in out.results]


def run(path: Path, configs: list[str], *, projects: list[str] | None = None, seed: int = 0,
        workdir: Path | None = None, log=print) -> tuple[dict, dict]:
    """Run every config over every project; returns (result, per-query scores)."""
    from lethe_sql import MemoryStore
    from lethe_sql.udfs.embed import Embedder

    from .meta import git_state, machine, now_iso, package_version
    from .stats import bootstrap_ci, compare

    bad = [c for c in configs if c not in CONFIGS]
    if bad:
        raise UsageError(f"unknown config(s) {', '.join(bad)} for updates; choose from {', '.join(CONFIGS)}")
    sets = load(path, projects)
    emb = Embedder()
    scores: dict[str, dict[str, list[float]]] = {c: {m: [] for m in METRICS} for c in configs}
    per_query: dict[str, dict] = {c: {} for c in configs}
    latency: dict[str, list[float]] = {c: [] for c in configs}
    det = {"gold_pairs": 0, "gold_found": 0, "links": 0, "links_in_chain": 0, "wrong": []}
    misses: dict[str, dict[str, int]] = {c: dict.fromkeys(MISSES, 0) for c in configs}
    index_s = 0.0
    with tempfile.TemporaryDirectory(prefix="lethe-bench-updates-", dir=workdir) as tmp:
        for p in sets:
            root = Path(tmp) / p.id
            write_project(p, root)
            t0 = time.perf_counter()
            with MemoryStore(root, embedder=emb) as store:
                store.index()
                index_s += time.perf_counter() - t0
                id_of = _ids(store, p)
                graph = _score_links(store, p, id_of, det)
                back = {v: k for k, v in id_of.items()}
                linked = lambda a, b: graph.reaches(id_of[a], id_of[b])  # noqa: E731
                for q in p.queries:
                    for c in configs:
                        t1 = time.perf_counter()
                        ranked = _search(store, c, q["question"])
                        latency[c].append((time.perf_counter() - t1) * 1000)
                        ranked = [back.get(i, i) for i in ranked]
                        m = _metrics(q, ranked)
                        for k, v in m.items():
                            scores[c][k].append(v)
                        why = miss(q, ranked, linked)
                        if why:
                            misses[c][why] += 1
                        per_query[c][q["id"]] = {"kind": q["kind"], **m, "top": ranked[:3],
                                                 **({"miss": why} if why else {})}
            log(f"{p.id}: {len(p.memories)} memories, {len(p.queries)} queries")
    import numpy as np

    result = {
        "dataset": "updates", "protocol": "updates", "path": str(path), "projects": [p.id for p in sets],
        "n_memories": sum(len(p.memories) for p in sets), "n_queries": sum(len(p.queries) for p in sets),
        "n_by_kind": {k: sum(1 for p in sets for q in p.queries if q["kind"] == k) for k in ("current", "past", "static")},
        "index_seconds": round(index_s, 2), "seed": seed, "machine": machine(), "finished": now_iso(),
        "package_version": package_version(), "git": git_state(),
        "detection": {
            "gold_pairs": det["gold_pairs"], "link_recall": round(det["gold_found"] / max(det["gold_pairs"], 1), 4),
            "links": det["links"], "link_precision": round(det["links_in_chain"] / max(det["links"], 1), 4),
            "wrong_links": det["wrong"][:40],
        },
        "configs": {},
        "vs_baseline": {},
    }
    for c in configs:
        row = {}
        for m in METRICS:
            xs = scores[c][m]
            if xs:
                lo, hi = bootstrap_ci(xs, seed=seed)
                row[m] = {"mean": round(float(np.mean(xs)), 4), "ci95": [round(lo, 4), round(hi, 4)], "n": len(xs)}
        lat = np.asarray(latency[c])
        row["p50_ms"] = round(float(np.percentile(lat, 50)), 1) if lat.size else None
        row["p95_ms"] = round(float(np.percentile(lat, 95)), 1) if lat.size else None
        row["misses"] = misses[c]
        result["configs"][c] = row
    if "default" in configs and "default-norevisions" in configs:
        for m in METRICS:
            a, b = scores["default-norevisions"][m], scores["default"][m]
            if a:
                result["vs_baseline"][m] = compare(a, b, seed=seed)
    return result, per_query


def _ids(store, p: Project) -> dict[str, str]:
    """bench memory id -> entry id (the id ingestion gives its text: ``Document.to_chunk``,
    secrets redacted, as ``runner.build_store`` finds an item's entry)."""
    from lethe_sql.markdown import Document

    out = {}
    for m in p.memories:
        eid = Document(content=m["text"]).to_chunk(0, "").id
        hit = store.con.execute("SELECT coalesce((SELECT into_id FROM absorbed WHERE id = ?), ?)", [eid, eid]).fetchone()
        out[m["id"]] = hit[0]
    return out


def _score_links(store, p: Project, id_of: dict[str, str], det: dict):
    """Count the store's links against ``p``'s chains into ``det``; returns the links as a
    ``Graph`` (entry ids)."""
    gold = _gold_pairs(p)
    chains = _chains(gold)
    chain_of = {x: k for k, s in enumerate(chains) for x in s}
    back = {v: k for k, v in id_of.items()}
    links = store.con.execute("SELECT old_id, new_id, origin, reason FROM revisions").fetchall()
    graph = Graph((o, n) for o, n, _, _ in links)  # the product's own chain walk

    det["gold_pairs"] += len(gold)
    det["gold_found"] += sum(1 for a, b in gold if graph.reaches(id_of[a], id_of[b]))
    det["links"] += len(links)
    for o, n, origin, reason in links:
        bo, bn = back.get(o), back.get(n)
        ok = bo in chain_of and chain_of.get(bo) == chain_of.get(bn)
        det["links_in_chain"] += ok
        if not ok:
            det["wrong"].append(f"{bo} -> {bn} ({reason})")
    return graph


def markdown(r: dict, command: str) -> str:
    from .meta import git_text, machine_line

    code = git_text(r.get("git"))
    L = [f"# lethe bench: updates\n", f"- command: `{command}`",
         f"- lethe-sql {r.get('package_version', '?')}{f' ({code})' if code else ''}",
         f"- projects: {', '.join(r['projects'])} ({r['n_memories']} memories, {r['n_queries']} queries: "
         + ", ".join(f"{k} {v}" for k, v in r["n_by_kind"].items()) + ")",
         f"- machine: {machine_line(r['machine'])}; finished {r['finished']}",
         f"- detection: link recall {r['detection']['link_recall']:.3f} over {r['detection']['gold_pairs']} gold pairs; "
         f"link precision {r['detection']['link_precision']:.3f} over {r['detection']['links']} links", "",
         "| config | " + " | ".join(METRICS) + " | p50 ms |", "|---" * (len(METRICS) + 2) + "|"]
    for c, row in r["configs"].items():
        cells = []
        for m in METRICS:
            v = row.get(m)
            cells.append(f"{v['mean']:.3f} [{v['ci95'][0]:.3f}, {v['ci95'][1]:.3f}]" if v else "-")
        L.append(f"| {c} | " + " | ".join(cells) + f" | {row.get('p50_ms')} |")
    if r["vs_baseline"]:
        L += ["", "default vs default-norevisions (paired):", ""]
        for m, v in r["vs_baseline"].items():
            L.append(f"- {m}: {v['delta']:+.3f} [{v['ci95'][0]:+.3f}, {v['ci95'][1]:+.3f}], p = {v['p']:.4f}")
    missed = {c: row["misses"] for c, row in r["configs"].items() if row.get("misses")}
    if missed:
        L += ["", "Current questions not answered first, by what ranked first:", "",
              "| config | " + " | ".join(MISSES) + " |", "|---" * (len(MISSES) + 1) + "|"]
        L += [f"| {c} | " + " | ".join(str(m.get(k, 0)) for k in MISSES) + " |" for c, m in missed.items()]
    if r["detection"]["wrong_links"]:
        L += ["", "Links outside any chain (first 40):", ""] + [f"- {w}" for w in r["detection"]["wrong_links"]]
    return "\n".join(L) + "\n"
