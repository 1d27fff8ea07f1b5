-- 007: long memories. The model reads a text 254 wordpieces at a time; an entry's own
-- `embedding` is its first window's vector, and each further window of a longer text
-- (udfs/embed.py: overlapping, WINDOW_STRIDE apart) has a row here. `lethe_dense`
-- scores an entry by the best of its vectors. Written and dropped with the entry's
-- token vectors (lethe_sql/ingest.py); an index older than this migration gets them
-- for its long entries on the next `lethe index` (their vectors are read again).
CREATE TABLE entry_windows (
    id        VARCHAR  NOT NULL,     -- entries.id
    n         SMALLINT NOT NULL,     -- window number, 1 = the second window
    embedding FLOAT[384] NOT NULL,
    PRIMARY KEY (id, n)
);
