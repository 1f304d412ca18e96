#pragma once
// The Postgres store (postgresql://...). libpq-fe.h is included only by .cpp files in
// backends/postgres/.

#include "backends/make_store.hpp"
#include "backends/store.hpp"
#include "config/settings.hpp"

#include <boost/asio/io_context.hpp>

#include <memory>

namespace fk::store {

// Returns at once; connects, creates/migrates the schema and prepares statements in the
// background. Until that succeeds, ready() is false and requests get unavailable.
std::variant<std::unique_ptr<store>, open_error> open_postgres_store(net::io_context& io,
                                                                     const config::settings& s);

} // namespace fk::store
