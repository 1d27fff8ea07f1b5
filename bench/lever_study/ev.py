import pickle, numpy as np, sys, random
sys.path.insert(0, str(__import__('pathlib').Path(__file__).resolve().parents[2]))
from lethe_bench.locomo import split_conversations
from lethe_bench.stats import compare

def z(x):
    x = np.asarray(x, float)
    if len(x) < 2: return np.zeros_like(x)
    sd = x.std()
    return (x - x.mean()) / sd if sd > 1e-12 else np.zeros_like(x)

def load(p):
    D = pickle.load(open(p, 'rb'))
    tid = D['tid']; starts = np.r_[0, np.flatnonzero(np.diff(tid)) + 1]
    D['tstart'] = np.full(D['n_entries'] + 1, len(tid)); 
    D['tstart'][tid[starts]] = starts
    # fill ends
    ends = np.r_[starts[1:], len(tid)]
    D['tend'] = np.zeros(D['n_entries'], int); D['tend'][tid[starts]] = ends
    D['tstart'] = D['tstart'][:-1]
    D['tvec'] = D['tvec'].astype(np.float32)
    for q in D['queries']:
        q['pos'] = {c: k for k, c in enumerate(q['cand'])}
    return D

def maxsim(D, q, cidx, w=None, qv=None):
    if 'ms' not in q:
        q['ms'] = {}
    out = np.zeros(len(cidx))
    need = [c for c in cidx if c not in q['ms']]
    if need:
        qt = q['tok_vecs']; ww = q['w'] if w is None else w
        for c in need:
            s, e = D['tstart'][c], D['tend'][c]
            if e <= s: q['ms'][c] = 0.0; continue
            sims = D['tvec'][s:e] @ qt.T
            q['ms'][c] = float(sims.max(0) @ ww / ww.sum())
    return np.array([q['ms'][c] for c in cidx])

def ndcg(rank, rel, k=10):
    g = [rel.get(c, 0) for c in rank[:k]]
    dcg = sum(x / np.log2(i + 2) for i, x in enumerate(g))
    ideal = sorted(rel.values(), reverse=True)[:k]
    idcg = sum(x / np.log2(i + 2) for i, x in enumerate(ideal))
    return dcg / idcg if idcg else 0.0

def topn(q, f, n):
    v = q['feats'][f]; o = np.lexsort((q['cand'], -v)); return set(q['cand'][o[:n]])

def first_stage(q, depth=30, w=(0, 1, 1), extra=None):
    u = topn(q, 'bm25', depth) | topn(q, 'ctx', depth) | topn(q, 'cos', depth)
    u = np.array(sorted(u))
    ix = np.array([q['pos'][c] for c in u])
    s = (w[0] * z(q['feats']['bm25'][ix]) + w[1] * z(q['feats']['ctx'][ix]) + w[2] * z(q['feats']['cos'][ix])) / sum(abs(x) for x in w)
    if extra is not None:
        s = s + extra(q, u, ix)
    o = np.lexsort((u, -np.round(s, 9)))
    return u[o], ix[o]

def default_rank(D, q, blend_ctx=0.5, k_sh=30, k_deep=100, thr=0.55, final_extra=None, fs=None):
    fs = fs or first_stage
    u, ix = fs(q, 30)
    pool = u[:k_sh]; pix = ix[:k_sh]
    ms = maxsim(D, q, pool)
    if ms.max() < thr:
        u, ix = fs(q, k_deep)
        pool = u[:k_deep]; pix = ix[:k_deep]
        ms = maxsim(D, q, pool)
    s = (z(ms) + blend_ctx * z(q['feats']['ctx'][pix])) / (1 + blend_ctx)
    if final_extra is not None:
        s = s + final_extra(D, q, pool, pix, ms)
    o = np.lexsort((pool, -s))
    return list(pool[o])

def halves(D, ids_all=None):
    cids = sorted({q['qid'].split(':')[0] for q in D['queries']})
    sp = split_conversations(cids, 0)
    return {h: [q for q in D['queries'] if q['qid'].split(':')[0] in sp[h]] for h in sp}

def evaluate(D, fn, qs):
    return np.array([ndcg(fn(q), q['rel']) for q in qs])
