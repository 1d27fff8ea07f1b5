from full import *
import itertools, sys
ALL = D['queries']
import os
QSTOP = os.environ.get('QSTOP') == '1'
F = feats(BM(texts), BM(ctxs), ALL)
n = D['n_entries']; sess = D['session']; pos = D['position']; E = D['emb']
from collections import defaultdict
bys = defaultdict(dict)
for i in range(n):
    bys[sess[i]][pos[i]] = i
nb = [[bys[sess[i]].get(pos[i]+d) for d in (-2,-1,1,2)] for i in range(n)]
V = np.zeros_like(E)
for i in range(n):
    v = E[i].copy()
    for j in nb[i]:
        if j is not None: v += E[j]
    V[i] = v / np.linalg.norm(v)
isq = np.array([t.rstrip().endswith('?') for t in texts], float)
ln = np.log1p(np.array([len(tok.findall(t)) for t in texts], float))
from lethe_sql.cues import states_time
hast = np.array([states_time(t) for t in texts], float)
S = sorted(set(sess)); si = {s: i for i, s in enumerate(S)}; e2s = np.array([si[s] for s in sess])
stexts = [''] * len(S)
for i, t in enumerate(texts): stexts[e2s[i]] += '\n' + t
bs = BM(stexts); bstop = BM(ctxs, stop=SW)
if QSTOP:  # the product's query side (full.F_of)
    for q in ALL:
        Fq = F_of(q); F[q['qid']]['bm25'] = Fq['bm25']; F[q['qid']]['ctx'] = Fq['ctx']
def msctx(q, pool, disc=0.7):
    qt = q['tok_vecs']; w = q['w']; out = []
    for c in pool:
        rows = [D['tvec'][D['tstart'][c]:D['tend'][c]]]
        best = (rows[0] @ qt.T).max(0) if len(rows[0]) else np.zeros(len(w))
        for j in nb[c]:
            if j is None: continue
            r = D['tvec'][D['tstart'][j]:D['tend'][j]]
            if len(r): best = np.maximum(best, disc * (r @ qt.T).max(0))
        out.append(best @ w / w.sum())
    return np.array(out)
NAMES = ['ms', 'ctx', 'bm25', 'cos', 'ccos', 'sbm', 'isq', 'len', 'time', 'msctx', 'fs', 'ctxstop']
def build(q):
    Fq = F[q['qid']]
    pool = fs_full(q, 100, Fq)[:100]
    wq = bool(re.match(r"\s*(when|how long|what (year|month|day|date|time))\b", q['text'], re.I))
    ms = maxsim(D, q, pool)
    cols = [z(ms), z(Fq['ctx'][pool]), z(Fq['bm25'][pool]), z(Fq['cos'][pool]), z(V[pool] @ q['vec']),
            z(bs.scores(q['text'])[e2s][pool]), isq[pool], ln[pool], hast[pool] * wq, z(msctx(q, pool)),
            -np.log(np.arange(1, len(pool)+1)), z(bstop.scores(q['text'])[pool])]
    X = np.stack(cols, 1)
    y = np.array([q['rel'].get(c, 0) for c in pool], float)
    return dict(X=X, y=y, pool=pool, nrel=len(q['rel']), shallow=ms[:30].max() if len(ms) else 0)
P = {q['qid']: build(q) for q in ALL}
pickle.dump(P, open(os.environ.get('LEVERS_FEATURES', '/tmp/ltrPq.pkl' if QSTOP else '/tmp/ltrP.pkl'), 'wb'))
