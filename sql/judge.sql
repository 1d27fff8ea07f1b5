-- Late interaction over the stored token vectors: for each query token, its best
-- inner product with any token of a span of the entry; a span's score is the
-- IDF-weighted mean over query tokens (weights 1 with idf := false), and the entry's
-- score is its best span's. A span is lethe_span() token positions (the model's window:
-- pos // lethe_span()), so a long memory is judged by its best part and not by the best
-- token of each query token anywhere in it; a memory of one window has one span. The
-- width is written here once; lethe_sql/judges.py reads it (judges.SPAN).
CREATE OR REPLACE MACRO lethe_span() AS 254;

-- qtoks: the query's token vectors (FLOAT[384][], as text or list), qtokens: their
-- wordpiece ids, ids: the entries to score (the candidate pool).
CREATE OR REPLACE MACRO lethe_maxsim(qtoks, qtokens, ids, idf := true) AS TABLE
WITH
    n AS MATERIALIZED (SELECT greatest(count(*), 1) AS n FROM entries),
    q AS MATERIALIZED (
        SELECT qt.qpos, qt.qv,
               CASE WHEN idf
                    THEN ln((n.n - coalesce(d.df, 0) + 0.5) / (coalesce(d.df, 0) + 0.5) + 1)
                    ELSE 1.0 END AS w
        FROM (SELECT unnest(range(len(CAST(qtoks AS FLOAT[384][])))) AS qpos,
                     unnest(CAST(qtoks AS FLOAT[384][])) AS qv,
                     unnest(CAST(qtokens AS INTEGER[])) AS token) AS qt
        CROSS JOIN n
        LEFT JOIN token_df AS d ON d.token = qt.token
    ),
    p AS MATERIALIZED (
        SELECT t.id, t.pos // lethe_span() AS span, CAST(t.v AS FLOAT[384]) AS v, t.scale
        FROM token_vectors AS t
        WHERE t.id IN (SELECT unnest(CAST(ids AS VARCHAR[])))
    ),
    best AS (
        SELECT p.id, p.span, q.qpos, max(array_inner_product(p.v, q.qv) * p.scale) AS sim
        FROM p CROSS JOIN q
        GROUP BY p.id, p.span, q.qpos
    ),
    spans AS (
        SELECT best.id, best.span, sum(best.sim * q.w) / sum(q.w) AS score
        FROM best JOIN q USING (qpos)
        GROUP BY best.id, best.span
    )
SELECT id, max(score) AS score
FROM spans
GROUP BY id;
