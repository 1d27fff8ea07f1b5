-- Readable views over the store (no vectors).
CREATE OR REPLACE VIEW lethe_memories AS
SELECT id, source, heading, position, session_id, created_at, tier, affinity,
       retrieval_count, last_retrieval_step, text, content
FROM entries;
