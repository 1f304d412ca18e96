-- The fenced single-row upsert fencekeeper prepares as "fk_put" for every PUT
-- (backends/postgres/sql/statements.cpp, put_sql), with $1..$8 written as pgbench variables.
-- GENERATED: do not edit. tests/unit/postgres_bench_sql_test.cpp checks that it equals
-- sql::bench_pgbench_script("fencekeeper"); FK_UPDATE_BENCH_SQL=1 ./unit_postgres rewrites it.
--
-- The schema must exist: start fencekeeper once against the database (it migrates
-- at start), then stop it. Run, for example:
--   pgbench -n -M prepared -c 32 -j 4 -T 20 -D body=0123456789abcdef \
--           -D content_type=application/octet-stream -f pg_fenced_upsert.sql DB
-- Many locks, one key per lock (key = lock); token 1 equals the fence after the
-- first write, so every write is accepted and rewrites its row (an equal token
-- passes the fence). if_match 0 means no If-Match (pgbench cannot send NULL).
\set key random(1, 1000000)
\set lock :key
\set token 1
\set if_match 0
\set if_match_any false
\set if_none_match false
WITH k AS MATERIALIZED (
  SELECT r.lock, r.version, r.deleted FROM "fencekeeper".resources r
  WHERE r.key = :key::text FOR UPDATE
), x AS MATERIALIZED (
  SELECT coalesce(bool_or(NOT k.deleted AND k.lock <> :lock::text), false) AS mismatch,
         coalesce(bool_or(NOT k.deleted), false) AS ex,
         max(k.version) FILTER (WHERE NOT k.deleted) AS ver,
         max(k.lock) FILTER (WHERE NOT k.deleted) AS key_lock
  FROM k
), c AS MATERIALIZED (
  SELECT x.mismatch, x.ex, x.key_lock,
         ((:if_none_match::boolean AND x.ex) OR (:if_match_any::boolean AND NOT x.ex)
          OR (nullif(:if_match::bigint, 0) IS NOT NULL AND x.ver IS DISTINCT FROM nullif(:if_match::bigint, 0)))
           AS pre_failed
  FROM x
), h AS MATERIALIZED (
  SELECT fl.prefix, fl.token, fl.updated_at FROM "fencekeeper".floors fl
  WHERE starts_with(:lock::text, fl.prefix)
  ORDER BY fl.token DESC, octet_length(fl.prefix) DESC LIMIT 1
), o AS MATERIALIZED (
  SELECT fs.token FROM "fencekeeper".fences fs WHERE fs.lock = :lock::text
), f AS (
  INSERT INTO "fencekeeper".fences AS fe (lock, token, updated_at)
  SELECT :lock::text, :token::bigint, now() FROM c WHERE NOT c.mismatch AND NOT c.pre_failed
    AND NOT EXISTS (SELECT 1 FROM h WHERE h.token > :token::bigint)
  ON CONFLICT (lock) DO UPDATE SET token = EXCLUDED.token,
    updated_at = CASE WHEN fe.token < EXCLUDED.token THEN EXCLUDED.updated_at
                      ELSE fe.updated_at END
  WHERE fe.token <= EXCLUDED.token
  RETURNING fe.token
), w AS (
  INSERT INTO "fencekeeper".resources AS r
    (key, lock, body, content_type, version, token, deleted, created_at, updated_at)
  SELECT :key::text, :lock::text, :body::bytea, :content_type::text, 1, :token::bigint, false, now(), now() FROM f
  ON CONFLICT (key) DO UPDATE SET lock = EXCLUDED.lock, body = EXCLUDED.body,
    content_type = EXCLUDED.content_type, version = r.version + 1,
    token = EXCLUDED.token, deleted = false,
    created_at = CASE WHEN r.deleted THEN EXCLUDED.created_at ELSE r.created_at END,
    updated_at = EXCLUDED.updated_at
  WHERE (r.deleted OR r.lock = EXCLUDED.lock)
    AND NOT (:if_none_match::boolean AND NOT r.deleted)
    AND NOT (:if_match_any::boolean AND r.deleted)
    AND (nullif(:if_match::bigint, 0) IS NULL OR (NOT r.deleted AND r.version = nullif(:if_match::bigint, 0)))
  RETURNING r.version, r.created_at = now() AS created
)
SELECT c.mismatch, c.pre_failed, c.key_lock,
       (SELECT f.token FROM f) AS applied,
       (SELECT w.version FROM w) AS version,
       (SELECT w.created FROM w) AS created,
       greatest((SELECT o.token FROM o), (SELECT h.token FROM h)) AS seen_fence,
       CASE WHEN true AND EXISTS (SELECT 1 FROM f)
                 AND NOT EXISTS (SELECT 1 FROM w)
            THEN "fencekeeper".fk_raise('FKR01', 'a concurrent write created the key, retry')
       END AS raced,
       (SELECT h.prefix FROM h WHERE NOT EXISTS (SELECT 1 FROM o WHERE o.token >= h.token)) AS floor
FROM c;
