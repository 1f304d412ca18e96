#include "backends/postgres/floors.hpp"

#include "backends/postgres/sql.hpp"

namespace fk::store::pg {

net::awaitable<write_mapping> raise_floor_on(detail::connection& c, const floor_request& req,
                                             std::chrono::seconds retention,
                                             detail::millis timeout) {
    static const sql::param_list none;
    const auto params = sql::raise_floor_params(req, retention);
    const std::vector<detail::pipeline_step> steps{{sql::name::begin, &none},
                                                   {sql::name::floor_lock_floors, &none},
                                                   {sql::name::floor_lock_fences, &none},
                                                   {sql::name::raise_floor, &params},
                                                   {sql::name::commit, &none}};
    auto o = co_await c.exec_pipeline(steps, timeout);
    auto m = map_raise_floor(o, req);
    // After a server error the explicit transaction is left aborted (the rest of the
    // pipeline skipped). A failed ROLLBACK leaves the connection unusable: the pool then
    // drops it, and the server rolls back when the session ends.
    bool aborted = false;
    for (const auto& r : o.results)
        aborted |= r.server_error();
    if (aborted && o.t == exec_outcome::transport::ok)
        co_await c.exec_simple("ROLLBACK", timeout);
    co_return m;
}

} // namespace fk::store::pg
