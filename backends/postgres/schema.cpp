#include "backends/postgres/schema.hpp"

namespace fk::store::pg {

schema::schema(std::string name, detail::millis connect_timeout, detail::millis statement_timeout)
    : name_(std::move(name)), connect_timeout_(connect_timeout),
      statement_timeout_(statement_timeout), statements_(sql::prepared_statements(name_)) {}

std::string schema::first_error(const exec_outcome& o, const char* what) {
    if (o.t != exec_outcome::transport::ok)
        return std::string(what) + ": " + (o.error.empty() ? "connection lost" : o.error);
    for (const auto& r : o.results)
        if (!r.ok())
            return std::string(what) + ": " + (r.sqlstate.empty() ? "" : r.sqlstate + " ") +
                   r.message;
    return {};
}

net::awaitable<std::string> schema::set_up(detail::connection& c, bool migrate) const {
    auto err = first_error(
        co_await c.exec_simple(sql::session_setup(statement_timeout_), connect_timeout_),
        "session setup");
    if (!err.empty())
        co_return err;
    if (migrate) {
        err = first_error(co_await c.exec_simple(sql::migration_script(name_),
                                                 connect_timeout_ + statement_timeout_),
                          "schema migration");
        if (!err.empty())
            co_return err;
    }
    for (const auto& st : statements_) {
        err = first_error(co_await c.prepare(st.name, st.text, connect_timeout_), "prepare");
        if (!err.empty())
            co_return err;
    }
    co_return std::string();
}

} // namespace fk::store::pg
