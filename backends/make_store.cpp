#include "backends/make_store.hpp"

#include "backends/file/file_store.hpp"
#include "backends/idem_quota.hpp"
#include "backends/postgres/postgres_store.hpp"

namespace fk::store {

namespace {

std::variant<std::unique_ptr<store>, open_error> open_store(net::io_context& io,
                                                            const config::settings& s) {
    auto location = config::parse_store_url(s.store);
    if (!location)
        return open_error{"store: '" + s.store +
                          "' is neither file:PATH nor postgresql://... (postgres://...)"};
    if (location->kind == config::store_kind::file)
        return open_file_store(io, location->path_or_uri,
                               file_store_options{.io_threads = s.file.io_threads,
                                                  .flush = s.file.flush,
                                                  .fence_cache_size = s.file.fence_cache_size,
                                                  .idempotency_retention = s.idempotency.retention,
                                                  .max_redo_rows = s.file.max_redo_rows,
                                                  .max_redo_bytes = s.file.max_redo_bytes});
    return open_postgres_store(io, s);
}

} // namespace

std::variant<std::unique_ptr<store>, open_error> make_store(net::io_context& io,
                                                            const config::settings& s) {
    auto opened = open_store(io, s);
    const idem_limits limits{static_cast<std::uint64_t>(s.idempotency.max_records_per_client),
                             static_cast<std::uint64_t>(s.idempotency.max_bytes_per_client),
                             s.idempotency.retention};
    if (!limits.any() || !std::holds_alternative<std::unique_ptr<store>>(opened))
        return opened;
    return std::unique_ptr<store>(std::make_unique<idem_quota>(
        io, std::move(std::get<std::unique_ptr<store>>(opened)), limits));
}

} // namespace fk::store
