"""Session 11: dense pseudo-relevance feedback (Rocchio on the query vector from the top k
of the first stage, or of the judged order), TUNE half only. Dropped: -.0005 to -.0025.

    ../../.venv/bin/python prf.py
"""
import os, sys
from pathlib import Path
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE)); sys.path.insert(0, str(HERE.parents[1]))
exec(open(HERE / 'pool.py').read().split("half = sys.argv[1]")[0])
qs = H['tune']
E = D['emb']
def run(q, k, a, judged):
    F = F_of(q)
    u = fs_full(q, 100, F)
    if a:
        top = u[:k] if not judged else None
        if judged:
            pool = u[:100]; ms = maxsim(D, q, pool); s = blend(q, F, pool, ms); top = pool[np.argsort(-s)[:k]]
        v = q['vec'] + a * E[top].mean(0); v /= np.linalg.norm(v)
        F = dict(F); F['cos'] = E @ v
        u = fs_full(q, 100, F)
    pool = u[:100]; ms = maxsim(D, q, pool)
    s = blend(q, F, pool, ms); o = np.lexsort((pool, -s)); return list(pool[o])
base = np.array([ndcg(run(q, 0, 0, False), q['rel']) for q in qs]); print('base', base.mean().round(4))
for k, a, j in [(3, .5, False), (5, .5, False), (3, 1, False), (3, .5, True), (5, 1, True)]:
    r = np.array([ndcg(run(q, k, a, j), q['rel']) for q in qs]); print(k, a, j, r.mean().round(4), compare(base, r))
