#pragma once
// Opens the store named by settings.store (file:PATH or postgresql://...).

#include "backends/store.hpp"
#include "config/settings.hpp"

#include <boost/asio/io_context.hpp>

#include <memory>
#include <string>
#include <variant>

namespace fk::store {

struct open_error {
    std::string message; // printed on stderr
    int exit_code = 2;   // 2: bad config or the directory is locked by another process
};

// File store: opens (and recovers) the directory now, taking its exclusive lock.
// Postgres store: returns at once and connects in the background (503 until ready).
std::variant<std::unique_ptr<store>, open_error> make_store(net::io_context& io,
                                                            const config::settings& s);

} // namespace fk::store
