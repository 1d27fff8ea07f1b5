-- The tokenizer shared by indexing and querying: lowercase, runs of [a-z0-9_],
-- no stemming, no stopwords. It reproduces exactly what the FTS extension
-- builds with stemmer='none', stopwords='none', ignore='[^a-z0-9_]+', lower=1.
CREATE OR REPLACE MACRO lethe_tokens(s) AS
    list_filter(
        string_split_regex(regexp_replace(lower(CAST(s AS VARCHAR)), '[^a-z0-9_]+', ' ', 'g'), '\s+'),
        t -> t <> ''
    );
