-- 005: optional write-time enrichment (`lethe enrich`, lethe_sql/enrich.py).
-- One row per (entry content hash, model): an entry id is the hash of its indexed text,
-- so a row stays valid exactly as long as that text, and no text is paid for twice.
CREATE TABLE enrichment (
    id            VARCHAR NOT NULL,    -- entries.id (content hash of the indexed text)
    model         VARCHAR NOT NULL,
    gist          VARCHAR NOT NULL,    -- one sentence
    questions     VARCHAR[] NOT NULL,  -- three anticipated questions, varied wording
    entities      VARCHAR[] NOT NULL,  -- exact surface forms
    temporal      VARCHAR[] NOT NULL,  -- dates, times, "yesterday", versions in time
    text          VARCHAR NOT NULL,    -- gist + questions + entities + temporal: what is indexed
    embedding     FLOAT[384],          -- of `text`, beside the entry's own vector
    input_tokens  INTEGER,
    output_tokens INTEGER,
    created_at    TIMESTAMP NOT NULL DEFAULT current_timestamp,
    PRIMARY KEY (id, model)
);
