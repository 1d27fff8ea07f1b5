import os
from ev import *
import pickle, re
from collections import Counter
tok = re.compile(r"[a-z0-9_]+")
class BM:
    def __init__(self, texts, norm=lambda t: t, stop=frozenset()):
        self.norm = norm; self.stop = stop
        self.vocab = {}; post = {}
        lens = np.zeros(len(texts))
        for d, tx in enumerate(texts):
            ts = [norm(t) for t in tok.findall(tx.lower()) if t not in stop]
            lens[d] = len(ts)
            for t, f in Counter(ts).items():
                post.setdefault(self.vocab.setdefault(t, len(self.vocab)), []).append((d, f))
        self.post = {t: (np.array([a for a, _ in p]), np.array([b for _, b in p], float)) for t, p in post.items()}
        self.n = len(texts); self.lens = lens; self.avg = lens.mean()
    def scores(self, q):
        s = np.zeros(self.n)
        nrm = 1.2 * (1 - .75 + .75 * self.lens / self.avg)
        for t in set(self.norm(t) for t in tok.findall(q.lower()) if t not in self.stop):
            v = self.vocab.get(t)
            if v is None: continue
            d, tf = self.post[v]; df = len(d)
            s[d] += np.log10((self.n - df + .5) / (df + .5) + 1) * tf * 2.2 / (tf + nrm[d])
        return s
D = load(os.environ.get('LEVERS_DUMP', '/tmp/dev7.pkl')); H = halves(D)
texts = D['texts']; ctxs = D['ctx']
ids = np.arange(D['n_entries'])

def topk(s, n):
    o = np.lexsort((ids, -np.round(s, 9)))
    return o[:n]

def fs_full(q, depth, F, w=(0,1,1), extra=None):
    b, c, d = F['bm25'], F['ctx'], F['cos']
    u = set(topk(b, depth)[b[topk(b, depth)] > 0]) | set(topk(c, depth)[c[topk(c, depth)] > 0]) | set(topk(d, depth))
    u = np.array(sorted(u))
    s = (w[0]*z(b[u]) + w[1]*z(c[u]) + w[2]*z(d[u])) / sum(abs(x) for x in w)
    if extra is not None: s = s + extra(u)
    o = np.lexsort((u, -np.round(s, 9)))
    return u[o]

def rank_full(q, F, blend_ctx=.5, thr=.55, fsw=(0,1,1), fextra=None, bextra=None, k_sh=30):
    u = fs_full(q, 30, F, fsw, fextra)
    pool = u[:k_sh]; ms = maxsim(D, q, pool)
    if ms.max() < thr:
        pool = fs_full(q, 100, F, fsw, fextra)[:100]; ms = maxsim(D, q, pool)
    s = (z(ms) + blend_ctx * z(F['ctx'][pool])) / (1 + blend_ctx)
    if bextra is not None: s = s + bextra(pool, ms)
    o = np.lexsort((pool, -s))
    return list(pool[o])

def feats(bmt, bmc, qs):
    out = {}
    for q in qs:
        out[q['qid']] = dict(bm25=bmt.scores(q['text']), ctx=bmc.scores(q['text']), cos=D['emb'] @ q['vec'])
    return out

# The product's query side of the first stage: stopwords dropped from the BM25 query
# (lethe_stopwords), both BM25 fields over all entries, cosine to every entry.
SW = frozenset("a an the and or but if of to in on at by for with from as is are was were be been being am do does did has have had having i me my we our you your he him his she her it its they them their what which who whom whose when where why how this that these those there here not no so than too very can could will would should may might must just about into over after before up down out off again then once all any both each few more most other some such only own same s t don now".split())
_BQ = []
def F_of(q):
    if not _BQ:
        _BQ.extend([BM(texts), BM(ctxs)])
    qq = ' '.join(t for t in tok.findall(q['text'].lower()) if t not in SW) or q['text']
    return dict(bm25=_BQ[0].scores(qq), ctx=_BQ[1].scores(qq), cos=D['emb'] @ q['vec'])

def default_blend(q, F, pool, ms):
    """The product's late-interaction blend over ``pool`` (Settings.blend_*: MaxSim 1, context
    BM25 .5, BM25 -.25, time cue 1.5, date cue 2), before dividing by the z weights' sum."""
    import datetime as dt
    from lethe_sql.cues import analyze, signals
    cu = analyze(q['text'])
    when = lambda c: None if np.isnan(D['date'][c]) else dt.datetime.utcfromtimestamp(D['date'][c])
    cue = np.array([1.5*s['time'] + 2.0*s['date'] for s in (signals(cu, texts[c], when(c)) for c in pool)])
    return z(ms) + .5*z(F['ctx'][pool]) - .25*z(F['bm25'][pool]) + cue
