-- The tokenizer shared by indexing and querying: lowercase, runs of [a-z0-9_],
-- no stemming, no stopwords. It reproduces exactly what the FTS extension
-- builds with stemmer='none', stopwords='none', ignore='[^a-z0-9_]+', lower=1.
CREATE OR REPLACE MACRO lethe_tokens(s) AS
    list_filter(
        string_split_regex(regexp_replace(lower(CAST(s AS VARCHAR)), '[^a-z0-9_]+', ' ', 'g'), '\s+'),
        t -> t <> ''
    );

-- English function words the fused first stage leaves out of a query (lethe_fused and the
-- cross-project search; lethe_bm25 and lethe_bm25_ctx themselves keep every query term,
-- so they stay equal to the FTS extension's match_bm25). The index keeps them: only the
-- query side changes. Chosen on the LoCoMo tune half (bench/results/default-search.md).
CREATE OR REPLACE MACRO lethe_stopwords() AS [
    'a', 'an', 'the', 'and', 'or', 'but', 'if', 'of', 'to', 'in', 'on', 'at', 'by', 'for', 'with',
    'from', 'as', 'is', 'are', 'was', 'were', 'be', 'been', 'being', 'am', 'do', 'does', 'did',
    'has', 'have', 'had', 'having', 'i', 'me', 'my', 'we', 'our', 'you', 'your', 'he', 'him',
    'his', 'she', 'her', 'it', 'its', 'they', 'them', 'their', 'what', 'which', 'who', 'whom',
    'whose', 'when', 'where', 'why', 'how', 'this', 'that', 'these', 'those', 'there', 'here',
    'not', 'no', 'so', 'than', 'too', 'very', 'can', 'could', 'will', 'would', 'should', 'may',
    'might', 'must', 'just', 'about', 'into', 'over', 'after', 'before', 'up', 'down', 'out',
    'off', 'again', 'then', 'once', 'all', 'any', 'both', 'each', 'few', 'more', 'most',
    'other', 'some', 'such', 'only', 'own', 'same', 's', 't', 'don', 'now'];

-- A query's terms without the stopwords; all of its terms when every one is a stopword.
CREATE OR REPLACE MACRO lethe_query_terms(s) AS
    coalesce(nullif(list_filter(lethe_tokens(s), t -> NOT list_contains(lethe_stopwords(), t)), []), lethe_tokens(s));

-- The same as one string, for the BM25 macros: the terms joined by spaces.
CREATE OR REPLACE MACRO lethe_content_query(s) AS array_to_string(lethe_query_terms(s), ' ');
