import os
import pickle, numpy as np, sys
sys.path.insert(0, str(__import__('pathlib').Path(__file__).resolve().parents[2]))
from lethe_bench.locomo import split_conversations
P = pickle.load(open(os.environ.get('LEVERS_FEATURES', '/tmp/ltrPq.pkl'), 'rb'))
NAMES = ['ms', 'ctx', 'bm25', 'cos', 'ccos', 'sbm', 'isq', 'len', 'time', 'msctx', 'fs', 'ctxstop']
disc = 1 / np.log2(np.arange(2, 12))
def nd(p, w, thr=0.55):
    k = 30 if p['shallow'] >= thr else 100
    s = p['X'][:k] @ w; y = p['y'][:k]
    o = np.argsort(-s, kind='stable')[:10]
    idcg = disc[:min(p['nrel'], 10)].sum()
    return (y[o] * disc[:len(o)]).sum() / idcg
def score(qids, w): return np.mean([nd(P[q], w) for q in qids])
def ca(qids, w0, feats, grid=np.array([-1, -.5, -.25, -.1, 0, .1, .25, .5, 1, 1.5, 2]), rounds=3):
    w = w0.copy(); best = score(qids, w)
    for _ in range(rounds):
        for f in feats:
            j = NAMES.index(f)
            for g in grid:
                w2 = w.copy(); w2[j] = g
                s = score(qids, w2)
                if s > best + 1e-4: best, w = s, w2
    return w, best
cids = sorted({q.split(':')[0] for q in P})
sp = split_conversations(cids, 0)
tune = [q for q in P if q.split(':')[0] in sp['tune']]
base = np.zeros(len(NAMES)); base[0] = 1; base[1] = .5
print('base tune', round(score(tune, base), 4))
feats = [f for f in NAMES if f != 'ms']
# in-sample on tune
w, b = ca(tune, base, feats); print('in-sample tune', round(b, 4), dict(zip(NAMES, w)))
# 2-fold CV by conversation within tune
tc = sp['tune']
for fold in ([tc[:2], tc[2:]], [tc[2:], tc[:2]], [tc[::2], tc[1::2]], [tc[1::2], tc[::2]]):
    tr = [q for q in tune if q.split(':')[0] in fold[0]]; te = [q for q in tune if q.split(':')[0] in fold[1]]
    w, b = ca(tr, base, feats)
    print('train', fold[0], round(b, 4), 'test', fold[1], 'base', round(score(te, base), 4), '->', round(score(te, w), 4))
