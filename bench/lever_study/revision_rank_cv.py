"""Leave-one-project-out check of the revision model by what it is for: the ranking.

    .venv/bin/python bench/lever_study/revision_rank_cv.py [--projects p01,...,p17] [--link-at X] [--dump FILE] [--folds K]

For each project: fit the pair model (``revision_fit.fit``) on the other projects' candidate
pairs plus as many LoCoMo tune-conversation pairs (negatives, as ``revision_fit`` does), index
the project, detect its links again with that model (``revisions.redetect``), and score every
question (cur@1, cur_first, stale@1, past@5, static@5, as ``lethe bench updates`` does). Prints
the means over all folds' questions. Reads only the fit projects (``revision_fit.FIT``), never
the held-out set. Session 4 of 2026-11-24 (p01-p13): 0.716 / 0.953 / 0.028 / 0.912 / 0.960
(n = 211 current questions), against 0.659 / 0.900 / 0.071 / 0.912 / 0.971 for the 12-feature
design. Session 5 (p01-p17, n = 275 current): 13 features 0.713 / 0.942 / 0.033 / 0.913 /
0.969; with ``title_change`` 0.720 / 0.949 / 0.033 / 0.918 / 0.967; and ``--head-margin``
1.0 / 0.5 / 0.25: cur@1 0.731 / 0.742 / 0.738, cur_first 0.945 / 0.942 / 0.935, stale@1
0.036 / 0.036 / 0.044 (inf: 0.720 / 0.949 / 0.033). Session 6 (p01-p21, n = 339 current):
0.764 / 0.938 / 0.035 / 0.930 / 0.980; with ``named_apart`` for identifiers with a digit
(shipped) 0.767 / 0.944 / 0.029; with a fork rule besides (taken out: README there) 0.782 /
0.956 / 0.021. Session 9 (2026-11-25, p01-p41, n = 659 current, ``--per`` for each
question): the linear model 0.760 / 0.951 / 0.030 / 0.942 / 0.978; over the features and
their products (``revisions.model_inputs``, shipped) 0.763 / 0.964 / 0.023 / 0.942 / 0.977,
and on the folds of p34-p41 alone (n = 128) 0.766 / 0.938 / 0.047 -> 0.781 / 0.969 / 0.023.
Session 10 (p01-p45, n = 723 current): 0.766 / 0.959 / 0.028 / 0.938 / 0.979; with chain
evidence (``pipeline.by_chain_evidence``) 0.790 / 0.963 / 0.025 / 0.936 / 0.977 with middle
versions raised too, 0.788 / 0.963 / 0.025 / 0.936 / 0.978 as shipped (the newest only). ``--dump FILE`` writes
each question's judged list for ``present_ltr.py`` (``rank_replay.Recorder``). Session 14
(2026-11-28): ``--promote-at`` and ``--head-margin`` went with the rules they set
(``lethe_sql/present.py`` replaced them). Session 17: ``--folds 8`` fits one model per fold
of files instead of one per project (p01-p93: 8 fits, not 93).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rank_replay import Recorder, links_of  # noqa: E402
from revision_fit import FIT, REPO, conversation_pairs, fit, pairs, unannounced  # noqa: E402

from lethe_bench import updates as U  # noqa: E402
from lethe_sql import MemoryStore, revisions as R  # noqa: E402
from lethe_sql.db import transaction  # noqa: E402


def fold_groups(ids: list[str], folds: int) -> dict[str, object]:
    """A project id -> its fold: itself (``folds`` 0: leave one project out), or, with K
    folds, the i-th file of the update sets (in name order) goes to fold i mod K with all of
    its projects (projects written at once share a writer's habits)."""
    if not folds:
        return {p: p for p in ids}
    import json

    files = sorted((REPO / "bench" / "data" / "updates").glob("*.json"))
    of = {}
    for i, f in enumerate(files):
        for p in json.loads(f.read_text(encoding="utf-8")).get("projects", []):
            of[p["id"]] = i % folds
    return {p: of[p] for p in ids}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--projects", default=FIT)
    ap.add_argument("--link-at", type=float, default=R.LINK_AT)
    ap.add_argument("--per", help="write each question's scores here (JSON: id -> metrics)")
    ap.add_argument("--dump", help="write each question's judged list here, for present_ltr.py")
    ap.add_argument("--locomo", default=str(REPO.parent / "shared" / "data" / "locomo" / "locomo-dev7.json.gz"))
    ap.add_argument("--folds", type=int, default=0,
                    help="K folds by update-set file (the files' projects together) instead of one project each")
    a = ap.parse_args()
    from lethe_bench.runner import make_embedder

    emb = make_embedder(True, token_index=True)
    ids = a.projects.split(",")
    fold = {p: pairs([p], emb) for p in ids}
    C = conversation_pairs(Path(a.locomo), emb, sum(len(X) for X, _ in fold.values()))
    R.LINK_AT = a.link_at
    scores: dict[str, list[float]] = {}
    per: dict[str, dict] = {}
    rows: list[dict] = []
    group = fold_groups(ids, a.folds)
    fitted: dict[int, tuple] = {}
    with tempfile.TemporaryDirectory() as tmp, Recorder() as rec:
        for p in U.load(REPO / "bench" / "data" / "updates", ids):
            g = group[p.id]
            if g not in fitted:
                Xs = [fold[q][0] for q in fold if group[q] != g]
                ys = [fold[q][1] for q in fold if group[q] != g]
                n = sum(len(x) for x in Xs)
                fitted[g] = fit(*unannounced(np.concatenate(Xs + [C[:n]]),
                                             np.concatenate(ys + [np.zeros(min(n, len(C)))])))
            mu, sd, w, b = fitted[g]
            R._MEAN, R._SD, R._WEIGHTS, R._BIAS = tuple(mu), tuple(sd), tuple(w), float(b)
            root = Path(tmp) / p.id
            U.write_project(p, root)
            with MemoryStore(root, embedder=emb) as st:
                st.index()
                with transaction(st.con):
                    R.redetect(st.con, [])
                back = {v: k for k, v in U._ids(st, p).items()}
                links = links_of(st, back)
                for q in p.queries:
                    row = rec.search(st, p.id, q, back, links)
                    rows.append(row)
                    m = U._metrics(q, row["ranked"])
                    per[q["id"]] = {"kind": q["kind"], **m}
                    for k, v in m.items():
                        scores.setdefault(k, []).append(v)
            print(f"{p.id} done", file=sys.stderr)
    print(" ".join(f"{k} {np.mean(v):.3f} (n={len(v)})" for k, v in scores.items()))
    if a.per:
        import json

        Path(a.per).write_text(json.dumps(per, indent=0))
    if a.dump:
        import pickle

        with open(a.dump, "wb") as f:
            pickle.dump(rows, f)


if __name__ == "__main__":
    main()
