import os
import pickle, re, numpy as np, datetime as dt, calendar
D = pickle.load(open(os.environ.get('LEVERS_DUMP', '/tmp/dev7.pkl'), 'rb'))
MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
MONTHS.update({m.lower(): i for i, m in enumerate(calendar.month_abbr) if m})
PAT = re.compile(r"\b(?:(\d{1,2})\s+)?(january|february|march|april|may|june|july|august|september|october|november|december|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)\b(?:\s+(\d{1,2}))?(?:,?\s+(\d{4}))?|\b(20\d\d|19\d\d)\b", re.I)
def period(text):
    for m in PAT.finditer(text):
        if m.group(5):
            y = int(m.group(5)); return dt.datetime(y,1,1), dt.datetime(y+1,1,1), True
        mon = MONTHS.get(m.group(2).lower()[:3] if m.group(2).lower() not in MONTHS else m.group(2).lower())
        day = m.group(1) or m.group(3); y = m.group(4)
        if y is None: return ('month', mon)
        y = int(y)
        if day:
            d0 = dt.datetime(y, mon, int(day)); return d0 - dt.timedelta(days=1), d0 + dt.timedelta(days=2), True
        d0 = dt.datetime(y, mon, 1); d1 = dt.datetime(y + (mon == 12), mon % 12 + 1, 1)
        return d0, d1, True
    return None
def feature(text, pool, slack_days=0):
    p = period(text)
    if p is None: return np.zeros(len(pool))
    dates = D['date'][pool]
    out = np.zeros(len(pool))
    for i, e in enumerate(dates):
        if np.isnan(e): continue
        d = dt.datetime.utcfromtimestamp(e)
        if p[0] == 'month':
            out[i] = d.month == p[1] or d.month == p[1] % 12 + 1 and d.day <= slack_days
        else:
            out[i] = p[0] <= d < p[1] + dt.timedelta(days=slack_days)
    return out
