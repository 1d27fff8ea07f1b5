-- The tier lifecycle, readable. Transitions happen in the learning update
-- (lethe_sql/learn.py): naive -> gc at 3 retrievals; gc -> memory at affinity >= 0.65
-- and 5 retrievals; any -> apoptotic at affinity < 0.15 and more than 1000 idle
-- steps. Apoptotic entries leave search results but stay in their files and in
-- this table; `lethe restore ID` brings one back.

-- The affinity rule: a memory the judge kept (a winner) moves its affinity a fifth of
-- the way to sigmoid(its judge logit). learn.py's update calls it.
CREATE OR REPLACE MACRO lethe_affinity_after(a, sig) AS 0.8 * a + 0.2 * sig;
CREATE OR REPLACE VIEW lethe_lifecycle AS
SELECT e.tier, count(*) AS entries, avg(e.affinity) AS mean_affinity,
       sum(e.retrieval_count) AS retrievals
FROM entries AS e
GROUP BY e.tier;
