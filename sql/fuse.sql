-- Reciprocal-rank fusion of BM25 and dense candidates (k = 60).
-- Each list contributes its top greatest(k, depth); an entry found by both sums
-- both contributions. Ties break on id so the order is deterministic.
CREATE OR REPLACE MACRO lethe_hybrid(q, qvec, k, depth := 30) AS TABLE
WITH
    b AS (SELECT id, score, rank FROM lethe_bm25(q, greatest(k, depth))),
    d AS (SELECT id, score, rank FROM lethe_dense(qvec, greatest(k, depth))),
    u AS (
        SELECT coalesce(b.id, d.id) AS id,
               coalesce(1.0 / (60 + b.rank), 0) + coalesce(1.0 / (60 + d.rank), 0) AS score,
               b.rank AS bm25_rank, b.score AS bm25_score,
               d.rank AS dense_rank, d.score AS dense_score
        FROM b FULL OUTER JOIN d ON b.id = d.id
    )
SELECT id, score,
       row_number() OVER (ORDER BY score DESC, id) AS rank,
       bm25_rank, bm25_score, dense_rank, dense_score
FROM u
ORDER BY rank
LIMIT k;
