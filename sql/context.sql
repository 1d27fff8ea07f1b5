-- BM25 over the context field: each entry's text with its neighbours in the same
-- session (entry_context, indexed in lethe_ctx.{dict,terms,docs,stats} by
-- lethe_sql/fts.py). Same formula and constants as lethe_bm25 (k1 = 1.2,
-- b = 0.75, log base 10); ids are entry ids, so the two fields join directly.
CREATE OR REPLACE MACRO lethe_bm25_ctx(q, k) AS TABLE
WITH
    qterms AS (SELECT DISTINCT unnest(lethe_tokens(q)) AS term),
    qt AS (
        SELECT d.termid, d.df
        FROM lethe_ctx.dict AS d JOIN qterms USING (term)
        WHERE d.df > 0
    ),
    st AS (SELECT num_docs, avgdl FROM lethe_ctx.stats),
    tf AS (
        SELECT t.docid, t.termid, count(*) AS tf
        FROM lethe_ctx.terms AS t
        WHERE t.termid IN (SELECT termid FROM qt)
        GROUP BY t.docid, t.termid
    ),
    scored AS (
        SELECT tf.docid,
               sum(
                   log((st.num_docs - qt.df + 0.5) / (qt.df + 0.5) + 1)
                   * (tf.tf * (1.2 + 1))
                   / (tf.tf + 1.2 * (1 - 0.75 + 0.75 * (docs.len / st.avgdl)))
               ) AS score
        FROM tf
        JOIN qt USING (termid)
        JOIN lethe_ctx.docs AS docs USING (docid)
        CROSS JOIN st
        GROUP BY tf.docid
    )
SELECT docs.name AS id,
       scored.score AS score,
       row_number() OVER (ORDER BY round(scored.score, 9) DESC, docs.name) AS rank
FROM scored JOIN lethe_ctx.docs AS docs USING (docid)
ORDER BY rank
LIMIT k;
