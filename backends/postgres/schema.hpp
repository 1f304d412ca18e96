#pragma once
// A new session's set-up, before the pool hands the connection out: our session settings,
// the schema migration (first connection only) and the store's prepared statements.
// Immutable after construction; its coroutine runs on the connection's strand and
// touches nothing but that connection. It never retries: a failure ends the attempt and
// the pool backs off (pool.hpp).

#include "backends/postgres/detail/connection.hpp"
#include "backends/postgres/sql.hpp"

#include <string>
#include <vector>

namespace fk::store::pg {

class schema {
public:
    schema(std::string name, detail::millis connect_timeout, detail::millis statement_timeout);

    // On `c`'s strand, on a fresh connection: session settings, then with `migrate` the
    // migration script (waiting for another starting proxy's advisory lock is part of it),
    // then every statement of sql::prepared_statements. Empty on success, else what failed.
    net::awaitable<std::string> set_up(detail::connection& c, bool migrate) const;

    const std::string& name() const noexcept { return name_; }

    // The first error of an exchange ("<what>: [SQLSTATE ]message"), or empty when every
    // result is ok.
    static std::string first_error(const exec_outcome& o, const char* what);

private:
    std::string name_;
    detail::millis connect_timeout_;
    detail::millis statement_timeout_;
    std::vector<sql::statement> statements_;
};

} // namespace fk::store::pg
