#include "backends/postgres/sql/statements.hpp"

#include "backends/postgres/sql/fragments.hpp"
#include "backends/postgres/sql/quoting.hpp"
#include "backends/store.hpp"

namespace fk::store::pg::sql {
namespace {

struct write_params {
    std::string key, lock, token, body, content_type, if_match, if_match_any, if_none_match;
};

// If-Match travels as a bigint where 0 means "none" instead of NULL, so that pgbench
// (which cannot send NULL) runs the very statement text the store prepares (see
// bench_pgbench_script); sql/params.cpp sends an If-Match that can never match as -1.
std::string_view if_match_param(int n) {
    return n == 4 ? "nullif($4::bigint, 0)" : "nullif($6::bigint, 0)";
}

// The write statement shared by PUT and DELETE (see docs/postgres.md):
//   k  locks the key's row FOR UPDATE and yields its latest committed version, so the
//      lock and precondition checks below see the state we are about to change, and
//      concurrent writers of one key serialize on that row;
//   c  decides lock_mismatch and the preconditions on that row;
//   h  the fence floor over the lock, if any (fragments.hpp, floor_for), and o the
//      lock's own fence, both in the statement's snapshot;
//   f  advances the fence only when c passed (a mismatch or failed precondition must
//      leave the fence alone), the token is not below h and it is >= the fence;
//   w  writes or tombstones the row only when f returned a row.
// The only case k cannot lock is a key that does not exist yet: when a concurrent
// transaction creates it first, w's ON CONFLICT WHERE re-checks lock and preconditions
// on the new row and, if they now fail, the statement raises FKR01 so the fence advance
// is rolled back with everything else and the caller re-runs the statement. A delete has
// no insert to meet the new row: once its fence step applied it looks again with a new
// snapshot (raise_if_created_meanwhile) and raises FKR01 when the key exists by then.
std::string write_sql(std::string_view schema, const write_params& p, bool is_delete) {
    std::string s;
    s += "WITH k AS MATERIALIZED (\n"
         "  SELECT r.lock, r.version, r.deleted FROM @S.resources r\n"
         "  WHERE r.key = " +
         p.key +
         " FOR UPDATE\n"
         "), x AS MATERIALIZED (\n"
         "  SELECT coalesce(bool_or(NOT k.deleted AND k.lock <> " +
         p.lock +
         "), false) AS mismatch,\n"
         "         coalesce(bool_or(NOT k.deleted), false) AS ex,\n"
         "         max(k.version) FILTER (WHERE NOT k.deleted) AS ver,\n"
         "         max(k.lock) FILTER (WHERE NOT k.deleted) AS key_lock\n"
         "  FROM k\n"
         "), c AS MATERIALIZED (\n"
         "  SELECT x.mismatch, x.ex, x.key_lock,\n"
         "         ((" +
         p.if_none_match + " AND x.ex) OR (" + p.if_match_any +
         " AND NOT x.ex)\n"
         "          OR (" +
         p.if_match + " IS NOT NULL AND x.ver IS DISTINCT FROM " + p.if_match +
         "))\n"
         "           AS pre_failed\n"
         "  FROM x\n"
         "), h AS MATERIALIZED (\n"
         "  " +
         floor_for(p.lock) +
         "\n"
         "), o AS MATERIALIZED (\n"
         "  SELECT fs.token FROM @S.fences fs WHERE fs.lock = " +
         p.lock +
         "\n"
         "), f AS (\n"
         "  INSERT INTO @S.fences AS fe (lock, token, updated_at)\n"
         "  SELECT " +
         p.lock + ", " + p.token +
         ", now() FROM c WHERE NOT c.mismatch AND NOT c.pre_failed\n"
         "    AND NOT EXISTS (SELECT 1 FROM h WHERE h.token > " +
         p.token +
         ")\n"
         "  ";
    s += fence_upsert_tail;
    s += "  RETURNING fe.token\n";
    if (!is_delete) {
        s +=
            "), w AS (\n"
            "  INSERT INTO @S.resources AS r\n"
            "    (key, lock, body, content_type, version, token, deleted, created_at, updated_at)\n"
            "  SELECT " +
            p.key + ", " + p.lock + ", " + p.body + ", " + p.content_type + ", 1, " + p.token +
            ", false, now(), now() FROM f\n"
            "  ON CONFLICT (key) DO UPDATE SET lock = EXCLUDED.lock, body = EXCLUDED.body,\n"
            "    content_type = EXCLUDED.content_type, version = r.version + 1,\n"
            "    token = EXCLUDED.token, deleted = false,\n"
            "    created_at = CASE WHEN r.deleted THEN EXCLUDED.created_at ELSE r.created_at END,\n"
            "    updated_at = EXCLUDED.updated_at\n"
            "  WHERE (r.deleted OR r.lock = EXCLUDED.lock)\n"
            "    AND NOT (" +
            p.if_none_match +
            " AND NOT r.deleted)\n"
            "    AND NOT (" +
            p.if_match_any +
            " AND r.deleted)\n"
            "    AND (" +
            p.if_match + " IS NULL OR (NOT r.deleted AND r.version = " + p.if_match +
            "))\n"
            "  RETURNING r.version, r.created_at = now() AS created\n";
    } else {
        // A tombstone keeps the version, so a later write continues the count.
        s += "), w AS (\n"
             "  UPDATE @S.resources r SET deleted = true, body = NULL, content_type = NULL,\n"
             "    token = " +
             p.token +
             ", updated_at = now()\n"
             "  WHERE r.key = " +
             p.key + " AND NOT r.deleted AND r.lock = " + p.lock +
             "\n"
             "    AND EXISTS (SELECT 1 FROM f)\n"
             "  RETURNING r.version, false AS created\n";
    }
    // seen_fence is the effective fence in the statement's snapshot (before f): the
    // higher of o and h. It tells stale from a failed precondition, and when f found a
    // higher fence than the snapshot shows, the caller re-runs the statement to report
    // the fence that rejected it. floor names h when it is above o (or there is no o).
    const char* must_write = is_delete ? "c.ex" : "true";
    s += ")\n"
         "SELECT c.mismatch, c.pre_failed, c.key_lock,\n"
         "       (SELECT f.token FROM f) AS applied,\n"
         "       (SELECT w.version FROM w) AS version,\n"
         "       (SELECT w.created FROM w) AS created,\n"
         "       greatest((SELECT o.token FROM o), (SELECT h.token FROM h)) AS seen_fence,\n"
         "       CASE WHEN " +
         std::string(must_write) +
         " AND EXISTS (SELECT 1 FROM f)\n"
         "                 AND NOT EXISTS (SELECT 1 FROM w)\n"
         "            THEN @S.fk_raise('" +
         std::string(sqlstate_retry) + "', '" + std::string(created_raced_message) + "')\n";
    if (is_delete)
        s += "            WHEN NOT EXISTS (SELECT 1 FROM k) AND EXISTS (SELECT 1 FROM f)\n"
             "            THEN " +
             raise_if_created_meanwhile(p.key) + "\n";
    s += "       END AS raced,\n"
         "       " +
         std::string(floor_named) +
         " AS floor\n"
         "FROM c";
    return with_schema(s, schema);
}

} // namespace

std::string op_statement_name(std::size_t index) {
    return "fk_op_" + std::to_string(index);
}

std::string session_setup(std::chrono::milliseconds statement_timeout) {
    return "SET statement_timeout = " + std::to_string(statement_timeout.count());
}

std::string put_sql(std::string_view schema) {
    return write_sql(schema,
                     {"$1::text", "$2::text", "$3::bigint", "$4::bytea", "$5::text",
                      std::string(if_match_param(6)), "$7::boolean", "$8::boolean"},
                     false);
}

std::string delete_sql(std::string_view schema) {
    return write_sql(schema,
                     {"$1::text", "$2::text", "$3::bigint", "", "", std::string(if_match_param(4)),
                      "$5::boolean", "$6::boolean"},
                     true);
}

std::string advance_sql(std::string_view schema) {
    // As write_sql's h, o and f (with no key to check), and its seen_fence and floor.
    std::string s = "WITH h AS MATERIALIZED (\n"
                    "  " +
                    floor_for("$1::text") +
                    "\n"
                    "), o AS MATERIALIZED (\n"
                    "  SELECT fs.token FROM @S.fences fs WHERE fs.lock = $1::text\n"
                    "), f AS (\n"
                    "  INSERT INTO @S.fences AS fe (lock, token, updated_at)\n"
                    "  SELECT $1::text, $2::bigint, now()\n"
                    "  WHERE NOT EXISTS (SELECT 1 FROM h WHERE h.token > $2::bigint)\n  ";
    s += fence_upsert_tail;
    s += "  RETURNING fe.token\n"
         ")\n"
         "SELECT (SELECT f.token FROM f) AS applied,\n"
         "       greatest((SELECT o.token FROM o), (SELECT h.token FROM h)) AS seen_fence,\n"
         "       " +
         std::string(floor_named) + " AS floor";
    return with_schema(s, schema);
}

std::string get_sql(std::string_view schema, bool with_body) {
    std::string s = "SELECT lock, token, version, content_type, "
                    "coalesce(octet_length(body), 0)::bigint AS size";
    if (with_body)
        s += ", body";
    s += " FROM @S.resources WHERE key = $1::text AND NOT deleted";
    return with_schema(s, schema);
}

std::string read_fence_sql(std::string_view schema) {
    // One row always; map_read_fence decides which of the two sets the effective fence.
    return with_schema("WITH o AS MATERIALIZED (\n"
                       "  SELECT token, updated_at FROM @S.fences WHERE lock = $1::text\n"
                       "), h AS MATERIALIZED (\n"
                       "  " +
                           floor_for("$1::text") +
                           "\n"
                           ")\n"
                           "SELECT (SELECT o.token FROM o) AS token,\n"
                           "       (SELECT " +
                           std::string(ms_of_updated_at) +
                           " FROM o) AS updated_ms,\n"
                           "       (SELECT h.prefix FROM h) AS floor,\n"
                           "       (SELECT h.token FROM h) AS floor_token,\n"
                           "       (SELECT " +
                           std::string(ms_of_updated_at) + " FROM h) AS floor_updated_ms",
                       schema);
}

std::string list_sql(std::string_view schema, bool bounded) {
    std::string s = "SELECT lock, token, " + std::string(ms_of_updated_at) +
                    " AS updated_ms FROM @S.fences\n"
                    "WHERE lock >= $1::text AND lock > $2::text";
    if (bounded)
        s += " AND lock < $3::text ORDER BY lock LIMIT $4::bigint";
    else
        s += " ORDER BY lock LIMIT $3::bigint";
    return with_schema(s, schema);
}

std::string op_fence_sql(std::string_view schema) {
    return with_schema("SELECT @S.fk_fence_step($1::text, $2::bigint)", schema);
}

std::string idem_get_sql(std::string_view schema) {
    return with_schema("SELECT d.fingerprint, d.created, d.version, d.token, d.rows_affected, "
                       "d.rows\n" +
                           idem_record_from("$1::text", "$2::text", "$3::bigint", ""),
                       schema);
}

std::string advance_idem_sql(std::string_view schema) {
    // e reads the record in the statement's snapshot; f advances only without one; r
    // claims the key with the fence step's outcome (the fence row, then the record: the
    // lock order of sql/batch.cpp).
    std::string s = "WITH e AS MATERIALIZED (\n"
                    "  SELECT d.fingerprint = $5::bytea AS same, d.token\n" +
                    idem_record_from("$3::text", "$4::text", "$6::bigint", "  ") +
                    "\n"
                    "), h AS MATERIALIZED (\n"
                    "  " +
                    floor_for("$1::text") +
                    "\n"
                    "), o AS MATERIALIZED (\n"
                    "  SELECT fs.token FROM @S.fences fs WHERE fs.lock = $1::text\n"
                    "), f AS (\n"
                    "  INSERT INTO @S.fences AS fe (lock, token, updated_at)\n"
                    "  SELECT $1::text, $2::bigint, now() WHERE NOT EXISTS (SELECT 1 FROM e)\n"
                    "    AND NOT EXISTS (SELECT 1 FROM h WHERE h.token > $2::bigint)\n  ";
    s += fence_upsert_tail;
    s += "  RETURNING fe.token\n"
         "), r AS (\n"
         "  INSERT INTO @S.idempotency AS d (scope, key, fingerprint, token, committed_at)\n"
         "  SELECT $3::text, $4::text, $5::bytea, f.token, now() FROM f\n  ";
    s += idem_claim_tail("$6::bigint");
    s += "  RETURNING d.token\n"
         ")\n"
         "SELECT (SELECT f.token FROM f) AS applied,\n"
         "       greatest((SELECT o.token FROM o), (SELECT h.token FROM h)) AS seen_fence,\n"
         "       CASE WHEN EXISTS (SELECT 1 FROM f) AND NOT EXISTS (SELECT 1 FROM r)\n"
         "            THEN @S.fk_raise('" +
         std::string(sqlstate_retry) + "', '" + std::string(idem_raced_message) +
         "') END AS raced,\n"
         "       (SELECT e.same FROM e) AS rec_same,\n"
         "       (SELECT e.token FROM e) AS rec_token,\n"
         "       " +
         std::string(floor_named) + " AS floor";
    return with_schema(s, schema);
}

std::string op_record_sql(std::string_view schema) {
    std::string s = "WITH r AS (\n"
                    "  INSERT INTO @S.idempotency AS d\n"
                    "    (scope, key, fingerprint, token, rows_affected, rows, committed_at)\n"
                    "  VALUES ($1::text, $2::text, $3::bytea, $4::bigint, $5::bigint, $6::text, "
                    "now())\n  ";
    s += idem_claim_tail("$7::bigint");
    s += "  RETURNING 1\n"
         ")\n"
         "SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM r)\n"
         "            THEN @S.fk_raise('" +
         std::string(sqlstate_retry) + "', '" + std::string(idem_raced_message) + "') END AS raced";
    return with_schema(s, schema);
}

std::string idem_expire_sql(std::string_view schema) {
    // SKIP LOCKED: the sweep never waits for a row lock (a writer renewing an expired
    // record holds it), so it takes no part in any lock order; the rows it locked are
    // deleted by TID at once. The index on committed_at serves the ORDER BY ... LIMIT.
    return with_schema("WITH x AS (\n"
                       "  DELETE FROM @S.idempotency WHERE ctid = ANY (ARRAY(\n"
                       "    SELECT d.ctid FROM @S.idempotency d\n"
                       "    WHERE d.committed_at <= now() - $1::bigint * interval '1 second'\n"
                       "    ORDER BY d.committed_at LIMIT $2::bigint FOR UPDATE SKIP LOCKED))\n"
                       "  RETURNING 1\n"
                       ")\n"
                       "SELECT count(*) FROM x",
                       schema);
}

std::string idem_usage_sql(std::string_view schema) {
    // The sizes as store::idem_record_bytes counts them (32: the fingerprint).
    return with_schema("SELECT d.scope, count(*),\n"
                       "       sum(octet_length(d.scope) + octet_length(d.key) + 32 +\n"
                       "           coalesce(octet_length(d.rows), 0) + " +
                           std::to_string(idem_record_overhead) +
                           ")::bigint,\n"
                           "       (extract(epoch FROM min(d.committed_at)) * 1000)::bigint\n"
                           "FROM @S.idempotency d\n"
                           "WHERE d.committed_at > now() - $1::bigint * interval '1 second'\n"
                           "GROUP BY d.scope",
                       schema);
}

std::vector<statement> prepared_statements(std::string_view schema) {
    return {
        {name::put, put_sql(schema), 8},
        {name::remove, delete_sql(schema), 6},
        {name::advance, advance_sql(schema), 2},
        {name::get_body, get_sql(schema, true), 1},
        {name::get_meta, get_sql(schema, false), 1},
        {name::read_fence, read_fence_sql(schema), 1},
        {name::list_bounded, list_sql(schema, true), 4},
        {name::list_open, list_sql(schema, false), 3},
        {name::op_fence, op_fence_sql(schema), 2},
        {name::batch_begin, batch_begin_sql(), 0},
        {name::write_batch, write_batch_sql(schema, batch_shape::plain), 9},
        {name::write_batch_keyed, write_batch_sql(schema, batch_shape::keyed), 13},
        {name::batch_lock_timeout, batch_lock_timeout_sql(), 0},
        {name::idem_get, idem_get_sql(schema), 3},
        {name::advance_idem, advance_idem_sql(schema), 6},
        {name::begin, "BEGIN", 0},
        {name::commit, "COMMIT", 0},
        {name::op_record, op_record_sql(schema), 7},
        {name::idem_expire, idem_expire_sql(schema), 2},
        {name::idem_usage, idem_usage_sql(schema), 1},
        {name::floor_lock_floors, floor_lock_floors_sql(schema), 0},
        {name::floor_lock_fences, floor_lock_fences_sql(schema), 0},
        {name::raise_floor, raise_floor_sql(schema), 6},
        {name::list_floors, list_floors_sql(schema), 0},
        {name::txn, txn_sql(schema), 10},
        {name::txn_restore_settings, txn_restore_settings_sql(), 0},
    };
}

} // namespace fk::store::pg::sql
