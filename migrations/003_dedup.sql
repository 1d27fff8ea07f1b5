-- 003: near-duplicate merging (lethe_sql/dedup.py).

-- What an absorbed entry needs to come back as it was (its keeper vanished, or
-- `lethe dedupe --restore`): the section as written and where/when it was written.
ALTER TABLE absorbed ADD COLUMN content VARCHAR;
ALTER TABLE absorbed ADD COLUMN heading VARCHAR;
ALTER TABLE absorbed ADD COLUMN session_id VARCHAR;
ALTER TABLE absorbed ADD COLUMN created_at TIMESTAMP;
ALTER TABLE absorbed ADD COLUMN position INTEGER;

-- Entries brought back by `lethe dedupe --restore`: never absorbed again.
CREATE TABLE dedup_exempt (
    id        VARCHAR PRIMARY KEY,   -- entries.id (content hash)
    exempt_at TIMESTAMP NOT NULL DEFAULT current_timestamp
);
