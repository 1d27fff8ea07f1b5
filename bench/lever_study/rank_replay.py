"""Record how questions about the present are ordered, for offline studies of that order.

    .venv/bin/python bench/lever_study/rank_replay.py dump --projects p50,...,p65 --out FILE

``dump`` indexes each project of the update sets (as ``lethe bench updates`` does, stores in
a temporary folder) and searches every question once (``revision_rank_cv.py --dump FILE``
does the same with each project's links detected by a model fitted without it), recording
for a question about the present the judged list *before* ``present.order`` (ids, final
scores, dates, texts, headings, the blend's inputs), the links among it, the scored pairs
among the candidates ``present.order`` reorders, and the ranking as shipped.
``present_ltr.py`` fits and replays the learned order over such dumps.

Until the fourteenth session this script also replayed the rules that ordered such
questions then (promotions of pairs scored at ``PROMOTE_AT``, chain evidence, margins);
those rules were replaced by ``lethe_sql/present.py`` and the replays went with them (git
history, before 2026-11-28). Dumps written before then name the scored pairs
``promotions`` (among the judged top ten only) instead of ``pairs``.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from revision_fit import FIT, REPO  # noqa: E402

from lethe_bench import updates as U  # noqa: E402
from lethe_sql import MemoryStore, present  # noqa: E402

#: the z-scored first-stage and judge inputs of ``pipeline.blend``
BLEND = ("judge_raw", "bm25_score", "ctx_score", "dense_score")


class Recorder:
    """While open, every search records the judged list that ``present.order`` is given,
    the links and scored pairs it is given with it; ``search`` returns that row with the
    question, the ranking and the project's links."""

    def __init__(self) -> None:
        self.last: dict = {}
        self._shipped = present.order

    def __enter__(self) -> "Recorder":
        shipped = self._shipped

        def order(ordered, *, pairs, reach, key, field="judge_score", **rest):
            self.last["pool"] = [(key(c), getattr(c, field), c.created_at, c.text, c.heading,
                                  {f: getattr(c, f, None) for f in BLEND}) for c in ordered]
            self.last["pairs"] = dict(pairs)
            self.last["reach"] = {k: set(v) for k, v in reach.items()}
            return shipped(ordered, pairs=pairs, reach=reach, key=key, field=field, **rest)

        present.order = order
        return self

    def __exit__(self, *exc) -> None:
        present.order = self._shipped

    def search(self, store, project_id: str, q: dict, back: dict, links: set) -> dict:
        """Search ``q`` as ``lethe bench updates`` does and return its row."""
        self.last.clear()
        res = store.search_outcome(q["question"], top_k=U.TOP_K, learn=False,
                                   settings=store.settings.with_(top_k=U.TOP_K))
        name = lambda m: {back.get(k, k): {back.get(x, x) for x in v} for k, v in m.items()}  # noqa: E731
        pool = [(back.get(i, i), *rest) for i, *rest in self.last.get("pool", [])]
        reach = self.last.get("reach")
        pairs = {(back.get(o, o), back.get(n, n)): p for (o, n), p in self.last.get("pairs", {}).items()}
        return dict(project=project_id, q=q, ranked=[back.get(c.id, c.id) for c in res.results],
                    pool=pool, linked=None if reach is None else name(reach), links=links, pairs=pairs)


def links_of(store, back: dict) -> set:
    return {(back.get(o), back.get(n)) for o, n in
            store.con.execute("SELECT old_id, new_id FROM revisions").fetchall()}


def dump(projects: list[str], out: Path) -> None:
    from lethe_sql.udfs.embed import Embedder

    emb, rows = Embedder(), []
    with tempfile.TemporaryDirectory() as tmp, Recorder() as rec:
        for p in U.load(REPO / "bench" / "data" / "updates", projects):
            root = Path(tmp) / p.id
            U.write_project(p, root)
            with MemoryStore(root, embedder=emb) as store:
                store.index()
                back = {v: k for k, v in U._ids(store, p).items()}
                links = links_of(store, back)
                rows += [rec.search(store, p.id, q, back, links) for q in p.queries]
            print(p.id, file=sys.stderr, flush=True)
    with open(out, "wb") as f:
        pickle.dump(rows, f)


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("--projects", default=FIT)
    d.add_argument("--out", required=True)
    a = ap.parse_args()
    dump(a.projects.split(","), Path(a.out))


if __name__ == "__main__":
    main()
