#pragma once
// SQL fragments shared by several statements (sql/statements.cpp, sql/batch.cpp,
// sql/migration.cpp). Internal to sql/.

#include <string>
#include <string_view>

namespace fk::store::pg::sql {

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

inline constexpr std::string_view idem_raced_message =
    "a concurrent write committed a record under this Idempotency-Key, retry";

} // namespace fk::store::pg::sql
