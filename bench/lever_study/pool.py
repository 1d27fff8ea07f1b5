"""Session 11: the judged pool's shape, re-run in numpy on the TUNE half (default).

    ../../.venv/bin/python pool.py tune A B C P100_150 P150_150
    QMODE=all QW=-1 ../../.venv/bin/python pool.py tune P100_100   # question cue variants

A: the session-10 default (first stage at depth 30, judge 30; when the best MaxSim is below
0.55, a second first stage at depth 100 and the judge over its top 100). B: one first stage
at depth 100, judge its top 30, the rest below 0.55. C (= P100_100, chosen): one first stage
at depth 100, the judge over all 100. P<depth>_<pool>: one first stage at that depth, the
judge over its top <pool>. Blend and cues as the product's defaults (question cue off unless
QW is set; QMODE end: text ends with '?', all: every sentence does). IDFP=p raises the
MaxSim IDF weights to the power p.
"""
import os, sys, datetime as dt
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent)); sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from full import *
import re
QW = float(os.environ.get('QW', '0')); QMODE = os.environ.get('QMODE', 'end')
SENT = re.compile(r"[^.!?]+[.!?]*")
def qonly(t):
    t = t.strip()
    if QMODE == 'end': return t.endswith('?')
    sents = [x.strip() for x in SENT.findall(t) if x.strip() and re.search(r"[A-Za-z]", x)]
    return bool(sents) and all(x.endswith('?') for x in sents)
ISQ = None
def blend(q, F, pool, ms):
    global ISQ
    if ISQ is None: ISQ = np.array([qonly(t) for t in texts], float)
    return (default_blend(q, F, pool, ms) + QW*ISQ[pool]) / 1.75
def rank(q, F, mode, thr=.55):
    if mode == 'A':
        pool = fs_full(q, 30, F)[:30]; ms = maxsim(D, q, pool)
        if ms.max() < thr: pool = fs_full(q, 100, F)[:100]; ms = maxsim(D, q, pool)
    elif mode == 'B':
        u = fs_full(q, 100, F); pool = u[:30]; ms = maxsim(D, q, pool)
        if ms.max() < thr: pool = u[:100]; ms = maxsim(D, q, pool)
    elif mode == 'C':
        pool = fs_full(q, 100, F)[:100]; ms = maxsim(D, q, pool)
    elif mode.startswith('P'):  # P<depth>_<pool>
        d, k = map(int, mode[1:].split('_'))
        pool = fs_full(q, d, F)[:k]; ms = maxsim(D, q, pool)
    elif mode == 'B50':
        u = fs_full(q, 100, F); pool = u[:50]; ms = maxsim(D, q, pool)
        if ms.max() < thr: pool = u[:100]; ms = maxsim(D, q, pool)
    s = blend(q, F, pool, ms)
    o = np.lexsort((pool, -s)); return list(pool[o])
half = sys.argv[1] if len(sys.argv) > 1 else 'tune'
qs = H[half]
IDFP = float(os.environ.get('IDFP', '1'))
if IDFP != 1:
    for q in qs: q['w'] = q['w'] ** IDFP
Fs = {q['qid']: F_of(q) for q in qs}
res = {}
for m in sys.argv[2:] or ['A', 'B', 'C']:
    res[m] = np.array([ndcg(rank(q, Fs[q['qid']], m), q['rel']) for q in qs])
    print(half, m, len(qs), round(res[m].mean(), 4), flush=True)
for m in res:
    if 'A' in res and m != 'A': print(m, 'vs A', compare(res['A'], res[m]) if True else '')
