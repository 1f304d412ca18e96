#include "config/settings.hpp"

#include <algorithm>
#include <string_view>
#include <thread>

namespace fk::config {

int effective_threads(const settings& s) noexcept {
    if (s.threads > 0)
        return s.threads;
    // hardware_concurrency() may return 0 when the count is unknown.
    const unsigned cores = std::thread::hardware_concurrency();
    return std::max(1, static_cast<int>(std::min(cores, 1024u)));
}

namespace {
constexpr int min_default_pool_size = 16;
} // namespace

int effective_pool_size(const settings& s) noexcept {
    if (s.postgres.pool_size > 0)
        return s.postgres.pool_size;
    // At least 16 even on small machines: with group commit, each connection is one batch
    // waiting for its WAL flush, and a write that finds every connection busy waits a
    // whole flush longer (docs/postgres.md has the measurement).
    return std::max(min_default_pool_size, 2 * effective_threads(s));
}

std::optional<store_location> parse_store_url(const std::string& url) {
    const std::string_view u = url;
    // A NUL or other control character would silently truncate or corrupt the path or
    // the libpq connection string.
    if (std::any_of(u.begin(), u.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; }))
        return std::nullopt;

    constexpr std::string_view file_prefix = "file:";
    if (u.substr(0, file_prefix.size()) == file_prefix) {
        std::string path(u.substr(file_prefix.size()));
        if (path.empty())
            return std::nullopt;
        return store_location{store_kind::file, std::move(path)};
    }
    // The two URI schemes libpq accepts; everything after the scheme is libpq's to judge
    // (an empty remainder means "all from PG* environment variables").
    for (std::string_view scheme : {"postgresql://", "postgres://"}) {
        if (u.substr(0, scheme.size()) == scheme)
            return store_location{store_kind::postgres, url};
    }
    return std::nullopt;
}

} // namespace fk::config
