"""The learning update after a judged search: what a search teaches the index.

Rules (issue 4; all constants are ``Settings`` fields):

* losers (pool entries that did not make the final top-k):
  ``strength = max(0, judge_rank - pool_rank) / pool_size * sigmoid(-logit)``,
  ``s = min(s_decayed + rate * strength, max_s)``;
* winners: ``s = max(0, s_decayed - reinforce)``; affinity moves by ``lethe_affinity_after``
  (``sql/lifecycle.sql``: ``0.8 a + 0.2 sigmoid(logit)``),
  one more retrieval, tiers naive -> gc (3 retrievals) -> memory (affinity >= 0.65 and
  5 retrievals): ``tier_after``;
* any entry with affinity < 0.15 idle for more than 1000 steps becomes apoptotic;
* the query embedding is logged with its cue; k-means over the log is refit when it
  holds at least 10 x n_clusters queries and has grown by ``refit_growth`` since the
  last fit. Suppression learned under old clusters moves to the nearest new centroid
  (the global cue of the time before the first fit, to every new cluster).

``s_decayed = s * exp(-lambda * (step - last_step))``.

One search's update is an ``Update``; ``apply`` records a list of them in order, each as
its own search step, with the statements of the whole run batched (one transaction and
one statement per table for all of them, split only where the query clusters refit), so
applying 16 updates costs about what applying one does. The result is the one applying
them one by one gives (``tests/test_learning.py`` pins it).

When an update is applied:

* a writer's search (``MemoryStore.search`` on a read-write store) queues it in the store
  and applies the queue every ``WRITER_BATCH`` searches, before the store closes, and on
  ``MemoryStore.flush_learning()``; so what search i teaches reaches the ranking by search
  i + ``WRITER_BATCH`` at the latest, and a process killed before it closes loses at most
  that many updates (learning only: never a memory);
* a search that holds only a read lock (``lethe search``: many run at once beside one
  writer) cannot write: ``record_pending`` appends its update to
  ``.lethe/index/learning.pending.jsonl`` (one line, one ``write``; the query scrubbed of
  secrets; file mode 0600), and the next process that opens the index for writing applies
  every pending update in order (``apply_pending``), with its cue computed then. So
  learning is deferred, never lost; at most ``PENDING_MAX`` updates wait (older ones are
  dropped with the file's tail kept);
* ``pipeline.run`` without a store applies it at once (the benchmarks' prequential runs).
"""

from __future__ import annotations

import json
import math
from typing import NamedTuple, Sequence

import numpy as np

from .db import transaction
from .judges import ids_literal, sigmoid
from .privacy import scrub
from .settings import meta_rows
from .vectors import vec_literal, vecs_literal

APOPTOSIS_AFFINITY = 0.15
APOPTOSIS_IDLE = 1000
PENDING = "learning.pending.jsonl"
PENDING_MAX = 5000
#: a read-write store applies its searches' updates in runs of this many (module docstring)
WRITER_BATCH = 16


class Update(NamedTuple):
    """One search's learning update. ``outcome`` rows: (id, pool_rank, judge_rank, logit,
    winner) over the shallow pool; empty when no judge ran (then only the log and step move).
    ``cue``: the query cluster the search ran under (None: computed when applied); kept
    until the clusters refit."""

    query: str
    qvec: np.ndarray
    judge: str | None
    outcome: Sequence[tuple[str, int, int | None, float, bool]]
    rif: bool
    cue: int | None = None


def current_step(con) -> int:
    row = con.execute("SELECT value FROM meta WHERE key = 'search_step'").fetchone()
    return int(row[0]) if row else 0


def cue_of(con, vec) -> int:
    return int(con.execute("SELECT lethe_cue(?)", [vec_literal(vec)]).fetchone()[0])


def cues_of(con, vecs) -> list[int]:
    """``lethe_cue`` of each vector, in one statement (a search's own: ``cue_of``, 1.6 ms;
    this form costs 5 ms for one vector, 8 for sixteen)."""
    if not len(vecs):
        return []
    rows = con.execute(
        """SELECT i, lethe_cue(v)
           FROM (SELECT unnest(CAST($vs AS FLOAT[384][])) AS v, unnest(range(1, $n + 1)) AS i)""",
        {"vs": vecs_literal(np.stack([np.asarray(x, dtype=np.float32) for x in vecs])), "n": len(vecs)},
    ).fetchall()
    return [int(c) for _, c in sorted(rows)]


def _floats_literal(xs) -> str:
    """DOUBLE[] as text; repr round-trips every finite double exactly."""
    out = []
    for x in xs:
        x = float(x)
        if not math.isfinite(x):
            raise ValueError(f"not a finite number: {x!r}")
        out.append(repr(x))
    return "[" + ",".join(out) + "]"


def _ints_literal(xs) -> str:
    return "[" + ",".join(str(int(x)) for x in xs) + "]"


def tier_after(tier: str, affinity: float, retrievals: int) -> str:
    """A winner's tier after a retrieval, from its new affinity and retrieval count."""
    if tier in ("naive", "gc") and affinity >= 0.65 and retrievals >= 5:
        return "memory"
    if tier == "naive" and retrievals >= 3:
        return "gc"
    return tier


def _refit_due(n_logged: int, last_fit: int, settings) -> bool:
    return n_logged >= 10 * settings.n_clusters and not (last_fit and n_logged < settings.refit_growth * last_fit)


def apply(con, settings, updates: Sequence[Update], *, seed: int = 0) -> int:
    """Record ``updates`` in order, each as one search step (see the module docstring), each
    under its own ``cue`` until the clusters refit, under its cue computed then after.
    Returns the last step."""
    ups = list(updates)
    if not ups:
        return current_step(con)
    i = 0
    while i < len(ups):
        meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
        logged = con.execute("SELECT count(*) FROM query_log").fetchone()[0]
        last_fit = int(meta.get("rif_fit_queries") or 0)
        end, refit_then = len(ups), False
        for j in range(i, len(ups)):  # the first update after which the clusters refit
            if ups[j].rif and settings.rif and _refit_due(logged + j - i + 1, last_fit, settings):
                end, refit_then = j + 1, True
                break
        run = ups[i:end]
        rif_at = [k for k, u in enumerate(run) if u.rif and settings.rif]
        todo = [k for k in rif_at if i > 0 or run[k].cue is None]  # i > 0: the clusters refit since
        computed = dict(zip(todo, cues_of(con, [run[k].qvec for k in todo])))
        run_cues = [computed.get(k, run[k].cue) if k in rif_at else 0 for k in range(len(run))]
        step = _apply_run(con, settings, run, run_cues, meta)
        if refit_then:
            refit(con, settings.n_clusters, step, seed)
        i = end
    return step


def _apply_run(con, settings, run: list[Update], cues: list[int], meta: dict) -> int:
    """One transaction for ``run`` (no refit inside it); returns its last step."""
    step0 = int(meta.get("search_step") or 0)
    steps = [step0 + 1 + k for k in range(len(run))]
    named = sorted({o[0] for u in run for o in u.outcome})
    live = {x for (x,) in con.execute(
        "SELECT id FROM entries WHERE list_contains(CAST(? AS VARCHAR[]), id)", [ids_literal(named)]
    ).fetchall()} if named else set()
    outcomes = [[o for o in u.outcome if o[0] in live] for u in run]  # forgotten since: left out
    with transaction(con):
        con.execute(
            """INSERT INTO query_log (step, query, embedding, cluster, judge)
               SELECT unnest(CAST($steps AS BIGINT[])), unnest(from_json($queries, '["VARCHAR"]')),
                      unnest(CAST($vecs AS FLOAT[384][])), unnest(CAST($cues AS INTEGER[])),
                      unnest(from_json($judges, '["VARCHAR"]'))""",
            {"steps": _ints_literal(steps), "cues": _ints_literal(cues),
             "queries": json.dumps([scrub(u.query).text for u in run]),  # the log keeps no secret (privacy.py)
             "judges": json.dumps([u.judge for u in run]),
             "vecs": vecs_literal(np.stack([np.asarray(u.qvec, dtype=np.float32).reshape(-1) for u in run]))},
        )
        con.execute("UPDATE meta SET value = ? WHERE key = 'search_step'", [str(steps[-1])])
        # the settings the store learns under, written when they changed (an INSERT OR
        # REPLACE costs 1.8 ms at 10,000 entries even when it changes nothing)
        changed = [[k, v] for k, v in meta_rows(settings) if meta.get(k) != v]
        if changed:
            con.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", changed)
        if settings.rif:
            _suppression(con, settings, [(t, c, rows) for t, c, rows, u in zip(steps, cues, outcomes, run)
                                         if rows and u.rif])
        if settings.lifecycle:
            _lifecycle(con, steps, outcomes)
            # Nothing can have idled past APOPTOSIS_IDLE before that many steps; idling only
            # grows, so checking at the last step is checking at every step (winners aside,
            # whose steps _lifecycle walks).
            if steps[-1] > APOPTOSIS_IDLE:
                con.execute(
                    """UPDATE entries SET tier = 'apoptotic'
                       WHERE tier <> 'apoptotic' AND affinity < $a
                         AND $step - coalesce(last_retrieval_step, 0) > $idle""",
                    {"a": APOPTOSIS_AFFINITY, "step": steps[-1], "idle": APOPTOSIS_IDLE},
                )
    return steps[-1]


def _increments(rows, settings) -> dict[str, float | None]:
    """One search's suppression changes: id -> a loser's increment, None for a winner."""
    n = len(rows)
    touched: dict[str, float | None] = {}
    for eid, pool_rank, judge_rank, logit, winner in rows:
        if winner:
            touched[eid] = None
            continue
        if judge_rank is None or pool_rank is None:  # unranked: no strength (NULL in SQL terms)
            continue
        strength = max(0, judge_rank - pool_rank) / float(n) * sigmoid(-logit)
        if strength > 0:
            touched[eid] = min(settings.rif_rate * strength, settings.rif_max)
    return touched


def _suppression(con, settings, searches: list[tuple[int, int, list]]) -> None:
    """Losers: ``s = min(s_decayed + min(rate * strength, max_s), max_s)`` where strength > 0;
    winners with a row: ``s = max(0, s_decayed - reinforce)``; rows left at s <= 1e-9 go.
    The rows touched are read back by the ``DELETE ... RETURNING`` that clears them, the
    arithmetic done here search by search, and what remains written in one ``INSERT``."""
    changes = [(step, cue, _increments(rows, settings)) for step, cue, rows in searches]
    keys = sorted({(cue, eid) for _, cue, touched in changes for eid in touched})
    if not keys:
        return
    ids_literal([eid for _, eid in keys])  # refuses anything but an entry id
    state = {
        (int(c), eid): (s, last)
        for c, eid, s, last in con.execute(
            """DELETE FROM rif_suppression
               WHERE list_contains(CAST($keys AS VARCHAR[]), CAST(cluster AS VARCHAR) || '-' || id)
               RETURNING cluster, id, s, last_step""",
            {"keys": "[" + ",".join(f"{int(c)}-{eid}" for c, eid in keys) + "]"},
        ).fetchall()
    }
    lam = settings.rif_lambda
    for step, cue, touched in changes:
        for eid, inc in touched.items():
            prev = state.get((cue, eid))
            decayed = prev[0] * math.exp(-lam * (step - prev[1])) if prev is not None else None
            if inc is None:  # a winner: reinforced, only where something was held against it
                if decayed is None:
                    continue
                s = max(0.0, decayed - settings.rif_reinforce)
            else:
                s = inc if decayed is None else min(decayed + inc, settings.rif_max)
            if s > 1e-9:
                state[(cue, eid)] = (s, step)
            else:
                state.pop((cue, eid), None)
    kept = [(k, state[k]) for k in keys if k in state]
    if kept:
        con.execute(
            """INSERT INTO rif_suppression (cluster, id, s, last_step)
               SELECT unnest(CAST($cues AS INTEGER[])), unnest(CAST($ids AS VARCHAR[])),
                      unnest(CAST($s AS DOUBLE[])), unnest(CAST($steps AS BIGINT[]))""",
            {"cues": _ints_literal(k[0] for k, _ in kept), "ids": ids_literal([k[1] for k, _ in kept]),
             "s": _floats_literal(v[0] for _, v in kept), "steps": _ints_literal(v[1] for _, v in kept)},
        )


def _lifecycle(con, steps: list[int], outcomes: list[list]) -> None:
    """Winners: affinity (``lethe_affinity_after``, applied in SQL over each winner's
    retrievals in order), retrieval count, last retrieval step and tier (``tier_after``),
    with the apoptosis check after every step, as one search at a time would leave them."""
    events: dict[str, list[tuple[int, float]]] = {}  # id -> (step, sigmoid(logit)) in order
    for step, rows in zip(steps, outcomes):
        for o in rows:
            if o[4]:
                events.setdefault(o[0], []).append((step, sigmoid(float(o[3]))))
    if not events:
        return
    ids = sorted(events)
    rows = con.execute(
        """SELECT e.id, e.affinity, e.retrieval_count, e.last_retrieval_step, e.tier,
                  list_transform(range(1, len(w.sig) + 1),
                                 i -> list_reduce(list_prepend(e.affinity, w.sig[1:i]),
                                                  (a, x) -> lethe_affinity_after(a, x))) AS after
           FROM entries AS e
           JOIN (SELECT unnest(CAST($ids AS VARCHAR[])) AS id, unnest(CAST($sig AS DOUBLE[][])) AS sig) AS w
             ON w.id = e.id""",
        {"ids": ids_literal(ids), "sig": "[" + ",".join(_floats_literal(s for _, s in events[i]) for i in ids) + "]"},
    ).fetchall()
    out = []
    for eid, affinity, count, last, tier, after in rows:
        at = {step: k for k, (step, _) in enumerate(events[eid])}
        for step in steps:
            if step in at:
                affinity = after[at[step]]
                count += 1
                last = step
                tier = tier_after(tier, affinity, count)
            if (step > APOPTOSIS_IDLE and tier != "apoptotic"
                    and affinity < APOPTOSIS_AFFINITY and step - (last or 0) > APOPTOSIS_IDLE):
                tier = "apoptotic"
        out.append((eid, affinity, count, last, tier))
    con.execute(
        """UPDATE entries SET affinity = w.affinity, retrieval_count = w.n, last_retrieval_step = w.last, tier = w.tier
           FROM (SELECT unnest(CAST($ids AS VARCHAR[])) AS id, unnest(CAST($aff AS DOUBLE[])) AS affinity,
                        unnest(CAST($n AS INTEGER[])) AS n, unnest(CAST($last AS BIGINT[])) AS last,
                        unnest(from_json($tier, '["VARCHAR"]')) AS tier) AS w
           WHERE entries.id = w.id""",
        {"ids": ids_literal([r[0] for r in out]), "aff": _floats_literal(r[1] for r in out),
         "n": _ints_literal(r[2] for r in out), "last": _ints_literal(r[3] for r in out),
         "tier": json.dumps([r[4] for r in out])},
    )


def record_pending(index_dir, u: Update) -> None:
    """Append one search's learning update to the pending file (see the module docstring;
    its cue is computed again when it is applied: the clusters may refit meanwhile)."""
    import os
    from pathlib import Path

    line = json.dumps({"query": scrub(u.query).text, "qvec": [round(float(x), 7) for x in u.qvec], "judge": u.judge,
                       "outcome": [[str(i), int(p), int(j) if j is not None else None, float(lg), bool(w)]
                                   for i, p, j, lg, w in u.outcome],
                       "rif": bool(u.rif)}, separators=(",", ":")) + "\n"
    path = Path(index_dir) / PENDING
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _pending_update(r) -> Update | None:
    """A line of the pending file as an ``Update``; None when it is not one."""
    from lethe_sql.udfs.embed import EMBED_DIM

    try:
        qvec = np.asarray(r["qvec"], dtype=np.float32)
        if qvec.shape != (EMBED_DIM,) or not np.isfinite(qvec).all():
            return None
        outcome = []
        for o in r.get("outcome") or []:
            eid, pool_rank, judge_rank, logit, winner = o
            ids_literal([eid])
            if not math.isfinite(float(logit)):
                return None
            outcome.append((eid, int(pool_rank), None if judge_rank is None else int(judge_rank),
                            float(logit), bool(winner)))
        judge = r.get("judge")
        return Update(str(r["query"]), qvec, judge if isinstance(judge, str) else None, outcome, bool(r.get("rif")))
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def apply_pending(con, settings, index_dir) -> int:
    """Apply the pending updates (the caller holds the write lock); returns how many."""
    import os
    from pathlib import Path

    path = Path(index_dir) / PENDING
    if not path.exists():
        return 0
    work = path.with_name(PENDING + ".applying")
    if not work.exists():
        os.replace(path, work)  # new searches start a new file meanwhile
    ups = []
    with open(work, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                u = _pending_update(json.loads(line))
            except ValueError:
                continue  # a torn line (a crash mid-write): that update is lost, nothing else
            if u is not None:
                ups.append(u)
    ups = ups[-PENDING_MAX:]
    for k in range(0, len(ups), 500):  # bounded transactions
        apply(con, settings, ups[k:k + 500])
    work.unlink(missing_ok=True)
    return len(ups)


def kmeans(x: np.ndarray, k: int, seed: int = 0, iters: int = 25) -> tuple[np.ndarray, np.ndarray]:
    """Spherical k-means (k-means++ seeding) on L2-normalised rows: (centroids, labels)."""
    rng = np.random.default_rng(seed)
    n = len(x)
    k = min(k, n)
    centers = [x[rng.integers(n)]]
    d2 = np.full(n, np.inf)
    for _ in range(1, k):
        d2 = np.minimum(d2, 2 - 2 * x @ centers[-1])
        p = np.clip(d2, 0, None)
        centers.append(x[rng.choice(n, p=p / p.sum())] if p.sum() > 0 else x[rng.integers(n)])
    c = np.stack(centers)
    labels = np.zeros(n, dtype=np.int64)
    for _ in range(iters):
        new = np.argmax(x @ c.T, axis=1)
        if _ and np.array_equal(new, labels):
            break
        labels = new
        for j in range(k):
            members = x[labels == j]
            if len(members):
                m = members.sum(axis=0)
                c[j] = m / max(np.linalg.norm(m), 1e-12)
    return c.astype(np.float32), labels


def maybe_refit(con, settings, step: int, seed: int = 0) -> bool:
    """Refit the query clusters when the policy says so; returns whether it did."""
    n = con.execute("SELECT count(*) FROM query_log").fetchone()[0]
    meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
    if not _refit_due(n, int(meta.get("rif_fit_queries") or 0), settings):
        return False
    refit(con, settings.n_clusters, step, seed)
    return True


def refit(con, n_clusters: int, step: int, seed: int = 0) -> None:
    import pyarrow as pa

    tbl = con.execute("SELECT embedding FROM query_log ORDER BY step").to_arrow_table()
    x = np.asarray(tbl.column("embedding").combine_chunks().values, dtype=np.float32).reshape(tbl.num_rows, -1)
    centers, labels = kmeans(x, n_clusters, seed=seed)
    sizes = np.bincount(labels, minlength=len(centers))
    old = con.execute("SELECT cluster, centroid FROM rif_centroids ORDER BY cluster").fetchall()
    new_ids = np.arange(1, len(centers) + 1)
    # Old cluster -> nearest new cluster; the global cue 0 -> every new cluster.
    mapping: list[tuple[int, int]] = [(0, int(j)) for j in new_ids]
    for c, vec in old:
        j = int(np.argmax(centers @ np.asarray(vec, dtype=np.float32))) + 1
        mapping.append((int(c), j))
    with transaction(con):
        con.register("_lethe_map", pa.table({"old": [m[0] for m in mapping], "new": [m[1] for m in mapping]}))
        con.execute(
            """CREATE OR REPLACE TEMP TABLE _lethe_moved AS
               SELECT m.new AS cluster, r.id, max(r.s) AS s, max(r.last_step) AS last_step
               FROM rif_suppression AS r JOIN _lethe_map AS m ON m.old = r.cluster
               GROUP BY m.new, r.id"""
        )
        con.execute("DELETE FROM rif_suppression")
        con.execute("INSERT INTO rif_suppression SELECT cluster, id, s, last_step FROM _lethe_moved")
        con.execute("DROP TABLE _lethe_moved")
        con.unregister("_lethe_map")
        con.execute("DELETE FROM rif_centroids")
        con.register(
            "_lethe_centroids",
            pa.table(
                {
                    "cluster": pa.array(new_ids, pa.int32()),
                    "centroid": pa.FixedSizeListArray.from_arrays(pa.array(centers.reshape(-1)), centers.shape[1]),
                    "size": pa.array(sizes.astype(np.int32)),
                }
            ),
        )
        con.execute("INSERT INTO rif_centroids SELECT cluster, centroid, size, ? FROM _lethe_centroids", [step])
        con.unregister("_lethe_centroids")
        con.execute("UPDATE meta SET value = ? WHERE key = 'rif_fit_queries'", [str(len(x))])


def reset(con) -> dict:
    """Forget everything learned: suppression, clusters, query log, lifecycle state."""
    counts = {
        "suppression": con.execute("SELECT count(*) FROM rif_suppression").fetchone()[0],
        "centroids": con.execute("SELECT count(*) FROM rif_centroids").fetchone()[0],
        "queries": con.execute("SELECT count(*) FROM query_log").fetchone()[0],
    }
    with transaction(con):
        con.execute("DELETE FROM rif_suppression")
        con.execute("DELETE FROM rif_centroids")
        con.execute("DELETE FROM query_log")
        con.execute("UPDATE meta SET value = '0' WHERE key IN ('search_step', 'rif_fit_queries')")
        con.execute(
            "UPDATE entries SET tier = 'naive', affinity = 0.5, retrieval_count = 0, last_retrieval_step = NULL"
        )
    return counts
