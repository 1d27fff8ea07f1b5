-- Revisions: which memory replaced which, and when each version held.
--
-- A link (table `revisions`, lethe_sql/revisions.py) says new_id supersedes old_id.
-- A memory is valid from its own date (entries.created_at: its heading's timestamp or
-- its file's date) until the date of the earliest memory that supersedes it; one that
-- nothing supersedes is current. History is never overwritten: a superseded memory
-- stays in `entries` and in search (a question about the past still finds it).

-- Every link with both memories' dates and a glimpse of their text.
CREATE OR REPLACE VIEW lethe_revisions AS
SELECT r.old_id, r.new_id, r.origin, r.reason, r.score,
       o.created_at AS valid_from,      -- when the old version was written
       n.created_at AS valid_to,        -- when the version replacing it was written
       left(o.text, 120) AS old_text, left(n.text, 120) AS new_text
FROM revisions AS r
JOIN entries AS o ON o.id = r.old_id
JOIN entries AS n ON n.id = r.new_id;

-- Every memory with its validity: superseded_by is the earliest memory that replaced it
-- (NULL for a current one), valid_to that memory's date (NULL when it has none).
CREATE OR REPLACE VIEW lethe_versions AS
SELECT e.id, e.created_at AS valid_from, s.valid_to, s.superseded_by, s.superseded_by IS NULL AS is_current,
       e.source, e.heading, e.text
FROM entries AS e
LEFT JOIN (
    SELECT r.old_id AS id, min(n.created_at) AS valid_to,
           arg_min(r.new_id, (coalesce(n.created_at, TIMESTAMP '9999-12-31'), r.new_id)) AS superseded_by
    FROM revisions AS r JOIN entries AS n ON n.id = r.new_id
    GROUP BY r.old_id
) AS s USING (id);

-- The memories nothing supersedes.
CREATE OR REPLACE VIEW lethe_current AS
SELECT id, valid_from, source, heading, text FROM lethe_versions WHERE is_current;

-- The memories that held at time `ts` (written by then, not yet replaced by then).
CREATE OR REPLACE MACRO lethe_as_of(ts) AS TABLE
SELECT id, valid_from, valid_to, source, heading, text
FROM lethe_versions
WHERE valid_from <= CAST(ts AS TIMESTAMP)
  AND (is_current OR valid_to > CAST(ts AS TIMESTAMP));
