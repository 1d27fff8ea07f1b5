-- 006: memory that stays true: revisions, markers, forgetting, duplicates by words.

-- What two memories must share to be duplicates (markdown.dedup_key: the same words in
-- the same order, ignoring case, punctuation and a/an/the). Filled by Python on insert;
-- an index older than this migration is backfilled by the next `lethe index`.
ALTER TABLE entries ADD COLUMN dedup_key VARCHAR;

-- Revisions: new_id supersedes old_id (the same subject, changed content). Derived:
-- `declared` links come from `supersedes=` markers in the markdown (section_marks), and
-- `detected` ones from revisions.py when a memory is indexed; `distinct=` markers veto
-- detected links. Valid from / to are the memories' dates (views in sql/revisions.sql).
CREATE TABLE revisions (
    old_id    VARCHAR NOT NULL,      -- entries.id of the superseded memory
    new_id    VARCHAR NOT NULL,      -- entries.id of the memory that replaces it
    origin    VARCHAR NOT NULL,      -- 'declared' | 'detected'
    reason    VARCHAR,               -- why (detected: what changed; declared: where the marker is)
    score     DOUBLE,                -- detection confidence (declared: 1)
    linked_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
    PRIMARY KEY (old_id, new_id)
);

-- Pairs that detection scored (each memory against its nearest older memories): the
-- probability that new_id supersedes old_id. At or above revisions.LINK_AT a pair is
-- linked (above); lower scores still let a question about the present rank the newer of
-- two memories first when both are among its top results (revisions.PROMOTE_AT).
CREATE TABLE revision_candidates (
    old_id VARCHAR NOT NULL,
    new_id VARCHAR NOT NULL,
    score  DOUBLE NOT NULL,
    PRIMARY KEY (old_id, new_id)
);

-- The `<!-- lethe supersedes=... distinct=... -->` markers of every indexed section,
-- as written (targets are ids or id prefixes; resolved against entries on each pass).
CREATE TABLE section_marks (
    source   VARCHAR NOT NULL,       -- entry_sources.source
    position INTEGER NOT NULL,       -- entry_sources.position
    id       VARCHAR NOT NULL,       -- the section's entry id
    kind     VARCHAR NOT NULL,       -- 'supersedes' | 'distinct'
    target   VARCHAR NOT NULL
);

-- Tombstoned sections (`<!-- lethe forgotten -->`): never indexed; kept so that a
-- forget of a forgotten memory can say so. Only the content hash, never the text.
CREATE TABLE forgotten (
    id     VARCHAR NOT NULL,
    source VARCHAR NOT NULL,
    PRIMARY KEY (id, source)
);
