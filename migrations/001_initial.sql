-- 001: the memory store.
-- Applied exactly once per database; never edit after release: add 002_... instead.

-- Key/value facts about this database: embedding model id, sql/ digest, search step.
CREATE TABLE meta (
    key   VARCHAR PRIMARY KEY,
    value VARCHAR
);

-- One row per distinct memory. id is the content hash (sha256 of the indexed
-- text, first 16 hex digits), so the same text written twice is one entry and
-- an unchanged section keeps its id, and with it its learned state, across edits
-- elsewhere in its file.
CREATE TABLE entries (
    id                  VARCHAR PRIMARY KEY,
    content             VARCHAR NOT NULL,          -- the section as written
    text                VARCHAR NOT NULL,          -- what is indexed (no heading lines, no comments)
    source              VARCHAR,                   -- memory file, relative to the project root
    heading             VARCHAR,                   -- the section heading, without the #s
    session_id          VARCHAR,
    position            INTEGER,                   -- section number within its file, from 0
    created_at          TIMESTAMP,
    tier                VARCHAR NOT NULL DEFAULT 'naive',
    affinity            DOUBLE NOT NULL DEFAULT 0.5,
    retrieval_count     INTEGER NOT NULL DEFAULT 0,
    last_retrieval_step BIGINT,
    embedding           FLOAT[384]
);

-- Where each entry occurs. An entry lives while at least one occurrence does.
CREATE TABLE entry_sources (
    source   VARCHAR NOT NULL,
    position INTEGER NOT NULL,
    id       VARCHAR NOT NULL,
    heading  VARCHAR,
    PRIMARY KEY (source, position)
);

-- Memory files as last indexed, for incremental reindex.
CREATE TABLE source_files (
    path       VARCHAR PRIMARY KEY,
    size       BIGINT NOT NULL,
    mtime      DOUBLE NOT NULL,
    sha256     VARCHAR NOT NULL,
    indexed_at TIMESTAMP NOT NULL DEFAULT current_timestamp
);

INSERT INTO meta VALUES ('schema', 'lethe-sql'), ('search_step', '0');
