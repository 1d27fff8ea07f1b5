"""The learning update after a judged search, in one transaction.

Rules (issue 4; all constants are ``Settings`` fields):

* losers (pool entries that did not make the final top-k):
  ``strength = max(0, judge_rank - pool_rank) / pool_size * sigmoid(-logit)``,
  ``s = min(s_decayed + rate * strength, max_s)``;
* winners: ``s = max(0, s_decayed - reinforce)``; affinity moves by ``lethe_affinity_after``
  (``sql/lifecycle.sql``: ``0.8 a + 0.2 sigmoid(logit)``),
  one more retrieval, tiers naive -> gc (3 retrievals) -> memory (affinity >= 0.65 and
  5 retrievals);
* any entry with affinity < 0.15 idle for more than 1000 steps becomes apoptotic;
* the query embedding is logged with its cue; k-means over the log is refit when it
  holds at least 10 x n_clusters queries and has grown by ``refit_growth`` since the
  last fit. Suppression learned under old clusters moves to the nearest new centroid
  (the global cue of the time before the first fit, to every new cluster).

``s_decayed = s * exp(-lambda * (step - last_step))``.

A search that holds only a read lock (``lethe search``: many run at once beside one
writer) cannot write its update: ``record_pending`` appends it to
``.lethe/index/learning.pending.jsonl`` (one line, one ``write``; the query scrubbed of
secrets; file mode 0600), and the next process that opens the index for writing applies
every pending update in order (``apply_pending``), each as its own search step with its
cue computed then. So learning is deferred, never lost; at most ``PENDING_MAX`` updates
wait (older ones are dropped with the file's tail kept).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .db import transaction
from .judges import ids_literal, sigmoid
from .privacy import scrub
from .settings import meta_rows
from .vectors import vec_literal

APOPTOSIS_AFFINITY = 0.15
APOPTOSIS_IDLE = 1000
PENDING = "learning.pending.jsonl"
PENDING_MAX = 5000


def current_step(con) -> int:
    row = con.execute("SELECT value FROM meta WHERE key = 'search_step'").fetchone()
    return int(row[0]) if row else 0


def cue_of(con, vec) -> int:
    return int(con.execute("SELECT lethe_cue(?)", [vec_literal(vec)]).fetchone()[0])


def _floats_literal(xs) -> str:
    """DOUBLE[] as text; repr round-trips every finite double exactly."""
    out = []
    for x in xs:
        x = float(x)
        if not math.isfinite(x):
            raise ValueError(f"not a finite number: {x!r}")
        out.append(repr(x))
    return "[" + ",".join(out) + "]"


def update(
    con,
    *,
    step: int,
    cue: int,
    query: str,
    qvec,
    judge: str | None,
    outcome: Sequence[tuple[str, int, int, float, bool]],
    settings,
    rif: bool,
) -> dict:
    """Record one search; returns the ``meta`` rows as they were before it (for
    ``maybe_refit``). ``outcome`` rows: (id, pool_rank, judge_rank, logit, winner) over the
    shallow pool; empty when no judge ran (then only the log and step move).

    Cost: a handful of statements, each on at most the pool's rows (the learning update
    must stay under 10 ms at 10,000 entries). Lists reach SQL as one text parameter each
    (``VARCHAR[]``/``DOUBLE[]`` casts), never as registered tables; the suppression
    arithmetic for the few touched rows is done here, with the existing rows read back
    by the ``DELETE ... RETURNING`` that clears them.
    """
    rows = list(outcome)
    n = len(rows)
    with transaction(con):
        con.execute(
            "INSERT INTO query_log (step, query, embedding, cluster, judge) VALUES (?, ?, CAST(? AS FLOAT[384]), ?, ?)",
            [step, scrub(query).text, vec_literal(qvec), cue, judge],  # the log keeps no secret (privacy.py)
        )
        con.execute("UPDATE meta SET value = ? WHERE key = 'search_step'", [str(step)])
        # the settings the store learns under, written when they changed (an INSERT OR
        # REPLACE costs 1.8 ms at 10,000 entries even when it changes nothing; the read 0.2)
        have = dict(con.execute("SELECT key, value FROM meta").fetchall())
        changed = [[k, v] for k, v in meta_rows(settings) if have.get(k) != v]
        if changed:
            con.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", changed)
        if rows and rif:
            _update_suppression(con, rows, n, step, cue, settings)
        winners = [(o[0], float(o[3])) for o in rows if o[4]]
        if winners and settings.lifecycle:
            # affinity, retrieval count and tier in one pass; the tier rule reads the new values
            con.execute(
                """UPDATE entries SET
                       affinity = lethe_affinity_after(affinity, list_extract(CAST($sig AS DOUBLE[]), list_position(CAST($ids AS VARCHAR[]), id))),
                       retrieval_count = retrieval_count + 1,
                       last_retrieval_step = $step,
                       tier = CASE
                           WHEN tier IN ('naive', 'gc')
                                AND lethe_affinity_after(affinity, list_extract(CAST($sig AS DOUBLE[]), list_position(CAST($ids AS VARCHAR[]), id))) >= 0.65
                                AND retrieval_count + 1 >= 5 THEN 'memory'
                           WHEN tier = 'naive' AND retrieval_count + 1 >= 3 THEN 'gc'
                           ELSE tier END
                   WHERE list_contains(CAST($ids AS VARCHAR[]), id)""",
                # sigmoid(logit) per winner, computed here; list_contains filters in the scan
                {"step": step, "ids": ids_literal([w[0] for w in winners]),
                 "sig": _floats_literal(sigmoid(w[1]) for w in winners)},
            )
        # Nothing can have idled past APOPTOSIS_IDLE before that many steps.
        if settings.lifecycle and step > APOPTOSIS_IDLE:
            con.execute(
                """UPDATE entries SET tier = 'apoptotic'
                   WHERE tier <> 'apoptotic' AND affinity < $a
                     AND $step - coalesce(last_retrieval_step, 0) > $idle""",
                {"a": APOPTOSIS_AFFINITY, "step": step, "idle": APOPTOSIS_IDLE},
            )
    return have


def _update_suppression(con, rows, n: int, step: int, cue: int, settings) -> None:
    """Losers: ``s = min(s_decayed + min(rate * strength, max_s), max_s)`` where strength > 0;
    winners with a row: ``s = max(0, s_decayed - reinforce)``; rows left at s <= 1e-9 go."""
    lam = settings.rif_lambda
    touched: dict[str, float | None] = {}  # id -> loser increment, None for a winner
    for eid, pool_rank, judge_rank, logit, winner in rows:
        if winner:
            touched[eid] = None
            continue
        if judge_rank is None or pool_rank is None:  # unranked: no strength (NULL in SQL terms)
            continue
        strength = max(0, judge_rank - pool_rank) / float(n) * sigmoid(-logit)
        if strength > 0:
            touched[eid] = min(settings.rif_rate * strength, settings.rif_max)
    if not touched:
        return
    old = {
        eid: (s, last)
        for eid, s, last in con.execute(
            """DELETE FROM rif_suppression
               WHERE cluster = $cue AND list_contains(CAST($ids AS VARCHAR[]), id)
               RETURNING id, s, last_step""",
            {"cue": cue, "ids": ids_literal(list(touched))},
        ).fetchall()
    }
    new_ids, new_s = [], []
    for eid, inc in touched.items():
        prev = old.get(eid)
        decayed = prev[0] * math.exp(-lam * (step - prev[1])) if prev is not None else None
        if inc is None:  # a winner: reinforced, only where something was held against it
            if decayed is None:
                continue
            s = max(0.0, decayed - settings.rif_reinforce)
        else:
            s = inc if decayed is None else min(decayed + inc, settings.rif_max)
        if s > 1e-9:
            new_ids.append(eid)
            new_s.append(s)
    if new_ids:
        con.execute(
            """INSERT INTO rif_suppression (cluster, id, s, last_step)
               SELECT $cue, unnest(CAST($ids AS VARCHAR[])), unnest(CAST($s AS DOUBLE[])), $step""",
            {"cue": cue, "ids": ids_literal(new_ids), "s": _floats_literal(new_s), "step": step},
        )


def record_pending(index_dir, *, query: str, qvec, judge, outcome, rif: bool) -> None:
    """Append one search's learning update to the pending file (see the module docstring)."""
    import json
    import os
    from pathlib import Path

    from .privacy import scrub

    line = json.dumps({"query": scrub(query).text, "qvec": [round(float(x), 7) for x in qvec], "judge": judge,
                       "outcome": [[str(i), int(p), int(j) if j is not None else None, float(lg), bool(w)]
                                   for i, p, j, lg, w in outcome],
                       "rif": bool(rif)}, separators=(",", ":")) + "\n"
    path = Path(index_dir) / PENDING
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def apply_pending(con, settings, index_dir) -> int:
    """Apply the pending updates (the caller holds the write lock); returns how many."""
    import json
    import os
    from pathlib import Path

    path = Path(index_dir) / PENDING
    if not path.exists():
        return 0
    work = path.with_name(PENDING + ".applying")
    if not work.exists():
        os.replace(path, work)  # new searches start a new file meanwhile
    rows = []
    with open(work, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue  # a torn line (a crash mid-write): that update is lost, nothing else
    for r in rows[-PENDING_MAX:]:
        try:
            step = current_step(con) + 1
            rif = bool(r.get("rif")) and settings.rif
            qvec = np.asarray(r["qvec"], dtype=np.float32)
            cue = cue_of(con, qvec) if rif else 0
            outcome = [(o[0], o[1], o[2], o[3], o[4]) for o in r.get("outcome") or []]
            live = {x for (x,) in con.execute(
                "SELECT id FROM entries WHERE list_contains(CAST(? AS VARCHAR[]), id)",
                [ids_literal(sorted({o[0] for o in outcome}))]).fetchall()} if outcome else set()
            meta = update(con, step=step, cue=cue, query=r["query"], qvec=qvec, judge=r.get("judge"),
                          outcome=[o for o in outcome if o[0] in live], settings=settings, rif=rif)
            if rif:
                maybe_refit(con, settings, step, meta=meta)
        except (KeyError, TypeError, ValueError):
            continue
    work.unlink(missing_ok=True)
    return len(rows)


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


def maybe_refit(con, settings, step: int, seed: int = 0, meta: dict | None = None) -> bool:
    """Refit the query clusters when the policy says so; returns whether it did. ``meta``:
    the ``meta`` rows ``update`` read just before (saves reading them again)."""
    n = con.execute("SELECT count(*) FROM query_log").fetchone()[0]
    if meta is None:
        meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
    last = int(meta.get("rif_fit_queries") or 0)
    if n < 10 * settings.n_clusters or (last and n < settings.refit_growth * last):
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
