#include "backends/make_store.hpp"

#include "backends/file/file_store.hpp"
#include "backends/postgres/postgres_store.hpp"

namespace fk::store {

std::variant<std::unique_ptr<store>, open_error> make_store(net::io_context& io,
                                                            const config::settings& s) {
    auto location = config::parse_store_url(s.store);
    if (!location)
        return open_error{"store: '" + s.store +
                          "' is neither file:PATH nor postgresql://... (postgres://...)"};
    if (location->kind == config::store_kind::file)
        return open_file_store(
            io, location->path_or_uri,
            file_store_options{.io_threads = s.file.io_threads,
                               .flush = s.file.flush,
                               .fence_cache_size = s.file.fence_cache_size,
                               .idempotency_retention = s.idempotency.retention});
    return open_postgres_store(io, s);
}

} // namespace fk::store
