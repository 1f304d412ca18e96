#pragma once
// SQL fragments shared by several statements (sql/statements.cpp, sql/batch.cpp,
// sql/migration.cpp). Internal to sql/.

#include <string>
#include <string_view>

#include "backends/postgres/sql/statements.hpp"

namespace fk::store::pg::sql {

// Milliseconds since the epoch of a timestamptz column updated_at, as bigint.
inline constexpr std::string_view ms_of_updated_at =
    "floor(extract(epoch FROM updated_at) * 1000)::bigint";

// The fence step shared by every write: advance the fence row when the token is at least
// the fence. ON CONFLICT DO UPDATE locks the latest version of the row and evaluates the
// WHERE against it, so concurrent writers to one lock serialize on that row lock even
// under READ COMMITTED; an equal token still updates (and so locks) the row, which keeps a
// concurrent higher advance from committing between our check and our data write.
// updated_at moves only when the token does.
inline constexpr std::string_view fence_upsert_tail =
    "ON CONFLICT (lock) DO UPDATE SET token = EXCLUDED.token,\n"
    "    updated_at = CASE WHEN fe.token < EXCLUDED.token THEN EXCLUDED.updated_at\n"
    "                      ELSE fe.updated_at END\n"
    "  WHERE fe.token <= EXCLUDED.token\n";

// An Idempotency-Key record is claimed by INSERT ... ON CONFLICT (scope, key): a new key
// inserts; an existing record is taken over only when it has expired (its age is at least
// the retention, `$n` seconds). Against a record another transaction is inserting, the
// insert waits for it to end; against one committed after our snapshot, DO UPDATE sees
// it (READ COMMITTED) and its WHERE fails. Either way RETURNING yields no row, and the
// statement raises FKR01 so that nothing of it commits (see sql/batch.cpp).
inline std::string idem_claim_tail(std::string_view retention_param) {
    return std::string(
               "ON CONFLICT (scope, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint,\n"
               "    created = EXCLUDED.created, version = EXCLUDED.version,\n"
               "    token = EXCLUDED.token, rows_affected = EXCLUDED.rows_affected,\n"
               "    rows = EXCLUDED.rows, committed_at = EXCLUDED.committed_at\n"
               "  WHERE d.committed_at <= now() - ") +
           std::string(retention_param) + " * interval '1 second'\n";
}

// The condition on an idempotency row `d` that makes it answer (not expired).
inline std::string idem_unexpired(std::string_view retention_param) {
    return "d.committed_at > now() - " + std::string(retention_param) + " * interval '1 second'";
}

// FROM and WHERE of a look-up of one unexpired record, as `d`, each line after `indent`:
// the probe by primary key alone (OFFSET 0 keeps the expiry condition out of it, so that
// no plan ever scans the committed_at index instead; see sql/batch.cpp, e).
inline std::string idem_record_from(std::string_view scope_param, std::string_view key_param,
                                    std::string_view retention_param, std::string_view indent) {
    return std::string(indent) +
           "FROM (SELECT * FROM @S.idempotency WHERE scope = " + std::string(scope_param) +
           " AND key = " + std::string(key_param) + " OFFSET 0) d\n" + std::string(indent) +
           "WHERE " + idem_unexpired(retention_param);
}

// The fence floor that decides a lock's effective fence (docs/postgres.md, "Fence
// floors"): the highest floor whose prefix `lock_expr` starts with, on a tie the longest
// prefix (fence::floor_set::highest_for). Columns prefix, token, updated_at; no row when
// no floor matches. The table holds at most store::max_floors rows and is read whole
// (starts_with cannot use the primary key: the lock is the pattern's subject, not the
// prefix). A statement that reads it in the same snapshot as it writes the fences table
// sees every floor whose raise committed before the statement took its lock on fences:
// raise_floor holds SHARE on fences until it commits (sql/floors.cpp).
inline std::string floor_for(std::string_view lock_expr) {
    return "SELECT fl.prefix, fl.token, fl.updated_at FROM @S.floors fl\n"
           "  WHERE starts_with(" +
           std::string(lock_expr) +
           ", fl.prefix)\n"
           "  ORDER BY fl.token DESC, octet_length(fl.prefix) DESC LIMIT 1";
}

// The prefix of the floor h (floor_for) when it sets the effective fence: it is above
// the lock's own fence o (a CTE of one row or none), or the lock has none.
inline constexpr std::string_view floor_named =
    "(SELECT h.prefix FROM h WHERE NOT EXISTS (SELECT 1 FROM o WHERE o.token >= h.token))";

// The data step shared by the batch (sql/batch.cpp) and a transaction (sql/txn.cpp):
// from a CTE u (n, key, lock, token, is_delete, absent, body, content_type) of rows to
// write, w updates the rows that exist (every one locked by the statement's k; a
// tombstone keeps its version) and v inserts the absent keys in key order, skipping a key
// created meanwhile by another transaction (ON CONFLICT DO NOTHING: the statement then
// finds the row unwritten and raises FKR01). Starts with "), w AS (" and ends after v's
// RETURNING.
inline constexpr std::string_view write_rows_ctes =
    "), w AS (\n"
    "  UPDATE @S.resources r SET lock = u.lock,\n"
    "    body = CASE WHEN u.is_delete THEN NULL ELSE u.body END,\n"
    "    content_type = CASE WHEN u.is_delete THEN NULL ELSE u.content_type END,\n"
    "    version = CASE WHEN u.is_delete THEN r.version ELSE r.version + 1 END,\n"
    "    token = u.token, deleted = u.is_delete,\n"
    "    created_at = CASE WHEN r.deleted AND NOT u.is_delete THEN now()\n"
    "                      ELSE r.created_at END,\n"
    "    updated_at = now()\n"
    "  FROM u WHERE NOT u.absent AND r.key = u.key\n"
    "  RETURNING u.n, r.version\n"
    "), v AS (\n"
    "  INSERT INTO @S.resources AS r\n"
    "    (key, lock, body, content_type, version, token, deleted, created_at, updated_at)\n"
    "  SELECT u.key, u.lock, u.body, u.content_type, 1, u.token, false, now(), now()\n"
    "  FROM u WHERE u.absent\n"
    "  ORDER BY u.key COLLATE \"C\"\n"
    "  ON CONFLICT (key) DO NOTHING\n"
    "  RETURNING r.key, r.version\n";

inline constexpr std::string_view created_raced_message =
    "a concurrent write created the key, retry";

// A delete (or a transaction's check that a key is absent) whose key had no row in the
// statement's snapshot, evaluated once its fence step has applied: raises FKR01 when the
// key exists by now (docs/postgres.md, "A delete racing a create"). The writer that
// created it under the same lock held that lock's fence row until it committed, and the
// fence step waited for it; fk_key_live's new snapshot sees its row. The caller re-runs
// the statement, whose k then locks that row. `key_expr` is the key.
inline std::string raise_if_created_meanwhile(std::string_view key_expr) {
    return "CASE WHEN @S.fk_key_live(" + std::string(key_expr) + ") THEN @S.fk_raise('" +
           std::string(sqlstate_retry) + "', '" + std::string(created_raced_message) + "') END";
}

inline constexpr std::string_view idem_raced_message =
    "a concurrent write committed a record under this Idempotency-Key, retry";

} // namespace fk::store::pg::sql
