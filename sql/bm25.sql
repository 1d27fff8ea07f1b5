-- BM25 over the FTS tables of `entries` (fts_main_entries: dict, terms, docs, stats),
-- written as one set-oriented join instead of a per-document match_bm25 call.
-- Same formula and constants as the FTS extension (k1 = 1.2, b = 0.75, log base 10),
-- so scores equal fts_main_entries.match_bm25. Distinct query terms, as FTS does.
CREATE OR REPLACE MACRO lethe_bm25(q, k) AS TABLE
WITH
    qterms AS (SELECT DISTINCT unnest(lethe_tokens(q)) AS term),
    qt AS (
        SELECT d.termid, d.df
        FROM fts_main_entries.dict AS d JOIN qterms USING (term)
        WHERE d.df > 0
    ),
    st AS (SELECT num_docs, avgdl FROM fts_main_entries.stats),
    tf AS (
        SELECT t.docid, t.termid, count(*) AS tf
        FROM fts_main_entries.terms AS t
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
        JOIN fts_main_entries.docs AS docs USING (docid)
        CROSS JOIN st
        GROUP BY tf.docid
    )
SELECT docs.name AS id,
       scored.score AS score,
       -- rounded for ranking: a parallel sum may differ in the last bits between runs,
       -- and equal scores must fall back to the id, not to the order of addition
       row_number() OVER (ORDER BY round(scored.score, 9) DESC, docs.name) AS rank
FROM scored JOIN fts_main_entries.docs AS docs USING (docid)
ORDER BY rank
LIMIT k;
