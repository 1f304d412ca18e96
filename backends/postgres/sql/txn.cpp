#include "backends/postgres/sql/fragments.hpp"
#include "backends/postgres/sql/quoting.hpp"
#include "backends/postgres/sql/statements.hpp"

namespace fk::store::pg::sql {

// A transaction's statement (POST /v1/transactions; docs/postgres.md, "Transactions").
// It is all-or-nothing by itself, because it also runs inside a group-commit batch's
// database transaction, which commits whatever its statements wrote (write_batcher.cpp,
// run_mixed_on): it proposes no fence unless every op passes its checks on the locked key
// rows and on the snapshot's fences and floors (g), writes data only when every fence
// step applied (ok), and raises FKR01 when a proposed fence step was refused by a fence
// committed after the snapshot (the other locks' steps may have applied: the statement
// must not commit them). Alone, it runs in an explicit transaction that is rolled back
// when any op fails or when it raises.
//
// It takes its row locks in the batch's phases and orders (sql/batch.cpp), so that
// transactions never deadlock with batches, with the fence-only statements or with each
// other:
//   K  k locks every existing key row the transaction names (put, delete,
//      check_version) FOR UPDATE, sorted by key;
//   F  f upserts one fence row per distinct lock, sorted by lock. Its one-time filter
//      reads all of k first, so K is over when F starts. A lock only `check` ops name
//      ("check-only") must be locked without being changed: it is proposed with the
//      sentinel updated_at '-infinity', for which DO UPDATE keeps token and updated_at,
//      while WHERE fe.token <= EXCLUDED.token still decides on the newest committed fence
//      (the row is locked whether or not WHERE holds). It is proposed only when its fence
//      row exists in the snapshot: fences are never deleted, so it always conflicts and
//      the sentinel is never inserted. A check-only lock without a fence row is decided on
//      the snapshot (the window docs/postgres.md describes);
//   N  v inserts the absent keys of puts, sorted by key; its Sort reads all of u, hence
//      all of f (through ok): F is over when N starts. A key created meanwhile is skipped
//      by ON CONFLICT DO NOTHING and raised as FKR01 (the store re-runs the transaction).
// Then the operations' statements run (their own locks), and the Idempotency-Key record
// (op_record_sql) is claimed last, in the commit pipeline: phase I.
//
// Per op, in op order (c, then d): lock_mismatch (put, delete), stale (the fence step of
// its lock did not apply, or the floor over the lock is above the token: the effective
// fence, as h does for writes), precondition_failed (put, delete: If-Match and
// If-None-Match; check_version: the version, or "absent"). All ops on one lock carry one
// token (validate_txn), so l has one row per lock.
std::string txn_sql(std::string_view schema) {
    std::string s =
        "WITH i AS MATERIALIZED (\n"
        "  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bytea[],\n"
        "                       $6::text[], $7::bigint[], $8::boolean[], $9::boolean[],\n"
        "                       $10::bigint[])\n"
        "    WITH ORDINALITY AS t(kind, key, lock, token, body, content_type, if_match,\n"
        "                         if_match_any, if_none_match, want, n)\n"
        "), k AS MATERIALIZED (\n"
        "  SELECT r.key, r.lock, r.version, r.deleted FROM @S.resources r\n"
        "  WHERE r.key = ANY ($2::text[]) ORDER BY r.key COLLATE \"C\" FOR UPDATE\n"
        "), h AS MATERIALIZED (\n"
        // As in write_batch_sql: the floors, read once in the statement's snapshot.
        "  SELECT fl.prefix, fl.token FROM @S.floors fl ORDER BY fl.prefix\n"
        "), c AS MATERIALIZED (\n"
        // ex: the key exists (not a tombstone); absent: it has no row at all.
        "  SELECT i.n, i.kind, i.key, i.lock, i.token, k.key IS NULL AS absent,\n"
        "         coalesce(NOT k.deleted, false) AS ex,\n"
        "         i.kind IN ('put', 'delete') AND coalesce(NOT k.deleted, false)\n"
        "           AND k.lock <> i.lock AS mismatch,\n"
        "         CASE WHEN NOT k.deleted THEN k.lock END AS key_lock,\n"
        "         CASE WHEN i.kind IN ('put', 'delete') THEN\n"
        "                (i.if_none_match AND coalesce(NOT k.deleted, false))\n"
        "                OR (i.if_match_any AND NOT coalesce(NOT k.deleted, false))\n"
        "                OR (i.if_match <> 0 AND (NOT coalesce(NOT k.deleted, false)\n"
        "                                         OR k.version <> i.if_match))\n"
        "              WHEN i.kind = 'check_version' THEN\n"
        "                CASE WHEN i.want IS NULL THEN coalesce(NOT k.deleted, false)\n"
        "                     ELSE NOT coalesce(NOT k.deleted, false) OR k.version <> i.want\n"
        "                END\n"
        "              ELSE false END AS pre_failed,\n"
        "         CASE WHEN NOT k.deleted THEN k.version ELSE 0 END AS found_version\n"
        "  FROM i LEFT JOIN k ON k.key = i.key\n"
        "), l AS MATERIALIZED (\n"
        // One row per lock: its token, whether an op writes it (anything but check), the
        // floor over it (the highest whose prefix it starts with, on a tie the longest),
        // and its own fence in the snapshot.
        "  SELECT l0.*, l0.own > l0.token AS own_above\n"
        "  FROM (SELECT g.lock, g.token, g.writes, hf.prefix AS floor_prefix,\n"
        "               hf.token AS floor_token,\n"
        "               coalesce(g.token < hf.token, false) AS below_floor,\n"
        "               (SELECT fs.token FROM @S.fences fs WHERE fs.lock = g.lock) AS own\n"
        "        FROM (SELECT c.lock, max(c.token) AS token, bool_or(c.kind <> 'check') AS writes\n"
        "              FROM c WHERE c.lock IS NOT NULL GROUP BY c.lock) g\n"
        "          LEFT JOIN LATERAL (\n"
        "            SELECT h.prefix, h.token FROM h WHERE starts_with(g.lock, h.prefix)\n"
        "            ORDER BY h.token DESC, octet_length(h.prefix) DESC LIMIT 1) hf ON true) l0\n"
        "), g AS MATERIALIZED (\n"
        // Every op passes its checks: the key rows' (locked, newest), and each lock's
        // floor and own fence in the snapshot (a fence only rises, so one above the token
        // there refuses for certain). Only then is any fence step proposed.
        "  SELECT NOT EXISTS (SELECT 1 FROM c WHERE c.mismatch OR c.pre_failed)\n"
        "         AND NOT EXISTS (SELECT 1 FROM l\n"
        "                         WHERE l.below_floor OR coalesce(l.own_above, false))\n"
        "    AS pass\n"
        "), f AS (\n"
        "  INSERT INTO @S.fences AS fe (lock, token, updated_at)\n"
        "  SELECT l.lock, l.token,\n"
        "         CASE WHEN l.writes THEN now() ELSE '-infinity'::timestamptz END\n"
        "  FROM l CROSS JOIN g WHERE g.pass AND (l.writes OR l.own IS NOT NULL)\n"
        "    AND (SELECT count(*) FROM k) >= 0\n"
        "  ORDER BY l.lock COLLATE \"C\"\n"
        "  ON CONFLICT (lock) DO UPDATE SET\n"
        "    token = CASE WHEN EXCLUDED.updated_at = '-infinity' THEN fe.token\n"
        "                 ELSE EXCLUDED.token END,\n"
        "    updated_at = CASE WHEN EXCLUDED.updated_at <> '-infinity'\n"
        "                           AND fe.token < EXCLUDED.token\n"
        "                      THEN EXCLUDED.updated_at ELSE fe.updated_at END\n"
        "  WHERE fe.token <= EXCLUDED.token\n"
        "  RETURNING fe.lock, fe.token\n"
        "), d AS MATERIALIZED (\n"
        // stale: the floor or the snapshot's own fence is above the token, or the lock's
        // proposed fence step did not apply (raised below). raced: that last case.
        // fenced: the lock's fence after f (a check-only lock's: unchanged, its newest
        // committed value).
        "  SELECT c.*, l.writes, l.own, l.floor_prefix, l.floor_token, f.token AS fenced,\n"
        "         c.lock IS NOT NULL AND (l.below_floor OR coalesce(l.own_above, false)\n"
        "           OR (g.pass AND (l.writes OR l.own IS NOT NULL) AND f.lock IS NULL)) AS stale,\n"
        "         c.lock IS NOT NULL AND g.pass AND (l.writes OR l.own IS NOT NULL)\n"
        "           AND f.lock IS NULL AS raced\n"
        "  FROM c CROSS JOIN g LEFT JOIN l ON l.lock = c.lock LEFT JOIN f ON f.lock = c.lock\n"
        "), ok AS MATERIALIZED (\n"
        "  SELECT NOT EXISTS (SELECT 1 FROM d WHERE d.mismatch OR d.stale OR d.pre_failed)\n"
        "    AS all_ok\n"
        "), u AS MATERIALIZED (\n"
        // The rows to write, only when every op passed: puts, and deletes of existing keys.
        "  SELECT d.n, d.key, d.lock, d.token, d.kind = 'delete' AS is_delete, d.absent,\n"
        "         i.body, i.content_type\n"
        "  FROM d JOIN i ON i.n = d.n CROSS JOIN ok\n"
        "  WHERE ok.all_ok AND (d.kind = 'put' OR (d.kind = 'delete' AND d.ex))\n";
    // w and v: the rows written (fragments.hpp).
    s += write_rows_ctes;
    s += ")\n"
         // One row per op, in op order (map_txn_checks). current_token and floor only for
         // a stale op: the effective fence in the snapshot, and the floor when it is above
         // the own fence. token: the lock's fence after the transaction; for check the
         // effective fence it was checked against: the transaction's token when an earlier
         // op wrote the lock, else the fence before it (a check-only lock's newest, else
         // the snapshot's).
         "SELECT d.n, d.mismatch, d.key_lock, d.stale,\n"
         "       CASE WHEN d.stale THEN greatest(d.own, d.floor_token) END AS current_token,\n"
         "       CASE WHEN d.stale AND d.floor_token IS NOT NULL\n"
         "                 AND (d.own IS NULL OR d.own < d.floor_token)\n"
         "            THEN d.floor_prefix END AS floor,\n"
         "       d.pre_failed,\n"
         "       CASE WHEN d.kind <> 'check' THEN d.fenced\n"
         "            WHEN EXISTS (SELECT 1 FROM i j WHERE j.lock = d.lock AND j.n < d.n\n"
         "                                             AND j.kind <> 'check') THEN d.token\n"
         "            WHEN d.writes THEN coalesce(greatest(d.own, d.floor_token), 0)\n"
         "            ELSE coalesce(greatest(d.fenced, d.floor_token), 0) END AS token,\n"
         "       CASE WHEN d.kind = 'put' THEN coalesce(w.version, v.version)\n"
         "            WHEN d.kind = 'delete' THEN CASE WHEN d.ex THEN w.version ELSE 0 END\n"
         "            WHEN d.kind = 'check_version' THEN d.found_version END AS version,\n"
         "       d.kind = 'put' AND NOT d.ex AS created,\n"
         "       CASE WHEN ok.all_ok AND (d.kind = 'put' OR (d.kind = 'delete' AND d.ex))\n"
         "                 AND w.n IS NULL AND v.key IS NULL\n"
         "            THEN @S.fk_raise('" +
         std::string(sqlstate_retry) + "', '" + std::string(created_raced_message) +
         "')\n"
         // A delete, or a check that the key is absent, decided on a key without a row in
         // the snapshot: looked at again once the fence steps applied (sql/batch.cpp).
         "            WHEN ok.all_ok AND d.absent AND (d.kind = 'delete'\n"
         "                 OR (d.kind = 'check_version'\n"
         "                     AND (SELECT j.want FROM i j WHERE j.n = d.n) IS NULL))\n"
         "            THEN " +
         raise_if_created_meanwhile("d.key") +
         "\n"
         "            WHEN d.raced THEN @S.fk_raise('" +
         std::string(sqlstate_retry) +
         "', 'a fence committed meanwhile refused the transaction, retry') END\n"
         "         AS unwritten\n"
         "FROM d CROSS JOIN ok LEFT JOIN w ON w.n = d.n LEFT JOIN v ON v.key = d.key\n"
         "ORDER BY d.n";
    return with_schema(s, schema);
}

// The batch's plan settings (batch_begin_sql) are local to the transaction; a
// transaction's named operations run after its statement and should plan as a lone
// operation does, with the session's settings. reset_val is what RESET would give: the
// session never sets these three itself.
std::string txn_restore_settings_sql() {
    return "SELECT pg_catalog.set_config(s.name, s.reset_val, true)\n"
           "FROM pg_catalog.pg_settings s\n"
           "WHERE s.name IN ('enable_seqscan', 'plan_cache_mode', 'jit')";
}

} // namespace fk::store::pg::sql
