#pragma once
// SQL fragments shared by several statements (sql/statements.cpp, sql/batch.cpp,
// sql/migration.cpp). Internal to sql/.

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

} // namespace fk::store::pg::sql
