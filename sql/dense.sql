-- Dense top-k: inner product of L2-normalised FLOAT[384] vectors (= cosine).
-- Takes a vector, never text: persisted SQL cannot call the embed() UDF,
-- which exists only on connections opened by lethe_sql.connect().
CREATE OR REPLACE MACRO lethe_dense(qvec, k) AS TABLE
WITH q AS MATERIALIZED (SELECT CAST(qvec AS FLOAT[384]) AS v)
SELECT e.id,
       array_inner_product(e.embedding, q.v) AS score,
       row_number() OVER (ORDER BY array_inner_product(e.embedding, q.v) DESC, e.id) AS rank
FROM entries AS e CROSS JOIN q
WHERE e.embedding IS NOT NULL
ORDER BY rank
LIMIT k;
