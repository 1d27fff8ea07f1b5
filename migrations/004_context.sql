-- 004: the context field: each entry's text with its neighbours (the two sections
-- before and the two after it in its home source, those of the same session),
-- indexed for BM25 beside `entries.text` (lethe_sql/fts.py keeps it current).

-- One row per entry: the context text and the home occurrence it was built from.
CREATE TABLE entry_context (
    id       VARCHAR PRIMARY KEY,   -- entries.id
    source   VARCHAR,               -- the entry's home source when the context was built
    position INTEGER,
    text     VARCHAR NOT NULL       -- neighbours' and own text in source order, newline-separated
);

-- The same tables the FTS extension builds for `entries`, over entry_context.text.
CREATE SCHEMA lethe_ctx;
CREATE TABLE lethe_ctx.docs (docid BIGINT, name VARCHAR, len BIGINT);
CREATE TABLE lethe_ctx.terms (docid BIGINT, fieldid BIGINT, termid BIGINT);
CREATE TABLE lethe_ctx.dict (termid BIGINT, term VARCHAR, df BIGINT);
CREATE TABLE lethe_ctx.stats (num_docs BIGINT, avgdl DOUBLE);

-- Backfill for a store indexed before this migration (a fresh store has no entries).
-- The tokenizer is written out here: sql/ (lethe_tokens) is applied after migrations.
INSERT INTO entry_context
WITH
    home AS (SELECT id, source, position, session_id, text FROM entries),
    parts AS (
        SELECT h.id, o.position - h.position AS off, coalesce(e.text, a.text) AS text
        FROM home AS h
        JOIN entry_sources AS o
          ON o.source = h.source AND o.position BETWEEN h.position - 2 AND h.position + 2 AND o.position <> h.position
        LEFT JOIN entries AS e ON e.id = o.id
        LEFT JOIN absorbed AS a ON a.id = o.id
        WHERE h.session_id IS NOT NULL
          AND coalesce(e.session_id, a.session_id) = h.session_id
          AND coalesce(e.text, a.text) IS NOT NULL
        UNION ALL
        SELECT id, 0 AS off, text FROM home
    )
SELECT h.id, h.source, h.position, string_agg(p.text, chr(10) ORDER BY p.off)
FROM home AS h JOIN parts AS p USING (id)
GROUP BY h.id, h.source, h.position;

CREATE TEMP TABLE _ctx_tok AS
SELECT id, row_number() OVER (ORDER BY id) - 1 AS docid,
       list_filter(string_split_regex(regexp_replace(lower(text), '[^a-z0-9_]+', ' ', 'g'), '\s+'),
                   t -> t <> '') AS toks
FROM entry_context;
INSERT INTO lethe_ctx.docs SELECT docid, id, len(toks) FROM _ctx_tok;
CREATE TEMP TABLE _ctx_occ AS SELECT docid, unnest(toks) AS term FROM _ctx_tok;
INSERT INTO lethe_ctx.dict
SELECT row_number() OVER (ORDER BY term) - 1, term, n
FROM (SELECT term, count(DISTINCT docid) AS n FROM _ctx_occ GROUP BY term);
INSERT INTO lethe_ctx.terms SELECT o.docid, 0, d.termid FROM _ctx_occ AS o JOIN lethe_ctx.dict AS d USING (term);
INSERT INTO lethe_ctx.stats SELECT count(*), avg(len) FROM lethe_ctx.docs;
DROP TABLE _ctx_occ;
DROP TABLE _ctx_tok;
