-- Clustered retrieval-induced forgetting: what the store has learned to hold back.
--
-- Suppression lives per (cluster, entry) and decays lazily: its value at search
-- step `step` is s * exp(-decay * (step - last_step)). The updates after each
-- judged search are in lethe_sql/learn.py; everything that reads the state is here.

-- The decay of suppression per search step: the setting rif_lambda (lethe_sql/settings.py),
-- written to meta by every learning update (settings.meta_rows); its default, 0.005,
-- before the first one.
CREATE OR REPLACE MACRO lethe_rif_lambda() AS
    coalesce(TRY_CAST((SELECT value FROM meta WHERE key = 'rif_lambda') AS DOUBLE), 0.005);

-- Suppression of every entry for one cue (cluster) at a given step (decay: lethe_rif_lambda()
-- unless given).
CREATE OR REPLACE MACRO lethe_suppression_at(cue, step, decay := NULL) AS TABLE
SELECT id, s * exp(-coalesce(decay, lethe_rif_lambda()) * (step - last_step)) AS s
FROM rif_suppression
WHERE cluster = cue;

-- The cue of a query vector: its nearest centroid, or 0 before the first fit.
CREATE OR REPLACE MACRO lethe_cue(qvec) AS (
    SELECT coalesce(
        (SELECT cluster FROM rif_centroids
         ORDER BY array_inner_product(centroid, CAST(qvec AS FLOAT[384])) DESC, cluster
         LIMIT 1),
        0)
);

-- First-stage candidates for the judge: the fused list (lethe_fused: z-scored BM25,
-- context-field BM25 and cosine; or, with rrf := true, lethe_hybrid's RRF of BM25 and
-- cosine) over lists of depth greatest(k, depth), minus alpha * suppression for the
-- query's cue, apoptotic entries left out, best k by the adjusted score.
CREATE OR REPLACE MACRO lethe_candidates(q, qvec, k, depth := 30, cue := 0, step := 0,
                                         alpha := 0.3, decay := NULL, rrf := false,
                                         w_bm25 := 1.0, w_ctx := 1.0, w_dense := 1.0) AS TABLE
WITH
    h AS (
        SELECT id, score, bm25_rank, bm25_score, dense_rank, dense_score, ctx_rank, ctx_score
        FROM lethe_fused(q, qvec, 2 * greatest(k, depth), depth := greatest(k, depth),
                         w_bm25 := w_bm25, w_ctx := w_ctx, w_dense := w_dense)
        WHERE NOT rrf
        UNION ALL
        SELECT id, score, bm25_rank, bm25_score, dense_rank, dense_score, NULL AS ctx_rank, NULL AS ctx_score
        FROM lethe_hybrid(q, qvec, 2 * greatest(k, depth), depth := greatest(k, depth))
        WHERE rrf
    ),
    s AS (SELECT * FROM lethe_suppression_at(cue, step, decay := decay)),
    a AS (
        SELECT h.id, h.bm25_rank, h.bm25_score, h.dense_rank, h.dense_score, h.ctx_rank, h.ctx_score,
               h.score AS fused, coalesce(s.s, 0) AS suppression,
               h.score - alpha * coalesce(s.s, 0) AS adjusted
        FROM h
        JOIN entries AS e USING (id)
        LEFT JOIN s USING (id)
        WHERE e.tier <> 'apoptotic'
    )
SELECT *, row_number() OVER (ORDER BY round(adjusted, 9) DESC, id) AS pool_rank
FROM a
ORDER BY pool_rank
LIMIT k;

-- What RIF has learned, readable: current (decayed) suppression per cluster and entry.
CREATE OR REPLACE VIEW lethe_suppression AS
SELECT r.cluster, r.id,
       r.s * exp(-lethe_rif_lambda()
                 * (coalesce(TRY_CAST((SELECT value FROM meta WHERE key = 'search_step') AS BIGINT), 0) - r.last_step)) AS s,
       r.s AS s_at_last_update, r.last_step,
       e.source, e.heading, left(e.text, 120) AS text
FROM rif_suppression AS r
LEFT JOIN entries AS e USING (id);
