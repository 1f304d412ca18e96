#pragma once
// Raising a fence floor (store::raise_floor; docs/postgres.md, "Fence floors"): one
// transaction on one connection, [BEGIN, lock floors, lock fences, the raise, COMMIT]
// in one pipeline (sql/floors.cpp says why the locks). It never acquires or releases a
// connection: the caller (postgres_store) does, and re-runs a mapping that asks for it.

#include "backends/postgres/detail/connection.hpp"
#include "backends/postgres/result.hpp"

#include <chrono>

namespace fk::store::pg {

// On `c`'s strand: the raise, mapped (map_raise_floor). A transaction that a server error
// aborted is rolled back here, so that the connection can go back to the pool.
net::awaitable<write_mapping> raise_floor_on(detail::connection& c, const floor_request& req,
                                             std::chrono::seconds retention,
                                             detail::millis timeout);

} // namespace fk::store::pg
