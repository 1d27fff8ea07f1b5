"""Session 11: the blend weights re-fitted for the 100-entry pool, TUNE half only: a grid
over (context BM25, BM25, cosine, time cue, date cue) with MaxSim at 1, in-sample and as
the mean test gain over the six 2-vs-2 splits of the four tune conversations.

    ../../.venv/bin/python reweight.py
"""
import os, sys, itertools, datetime as dt
from pathlib import Path
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE)); sys.path.insert(0, str(HERE.parents[1]))
exec(open(HERE / 'pool.py').read().split("half = sys.argv[1]")[0])
from lethe_sql.cues import analyze, signals
qs = H['tune']
rows = []
for q in qs:
    F = F_of(q); pool = fs_full(q, 100, F)[:100]; ms = maxsim(D, q, pool)
    cu = analyze(q['text'])
    sig = [signals(cu, texts[c], None if np.isnan(D['date'][c]) else dt.datetime.utcfromtimestamp(D['date'][c])) for c in pool]
    X = np.stack([z(ms), z(F['ctx'][pool]), z(F['bm25'][pool]), z(F['cos'][pool]),
                  np.array([s['time'] for s in sig]), np.array([s['date'] for s in sig])], 1)
    y = np.array([q['rel'].get(c, 0) for c in pool], float)
    rows.append((q['qid'].split(':')[0], X, y, pool, q['rel']))
disc = 1 / np.log2(np.arange(2, 12))
def nd(X, y, pool, rel, w):
    s = (X[:, :4] @ w[:4] + X[:, 4:] @ w[4:]) / np.abs(w[:4]).sum()
    o = np.lexsort((pool, -s))[:10]
    ideal = sorted(rel.values(), reverse=True)[:10]
    idcg = sum(x * disc[i] for i, x in enumerate(ideal))
    return (y[o] * disc[:len(o)]).sum() / idcg
def score(sel, w): return np.mean([nd(X, y, p, r, w) for c, X, y, p, r in rows if c in sel])
convs = sorted({r[0] for r in rows})
base = np.array([1, .5, -.25, 0, 1.5, 2.0])
print('base', round(score(convs, base), 4))
grid = dict(ctx=[.25, .5, .75, 1.0], bm25=[-.5, -.25, 0], cos=[0, .25, .5], time=[1, 1.5, 2], date=[1.5, 2, 3])
combos = [np.array([1, a, b, c, d, e]) for a, b, c, d, e in itertools.product(*grid.values())]
def best(sel):
    sc = [score(sel, w) for w in combos]; i = int(np.argmax(sc)); return combos[i], sc[i]
w, b = best(convs); print('in-sample best', w, round(b, 4))
gains = []
for tr in itertools.combinations(convs, 2):
    te = [c for c in convs if c not in tr]
    w2, _ = best(list(tr)); g = score(te, w2) - score(te, base); gains.append(g)
    print(tr, w2, 'test gain', round(g, 4))
print('CV gain mean', round(np.mean(gains), 4))
