-- 002: what the store learns from use, and the token index its judge reads.

-- Per-token vectors of each entry (last hidden states of the bi-encoder, L2-normalised),
-- int8-quantised with one scale per row: the float vector is v * scale.
CREATE TABLE token_vectors (
    id    VARCHAR  NOT NULL,        -- entries.id
    pos   SMALLINT NOT NULL,        -- token position within the entry
    token INTEGER  NOT NULL,        -- wordpiece id
    v     TINYINT[384] NOT NULL,
    scale FLOAT    NOT NULL
);

-- Wordpiece document frequencies over token_vectors, kept incrementally
-- (query-token IDF weights for late interaction).
CREATE TABLE token_df (
    token INTEGER PRIMARY KEY,
    df    BIGINT NOT NULL
);

-- Every local search that may teach the store, one row per search step.
CREATE TABLE query_log (
    step      BIGINT PRIMARY KEY,
    searched_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
    query     VARCHAR NOT NULL,
    embedding FLOAT[384] NOT NULL,
    cluster   INTEGER NOT NULL,     -- the cue the search used (0 before the first fit)
    judge     VARCHAR               -- which judge ranked the results
);

-- k-means centroids over logged query embeddings: the "kinds of query".
CREATE TABLE rif_centroids (
    cluster  INTEGER PRIMARY KEY,
    centroid FLOAT[384] NOT NULL,
    size     INTEGER NOT NULL,
    fit_step BIGINT NOT NULL
);

-- Suppression per (cluster, entry), decayed lazily: s * exp(-lambda * (step - last_step)).
CREATE TABLE rif_suppression (
    cluster   INTEGER NOT NULL,
    id        VARCHAR NOT NULL,
    s         DOUBLE  NOT NULL,
    last_step BIGINT  NOT NULL,
    PRIMARY KEY (cluster, id)
);

-- Entries absorbed by dedup: the text that lost, and the entry that kept it.
-- A reindex skips these texts instead of resurrecting them.
CREATE TABLE absorbed (
    id          VARCHAR PRIMARY KEY,   -- the absorbed entry's content hash
    into_id     VARCHAR NOT NULL,      -- the entry that absorbed it
    similarity  DOUBLE  NOT NULL,
    text        VARCHAR NOT NULL,
    source      VARCHAR,
    absorbed_at TIMESTAMP NOT NULL DEFAULT current_timestamp
);

INSERT INTO meta VALUES ('rif_fit_queries', '0');
