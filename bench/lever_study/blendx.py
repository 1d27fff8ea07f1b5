"""Session 12: extra blend terms over the default (pool C), on the TUNE half.

    ../../.venv/bin/python blendx.py tune len:-0.25 len:0.25 dense:0.25 dense:-0.25 nbr:0.25 nbr:0.5 rankms:0.3

len: z(log token count); dense: z(cosine); nbr: z(best MaxSim of the session neighbours at
position +-1 in the pool); rankms: -log(1 + MaxSim rank). Each is added to the default blend
with the given weight. None helped (best +.0006, p = .88): the blend was left as it is.
"""
import os, sys, datetime as dt
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent)); sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from full import *
LOGLEN = np.log1p(D['tend'] - D['tstart']).astype(float)
SESS = D['session']; POS = D['position']
def nbr_ms(pool, ms):
    # best MaxSim among the entry's session neighbours (position +-1) that are in the pool
    where = {(SESS[c], POS[c]): m for c, m in zip(pool, ms)}
    return np.array([max(where.get((SESS[c], POS[c]-1), -1), where.get((SESS[c], POS[c]+1), -1)) for c in pool])
def rank(q, F, variant, x):
    pool = fs_full(q, 100, F)[:100]; ms = maxsim(D, q, pool)
    s = default_blend(q, F, pool, ms)
    if variant == 'len': s = s + x * z(LOGLEN[pool])
    elif variant == 'dense': s = s + x * z(F['cos'][pool])
    elif variant == 'nbr':
        nb = nbr_ms(pool, ms); nb = np.where(nb < 0, ms, nb); s = s + x * z(nb)
    elif variant == 'rankms':  # rank-based judge term in place of z
        r = np.argsort(np.argsort(-ms)); s = s + x * (-np.log1p(r))
    o = np.lexsort((pool, -s)); return list(pool[o])
half = sys.argv[1] if len(sys.argv) > 1 else 'tune'
qs = H[half]
Fs = {q['qid']: F_of(q) for q in qs}
base_res = np.array([ndcg(rank(q, Fs[q['qid']], 'none', 0), q['rel']) for q in qs])
print(half, 'base', round(base_res.mean(), 4), flush=True)
for spec in sys.argv[2:]:
    v, x = spec.split(':'); x = float(x)
    r = np.array([ndcg(rank(q, Fs[q['qid']], v, x), q['rel']) for q in qs])
    print(spec, round(r.mean(), 4), compare(base_res, r), flush=True)
