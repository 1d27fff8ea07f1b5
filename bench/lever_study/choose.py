import os, warnings; warnings.filterwarnings('ignore')
src = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'ca.py')).read().split("print('base tune'")[0]
exec(src)
from datef import feature, D as DD, period
qtext = {q['qid']: q['text'] for q in DD['queries']}
slack = int(os.environ.get('SLACK', '0'))
for q, p in P.items():
    p['X'] = np.c_[p['X'], feature(qtext[q], p['pool'], slack)]
NAMES.append('date')
print('queries with a period', sum(period(qtext[q]) is not None for q in tune), 'of', len(tune))
base = np.zeros(len(NAMES)); base[0] = 1; base[1] = .5
print('base', round(score(tune, base), 4))
for feats in (['date'], ['time'], ['isq'], ['time', 'isq', 'bm25'], ['time', 'isq', 'bm25', 'ccos'], ['time', 'isq', 'bm25', 'date'], ['time', 'isq', 'bm25', 'ccos', 'date']):
    w, b = ca(tune, base, feats)
    cv = []
    tc = sp['tune']
    for fold in ([tc[:2], tc[2:]], [tc[2:], tc[:2]], [tc[::2], tc[1::2]], [tc[1::2], tc[::2]]):
        tr = [q for q in tune if q.split(':')[0] in fold[0]]; te = [q for q in tune if q.split(':')[0] in fold[1]]
        w2, _ = ca(tr, base, feats)
        cv.append(score(te, w2) - score(te, base))
    print(feats, 'in-sample', round(b, 4), {f: w[NAMES.index(f)] for f in feats}, 'CV gain', np.round(cv, 4), round(np.mean(cv), 4))
