-- Fencing tokens from Postgres. Run with psql -v lock=NAME (the :'lock' below is psql's
-- safely quoted variable); from code, pass NAME as a bind parameter instead.
--
--   psql -X -At -v ON_ERROR_STOP=1 -v lock=report -f pg-tokens.sql "$DATABASE_URL"

-- Recommended: a counter row per lock, bumped in a committed transaction. The value is
-- durable (committed, WAL-flushed) before anyone sees it, so it never repeats, even
-- after a crash or a failover to a synchronous standby.
--
-- The row with the empty name (no lock has one) is the floor of every counter:
-- pg-raise-floor.sh raises it after a failover to an asynchronous standby or a restore
-- from backup lost committed tokens, and a counter below it continues from it (one
-- primary-key lookup, O(1) in the number of locks).
CREATE TABLE IF NOT EXISTS fencing_tokens (
  lock  text PRIMARY KEY,
  token bigint NOT NULL
);
INSERT INTO fencing_tokens AS f (lock, token)
VALUES (:'lock', COALESCE((SELECT token FROM fencing_tokens WHERE lock = ''), 0) + 1)
ON CONFLICT (lock) DO UPDATE
  SET token = GREATEST(f.token, COALESCE((SELECT token FROM fencing_tokens WHERE lock = ''), 0)) + 1
RETURNING token;

-- Alternative: one sequence per lock. nextval() is never rolled back and never hands
-- out a value twice while the server stays up. Caveat: sequence advances are
-- WAL-logged lazily (in batches of 32) and a transaction that only called nextval()
-- may not flush WAL at commit, so after a crash or an asynchronous-replica failover a
-- value can come again. Prefer the table above, or call nextval() inside a
-- transaction that also writes something. A sequence has no floor to honour: the
-- repair moves each one (setval, O(number of sequences)), see docs/locks.md.
--
--   CREATE SEQUENCE IF NOT EXISTS "fencing_seq_report";
--   SELECT nextval('"fencing_seq_report"');

-- Mutual exclusion to go with the token: a session-level advisory lock, held until
-- pg_advisory_unlock or until the session ends. scripts/locks/pg-lock.sh does this.
--
--   SELECT pg_try_advisory_lock(hashtextextended(:'lock', 0));   -- t = you hold it
--   ... take a token (above), work, write through fencekeeper with it ...
--   SELECT pg_advisory_unlock(hashtextextended(:'lock', 0));
