"""Leave-one-project-out check of a revision-model feature set on the fit projects.

    .venv/bin/python bench/lever_study/revision_cv.py [--projects p01,...,p13] [--drop N ...]

For each fit project: fit (``revision_fit.fit``) on the other fit projects' candidate pairs
plus the LoCoMo tune conversations' pairs (negatives, as ``revision_fit`` does), then count,
at ``LINK_AT``, the held-out project's true and false links. Prints precision and recall summed
over the folds, with every feature, and with each feature named by ``--drop`` left out: a
feature earns its place when the folds it was not fitted on link better with it. Reads only
the fit projects (``revision_fit.FIT``), never the held-out set (dev-f).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from revision_fit import FIT, REPO, conversation_pairs, counts, fit, pairs, unannounced  # noqa: E402

from lethe_sql import revisions as R  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--projects", default=FIT)
    ap.add_argument("--drop", nargs="*", default=[], help="feature names to compare without")
    ap.add_argument("--locomo", default=str(REPO.parent / "shared" / "data" / "locomo" / "locomo-dev7.json.gz"))
    a = ap.parse_args()
    from lethe_bench.runner import make_embedder

    emb = make_embedder(True, token_index=True)
    per = {p: pairs([p], emb) for p in a.projects.split(",")}
    n = sum(len(X) for X, _ in per.values())
    C = conversation_pairs(Path(a.locomo), emb, n)
    sets = {"all": list(range(len(R.FEATURES)))}
    for name in a.drop:
        sets[f"without {name}"] = [i for i, f in enumerate(R.FEATURES) if f != name]
    for label, cols in sets.items():
        tp = fp = fn = 0
        for held in per:
            Xs = [per[p][0] for p in per if p != held] + [C]
            ys = [per[p][1] for p in per if p != held] + [np.zeros(len(C))]
            fx, fy = unannounced(np.concatenate(Xs), np.concatenate(ys))
            model = fit(fx[:, cols], fy)
            t, f, m = counts(per[held][0][:, cols], per[held][1], model)
            tp, fp, fn = tp + t, fp + f, fn + m
        print(f"{label}: held-out links {tp + fp}, precision {tp / max(tp + fp, 1):.3f}, "
              f"recall {tp / max(tp + fn, 1):.3f} (over {tp + fn} true pairs in the candidate lists)")


if __name__ == "__main__":
    main()
