#pragma once
// What config/ parses with, shared by the config file's key table (keys.cpp) and the
// parsers of the file and the command line (parse.cpp), so that both apply the same
// checks with the same wording: the bounds on values, the JSON readers, and the
// appliers of values that both a flag and a key set (listen, store, log level, token
// file, TLS). Not for use outside config/.

#include "config/keys.hpp"
#include "config/settings.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fk::config::detail {

using json = nlohmann::json;
using error = std::optional<parse_error>;

// Bounds that keep a typo from turning into a resource problem. Kept in one place so that
// docs/configuration.md and the tests can be checked against them.
inline constexpr std::int64_t max_timeout_ms = 3'600'000; // one hour
inline constexpr std::int64_t min_header_bytes = 1024;
inline constexpr std::int64_t max_header_bytes = 1024 * 1024;
inline constexpr std::int64_t max_body_bytes = 1024 * 1024 * 1024;
inline constexpr std::int64_t max_connections = 1'000'000;
inline constexpr std::int64_t max_inflight_requests = 1'000'000;
inline constexpr std::int64_t max_txn_ops = 10'000;
inline constexpr std::size_t max_path_bytes = 4096;
inline constexpr std::int64_t max_threads = 1024;
inline constexpr std::int64_t max_pool_size = 1024;
inline constexpr std::int64_t max_queue_limit = 1'000'000;
inline constexpr std::int64_t max_fence_cache_size = 10'000'000;
inline constexpr std::int64_t max_batch_max = 1024;
inline constexpr std::int64_t max_batch_concurrency = 1024;
inline constexpr std::int64_t max_batch_overlap_ms = 60'000;
inline constexpr std::int64_t max_file_io_threads = 256;
inline constexpr std::int64_t max_redo_rows = 10'000'000;
inline constexpr std::int64_t max_redo_bytes = std::int64_t{1} << 40; // 1 TiB
inline constexpr std::int64_t max_far_round_trip_ms = 60'000;
inline constexpr std::int64_t max_idempotency_retention_s = 366 * 86'400;
inline constexpr std::int64_t max_idempotency_records = std::int64_t{1} << 40;
inline constexpr std::int64_t max_idempotency_bytes = std::int64_t{1} << 50;
inline constexpr std::size_t max_config_file_bytes = 1024 * 1024;
// Our schema is three levels deep; the bound keeps hostile input from costing more than
// a linear scan.
inline constexpr std::size_t max_json_depth = 16;
inline constexpr std::size_t max_operation_name = 64;
// auth.clients: bounds on a list that is matched on every request.
inline constexpr std::size_t max_auth_clients = 1000;
inline constexpr std::size_t max_client_prefixes = 100;
inline constexpr std::size_t max_tls_identity_bytes = 1024;
inline constexpr std::size_t max_host_bytes = 253;

// Every message is one line: control bytes that reach it from the parser's own text (an
// option name such as "--listen\r", quoted by Boost.Program_options) are escaped here too.
parse_error fail(std::string message);

// Quotes user input for an error message: control bytes escaped, long values cut, so a
// message is always one readable line.
std::string in_quotes(std::string_view s);

// A JSON value as shown in an error message.
std::string shown(const json& v);

std::string join(const std::string& parent, std::string_view key);

const char* type_name(const json& v);

error read_int(const json& v, const std::string& path, std::int64_t lo, std::int64_t hi,
               std::int64_t& out);

// read_int into any integer field.
template <class T>
error read_number(const json& v, const std::string& path, std::int64_t lo, std::int64_t hi,
                  T& out) {
    std::int64_t n = 0;
    if (auto e = read_int(v, path, lo, hi, n))
        return e;
    out = static_cast<T>(n);
    return std::nullopt;
}

error read_string(const json& v, const std::string& path, std::string& out);

error read_bool(const json& v, const std::string& path, bool& out);

error expect_object(const json& v, const std::string& path);

parse_error unknown_key(const std::string& path);

inline const std::string listen_expectation =
    "expected HOST:PORT or [IPv6]:PORT with a port from 0 to 65535, got ";

inline const std::string store_expectation = "expected file:PATH or a postgresql:// URI, got ";

inline const std::string level_expectation = "expected one of debug, info, warn, error, got ";

error apply_listen(std::string_view text, const std::string& name, settings& into);

error apply_store(const std::string& text, const std::string& name, settings& into);

// A path: non-empty, bounded, no control characters (a NUL would cut it short).
error apply_path(const std::string& text, const std::string& name,
                 std::optional<std::string>& into);

error apply_auth_token_file(const std::string& text, const std::string& name, settings& into);

error apply_tls_version(const std::string& text, const std::string& name, settings& into);

// What the file and the flags say together about TLS: a certificate needs its key, and
// a client CA (mTLS) means nothing without a TLS listener.
error check_tls(const tls_settings& t);

// Scoped clients replace the single token rather than sit beside it: with both, which one
// a request's token matched would decide its scope, and a leaked shared token would undo
// every scope. An mTLS identity means nothing without mTLS.
error check_auth(const settings& s);

error apply_level(std::string_view text, const std::string& name, settings& into);

bool is_sql_identifier(std::string_view s);

bool is_operation_name(std::string_view s);

} // namespace fk::config::detail
