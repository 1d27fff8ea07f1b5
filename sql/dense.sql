-- Dense top-k: inner product of L2-normalised FLOAT[384] vectors (= cosine).
-- Takes a vector, never text: persisted SQL cannot call the embed() UDF,
-- which exists only on connections opened by lethe_sql.connect().
-- The top k is cut first (DuckDB's top-N operator over one scan) and only those
-- k rows are ranked: a window over every entry costs ~10x more at 200k entries.
CREATE OR REPLACE MACRO lethe_dense(qvec, k) AS TABLE
-- An entry scores the best of its own vector (its text's first window), the vectors of
-- its further windows when the text is long (migrations/007_windows.sql) and its
-- enrichment's (`lethe enrich`, migrations/005_enrichment.sql). Exact and cheap: the top
-- k by that maximum lie within the top k of each side, so each side keeps its own top-N
-- scan (the window side takes each entry's best window first: only long texts have rows).
WITH cand AS (
    (SELECT e.id, array_inner_product(e.embedding, CAST(qvec AS FLOAT[384])) AS score
     FROM entries AS e
     WHERE e.embedding IS NOT NULL
     ORDER BY score DESC, e.id
     LIMIT k)
    UNION ALL
    (SELECT x.id, array_inner_product(x.embedding, CAST(qvec AS FLOAT[384])) AS score
     FROM enrichment AS x JOIN entries AS e USING (id)
     WHERE x.embedding IS NOT NULL
     ORDER BY score DESC, x.id
     LIMIT k)
    UNION ALL
    (SELECT w.id, max(array_inner_product(w.embedding, CAST(qvec AS FLOAT[384]))) AS score
     FROM entry_windows AS w JOIN entries AS e USING (id)
     GROUP BY w.id
     ORDER BY score DESC, w.id
     LIMIT k)
),
top AS (
    SELECT id, max(score) AS score FROM cand GROUP BY id
    ORDER BY score DESC, id
    LIMIT k
)
-- (LIMIT k again: a no-op here; the cross-project search expands this macro over the
-- union of the projects' tables on (project, id) keys, lethe_sql/federation.py)
SELECT id, score, row_number() OVER (ORDER BY score DESC, id) AS rank
FROM top
ORDER BY rank
LIMIT k;
