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

-- Score-normalised fusion over three lists: BM25 over the entry's text, BM25 over its
-- context field (lethe_bm25_ctx: the text with its session neighbours) and cosine.
-- Both BM25 lists get the query without its stopwords (lethe_content_query).
-- Candidates: the top `depth` of each list. Every candidate gets all three scores
-- (a BM25 score of 0 means no query term at all; cosine is computed for each), each
-- z-scored over the candidates, and the fused score is the weighted sum of the
-- z-scores divided by the sum of the weights. Ties break on id.
CREATE OR REPLACE MACRO lethe_fused(q, qvec, k, depth := 30, w_bm25 := 1.0, w_ctx := 1.0, w_dense := 1.0) AS TABLE
WITH
    b AS MATERIALIZED (SELECT id, score, rank FROM lethe_bm25(lethe_content_query(q), 9223372036854775807)),
    c AS MATERIALIZED (SELECT id, score, rank FROM lethe_bm25_ctx(lethe_content_query(q), 9223372036854775807)),
    d AS (SELECT id, score, rank FROM lethe_dense(qvec, depth)),
    u AS (
        SELECT id FROM b WHERE rank <= depth
        UNION SELECT id FROM c WHERE rank <= depth AND w_ctx <> 0
        UNION SELECT id FROM d
    ),
    f AS (
        SELECT u.id,
               b.rank AS bm25_rank, coalesce(b.score, 0) AS bm25_score,
               c.rank AS ctx_rank, coalesce(c.score, 0) AS ctx_score,
               d.rank AS dense_rank,
               coalesce(d.score, array_inner_product(e.embedding, CAST(qvec AS FLOAT[384]))) AS dense_score
        FROM u
        JOIN entries AS e USING (id)
        LEFT JOIN b USING (id)
        LEFT JOIN c USING (id)
        LEFT JOIN d USING (id)
    ),
    z AS (
        SELECT *,
               coalesce((bm25_score - avg(bm25_score) OVER ()) / nullif(stddev_pop(bm25_score) OVER (), 0), 0) AS z_bm25,
               coalesce((ctx_score - avg(ctx_score) OVER ()) / nullif(stddev_pop(ctx_score) OVER (), 0), 0) AS z_ctx,
               coalesce((dense_score - avg(dense_score) OVER ()) / nullif(stddev_pop(dense_score) OVER (), 0), 0) AS z_dense
        FROM f
    ),
    s AS (
        SELECT *, (w_bm25 * z_bm25 + w_ctx * z_ctx + w_dense * z_dense)
                  / nullif(abs(w_bm25) + abs(w_ctx) + abs(w_dense), 0) AS score
        FROM z
    )
SELECT id, score,
       row_number() OVER (ORDER BY round(score, 9) DESC, id) AS rank,
       bm25_rank, bm25_score, dense_rank, dense_score, ctx_rank, ctx_score, z_bm25, z_ctx, z_dense
FROM s
ORDER BY rank
LIMIT k;
