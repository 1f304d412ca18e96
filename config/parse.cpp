// The config file (its key table, config/keys.hpp, and the readers it is built from) and
// the command line are parsed here together, ~800 lines: both apply the same value checks
// (listen, store, log level, token file) with the same error wording, kept in one
// anonymous namespace rather than exposed in a header for one other file.
#include "config/parse.hpp"

#include "config/json_depth.hpp"
#include "fence/names.hpp"

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <system_error>

namespace fk::config {

namespace {

using json = nlohmann::json;
using error = std::optional<parse_error>;

// Bounds that keep a typo from turning into a resource problem. Kept in one place so that
// docs/configuration.md and the tests can be checked against them.
constexpr std::int64_t max_timeout_ms = 3'600'000; // one hour
constexpr std::int64_t min_header_bytes = 1024;
constexpr std::int64_t max_header_bytes = 1024 * 1024;
constexpr std::int64_t max_body_bytes = 1024 * 1024 * 1024;
constexpr std::int64_t max_connections = 1'000'000;
constexpr std::int64_t max_inflight_requests = 1'000'000;
constexpr std::int64_t max_txn_ops = 10'000;
constexpr std::size_t max_path_bytes = 4096;
constexpr std::int64_t max_threads = 1024;
constexpr std::int64_t max_pool_size = 1024;
constexpr std::int64_t max_queue_limit = 1'000'000;
constexpr std::int64_t max_fence_cache_size = 10'000'000;
constexpr std::int64_t max_batch_max = 1024;
constexpr std::int64_t max_batch_concurrency = 1024;
constexpr std::int64_t max_batch_overlap_ms = 60'000;
constexpr std::int64_t max_file_io_threads = 256;
constexpr std::int64_t max_redo_rows = 10'000'000;
constexpr std::int64_t max_redo_bytes = std::int64_t{1} << 40; // 1 TiB
constexpr std::int64_t max_far_round_trip_ms = 60'000;
constexpr std::int64_t max_idempotency_retention_s = 366 * 86'400;
constexpr std::int64_t max_idempotency_records = std::int64_t{1} << 40;
constexpr std::int64_t max_idempotency_bytes = std::int64_t{1} << 50;
constexpr std::size_t max_config_file_bytes = 1024 * 1024;
// Our schema is three levels deep; the bound keeps hostile input from costing more than
// a linear scan.
constexpr std::size_t max_json_depth = 16;
constexpr std::size_t max_operation_name = 64;
// auth.clients: bounds on a list that is matched on every request.
constexpr std::size_t max_auth_clients = 1000;
constexpr std::size_t max_client_prefixes = 100;
constexpr std::size_t max_tls_identity_bytes = 1024;
constexpr std::size_t max_host_bytes = 253;

// Every message is one line: control bytes that reach it from the parser's own text (an
// option name such as "--listen\r", quoted by Boost.Program_options) are escaped here too.
parse_error fail(std::string message) {
    std::string line;
    line.reserve(message.size());
    for (const char ch : message) {
        const auto c = static_cast<unsigned char>(ch);
        if (c < 0x20 || c == 0x7f) {
            constexpr char hex[] = "0123456789abcdef";
            line += "\\x";
            line += hex[c >> 4];
            line += hex[c & 0xf];
        } else {
            line += ch;
        }
    }
    return parse_error{std::move(line)};
}

// Quotes user input for an error message: control bytes escaped, long values cut, so a
// message is always one readable line.
std::string in_quotes(std::string_view s) {
    constexpr std::size_t limit = 120;
    std::string out = "'";
    for (std::size_t i = 0; i < s.size() && i < limit; ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c < 0x20 || c == 0x7f) {
            constexpr char hex[] = "0123456789abcdef";
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 0xf];
        } else {
            out += static_cast<char>(c);
        }
    }
    if (s.size() > limit)
        out += "...";
    out += '\'';
    return out;
}

// A JSON value as shown in an error message.
std::string shown(const json& v) {
    std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
    if (text.size() > 120)
        text = text.substr(0, 120) + "...";
    return text;
}

std::string join(const std::string& parent, std::string_view key) {
    std::string k = in_quotes(key);
    k = k.substr(1, k.size() - 2); // the escaping without the quotes
    return parent.empty() ? k : parent + "." + k;
}

const char* type_name(const json& v) {
    switch (v.type()) {
    case json::value_t::null:
        return "null";
    case json::value_t::object:
        return "an object";
    case json::value_t::array:
        return "an array";
    case json::value_t::string:
        return "a string";
    case json::value_t::boolean:
        return "a boolean";
    case json::value_t::binary:
        return "binary";
    case json::value_t::discarded:
        return "nothing";
    default:
        return "a number";
    }
}

// --- scalar readers -------------------------------------------------------------------

error read_int(const json& v, const std::string& path, std::int64_t lo, std::int64_t hi,
               std::int64_t& out) {
    if (v.is_number_unsigned()) {
        const auto u = v.get<std::uint64_t>();
        if (u <= static_cast<std::uint64_t>(hi) && static_cast<std::int64_t>(u) >= lo) {
            out = static_cast<std::int64_t>(u);
            return std::nullopt;
        }
    } else if (v.is_number_integer()) {
        const auto i = v.get<std::int64_t>();
        if (i >= lo && i <= hi) {
            out = i;
            return std::nullopt;
        }
    }
    return fail(path + ": expected an integer between " + std::to_string(lo) + " and " +
                std::to_string(hi) + ", got " + shown(v));
}

template <class T>
error read_number(const json& v, const std::string& path, std::int64_t lo, std::int64_t hi,
                  T& out) {
    std::int64_t n = 0;
    if (auto e = read_int(v, path, lo, hi, n))
        return e;
    out = static_cast<T>(n);
    return std::nullopt;
}

error read_string(const json& v, const std::string& path, std::string& out) {
    if (!v.is_string())
        return fail(path + ": expected a string, got " + type_name(v));
    out = v.get<std::string>();
    return std::nullopt;
}

error read_bool(const json& v, const std::string& path, bool& out) {
    if (!v.is_boolean())
        return fail(path + ": expected true or false, got " + type_name(v));
    out = v.get<bool>();
    return std::nullopt;
}

error expect_object(const json& v, const std::string& path) {
    if (!v.is_object())
        return fail(path + ": expected an object, got " + type_name(v));
    return std::nullopt;
}

parse_error unknown_key(const std::string& path) {
    return fail("unknown key '" + path + "'");
}

const std::string listen_expectation =
    "expected HOST:PORT or [IPv6]:PORT with a port from 0 to 65535, got ";
const std::string store_expectation = "expected file:PATH or a postgresql:// URI, got ";
const std::string level_expectation = "expected one of debug, info, warn, error, got ";

error apply_listen(std::string_view text, const std::string& name, settings& into) {
    auto hp = parse_listen(text);
    if (!hp)
        return fail(name + ": " + listen_expectation + in_quotes(text));
    into.listen_host = std::move(hp->first);
    into.listen_port = hp->second;
    return std::nullopt;
}

error apply_store(const std::string& text, const std::string& name, settings& into) {
    if (!parse_store_url(text))
        return fail(name + ": " + store_expectation + in_quotes(text));
    into.store = text;
    return std::nullopt;
}

// A path: non-empty, bounded, no control characters (a NUL would cut it short).
error apply_path(const std::string& text, const std::string& name,
                 std::optional<std::string>& into) {
    const bool ok = !text.empty() && text.size() <= max_path_bytes &&
                    std::none_of(text.begin(), text.end(), [](char c) {
                        const auto u = static_cast<unsigned char>(c);
                        return u < 0x20 || u == 0x7f;
                    });
    if (!ok)
        return fail(name + ": expected a file path (1 to " + std::to_string(max_path_bytes) +
                    " bytes, no control characters), got " + in_quotes(text));
    into = text;
    return std::nullopt;
}

error apply_auth_token_file(const std::string& text, const std::string& name, settings& into) {
    return apply_path(text, name, into.auth_token_file);
}

error apply_tls_version(const std::string& text, const std::string& name, settings& into) {
    if (text == "1.2")
        into.tls.min_version = tls_version::v1_2;
    else if (text == "1.3")
        into.tls.min_version = tls_version::v1_3;
    else
        return fail(name + ": expected \"1.2\" or \"1.3\", got " + in_quotes(text));
    return std::nullopt;
}

// What the file and the flags say together about TLS: a certificate needs its key, and
// a client CA (mTLS) means nothing without a TLS listener.
error check_tls(const tls_settings& t) {
    if (t.cert_file && !t.key_file)
        return fail("tls.cert_file (--tls-cert) is set but tls.key_file (--tls-key) is not");
    if (t.key_file && !t.cert_file)
        return fail("tls.key_file (--tls-key) is set but tls.cert_file (--tls-cert) is not");
    if (t.client_ca_file && !t.cert_file)
        return fail("tls.client_ca_file needs tls.cert_file and tls.key_file (mTLS is TLS with "
                    "client certificates)");
    return std::nullopt;
}

// Scoped clients replace the single token rather than sit beside it: with both, which one
// a request's token matched would decide its scope, and a leaked shared token would undo
// every scope. An mTLS identity means nothing without mTLS.
error check_auth(const settings& s) {
    if (s.auth_clients.empty())
        return std::nullopt;
    if (s.auth_token_file)
        return fail("auth.clients and auth_token_file (--auth-token-file) cannot be combined: "
                    "give the shared token its own client with write_prefixes [\"\"] instead");
    if (!s.tls.client_ca_file)
        for (const auto& c : s.auth_clients)
            if (c.tls_identity)
                return fail("auth.clients: client " + in_quotes(c.name) +
                            " has a tls_identity, which needs mTLS (tls.client_ca_file)");
    return std::nullopt;
}

error apply_level(std::string_view text, const std::string& name, settings& into) {
    auto l = parse_log_level(text);
    if (!l)
        return fail(name + ": " + level_expectation + in_quotes(text));
    into.log_level = *l;
    return std::nullopt;
}

bool is_sql_identifier(std::string_view s) {
    if (s.empty() || s.size() > 63)
        return false;
    auto lower_or_underscore = [](char c) { return (c >= 'a' && c <= 'z') || c == '_'; };
    if (!lower_or_underscore(s.front()))
        return false;
    return std::all_of(s.begin(), s.end(),
                       [&](char c) { return lower_or_underscore(c) || (c >= '0' && c <= '9'); });
}

bool is_operation_name(std::string_view s) {
    if (s.empty() || s.size() > max_operation_name)
        return false;
    return std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_' || c == '.' || c == '-';
    });
}

// --- sections ---------------------------------------------------------------------------

error apply_operations(const json& obj, const std::string& path,
                       std::map<std::string, operation>& out) {
    if (auto e = expect_object(obj, path))
        return e;
    for (const auto& [name, def] : obj.items()) {
        const std::string p = join(path, name);
        if (!is_operation_name(name))
            return fail(path + ": invalid operation name " + in_quotes(name) +
                        " (1 to 64 characters from A-Z a-z 0-9 _ . -)");
        if (auto e = expect_object(def, p))
            return e;
        operation op;
        bool has_sql = false;
        for (const auto& [key, v] : def.items()) {
            const std::string kp = join(p, key);
            if (key == "expose_errors") {
                if (auto e = read_bool(v, kp, op.expose_errors))
                    return e;
                continue;
            }
            if (key != "sql")
                return unknown_key(kp);
            if (auto e = read_string(v, kp, op.sql))
                return e;
            // libpq takes the statement as a C string: a NUL would silently cut it.
            if (op.sql.find('\0') != std::string::npos)
                return fail(kp + ": must not contain a NUL character");
            const bool blank = std::all_of(op.sql.begin(), op.sql.end(), [](char c) {
                return c == ' ' || c == '\t' || c == '\n' || c == '\r';
            });
            if (blank)
                return fail(kp + ": must be a non-empty SQL statement");
            has_sql = true;
        }
        if (!has_sql)
            return fail(join(p, "sql") + ": missing (each operation needs an \"sql\" string)");
        out[name] = std::move(op);
    }
    return std::nullopt;
}

// auth.clients (docs/configuration.md, "`auth`"): every client is checked here except its
// token file, which proxy/preflight.hpp reads (and checks for tokens shared by two clients).
error read_prefixes(const json& v, const std::string& p, std::vector<std::string>& out) {
    if (!v.is_array())
        return fail(p + ": expected an array of strings, got " + type_name(v));
    if (v.size() > max_client_prefixes)
        return fail(p + ": at most " + std::to_string(max_client_prefixes) + " prefixes");
    for (const auto& e : v) {
        std::string prefix;
        if (auto err = read_string(e, p + "[]", prefix))
            return err;
        // "" is every name; anything else must be a valid lock name, as the listing's
        // prefix must (it is passed to the store as one).
        if (!prefix.empty() && fence::validate_lock_name(prefix) != errc::ok)
            return fail(p + ": " + in_quotes(prefix) +
                        " is not a valid name prefix (UTF-8, no control characters, at most "
                        "1024 bytes)");
        out.push_back(std::move(prefix));
    }
    return std::nullopt;
}

error apply_auth_clients(const json& v, const std::string& path, std::vector<auth_client>& out) {
    if (!v.is_array())
        return fail(path + ": expected an array of client objects, got " + type_name(v));
    if (v.empty())
        return fail(path + ": list at least one client (leave the key out for no scoped clients)");
    if (v.size() > max_auth_clients)
        return fail(path + ": at most " + std::to_string(max_auth_clients) + " clients");
    std::vector<auth_client> clients;
    std::set<std::string> names, identities, token_files;
    for (std::size_t i = 0; i < v.size(); ++i) {
        const std::string p = path + "[" + std::to_string(i) + "]";
        if (auto e = expect_object(v[i], p))
            return e;
        auth_client c;
        for (const auto& [key, val] : v[i].items()) {
            const std::string kp = join(p, key);
            error e;
            if (key == "name") {
                e = read_string(val, kp, c.name);
                if (!e && !is_operation_name(c.name))
                    e = fail(kp + ": expected 1 to 64 characters from A-Z a-z 0-9 _ . -, got " +
                             in_quotes(c.name));
            } else if (key == "token_file") {
                std::string text;
                e = read_string(val, kp, text);
                if (!e)
                    e = apply_path(text, kp, c.token_file);
            } else if (key == "tls_identity") {
                std::string id;
                e = read_string(val, kp, id);
                const bool ok = !id.empty() && id.size() <= max_tls_identity_bytes &&
                                std::none_of(id.begin(), id.end(), [](char ch) {
                                    const auto u = static_cast<unsigned char>(ch);
                                    return u < 0x20 || u == 0x7f;
                                });
                if (!e && !ok)
                    e = fail(kp + ": expected 1 to 1024 bytes without control characters");
                if (!e)
                    c.tls_identity = std::move(id);
            } else if (key == "write_prefixes") {
                e = read_prefixes(val, kp, c.write_prefixes);
            } else if (key == "read_prefixes") {
                e = read_prefixes(val, kp, c.read_prefixes);
            } else if (key == "metrics") {
                e = read_bool(val, kp, c.metrics);
            } else if (key == "admin") {
                e = read_bool(val, kp, c.admin);
            } else {
                e = unknown_key(kp);
            }
            if (e)
                return e;
        }
        if (c.name.empty())
            return fail(join(p, "name") + ": missing (each client needs a name, for the logs)");
        if (c.token_file.has_value() == c.tls_identity.has_value())
            return fail(p + ": give exactly one of \"token_file\" and \"tls_identity\" (client " +
                        in_quotes(c.name) + ")");
        if (!names.insert(c.name).second)
            return fail(p + ": client name " + in_quotes(c.name) + " is used twice");
        if (c.tls_identity && !identities.insert(*c.tls_identity).second)
            return fail(p + ": tls_identity " + in_quotes(*c.tls_identity) +
                        " is given to two clients");
        if (c.token_file && !token_files.insert(*c.token_file).second)
            return fail(p + ": token_file " + in_quotes(*c.token_file) +
                        " is given to two clients");
        clients.push_back(std::move(c));
    }
    out = std::move(clients);
    return std::nullopt;
}

template <class Ref>
config_key integer_key(std::string_view path, std::int64_t lo, std::int64_t hi,
                       std::string_view description, Ref ref) {
    config_key k{path, key_type::integer, lo, hi, {}, {}, description, {}, {}};
    k.apply = [=](const json& v, const std::string& p, settings& s) {
        return read_number(v, p, lo, hi, ref(s));
    };
    k.value = [=](const settings& s) { return json(ref(s)); };
    return k;
}

// An integer key for a std::chrono duration (milliseconds or seconds: Duration's unit).
template <class Duration, class Ref>
config_key duration_key(std::string_view path, std::int64_t lo, std::int64_t hi,
                        std::string_view description, Ref ref) {
    config_key k{path, key_type::integer, lo, hi, {}, {}, description, {}, {}};
    k.apply = [=](const json& v, const std::string& p, settings& s) -> error {
        std::int64_t n = 0;
        if (auto e = read_int(v, p, lo, hi, n))
            return e;
        ref(s) = Duration{n};
        return std::nullopt;
    };
    k.value = [=](const settings& s) { return json(ref(s).count()); };
    return k;
}

template <class Ref>
config_key millis_key(std::string_view path, std::int64_t lo, std::int64_t hi,
                      std::string_view description, Ref ref) {
    return duration_key<millis>(path, lo, hi, description, ref);
}

template <class Ref>
config_key seconds_key(std::string_view path, std::int64_t lo, std::int64_t hi,
                       std::string_view description, Ref ref) {
    return duration_key<std::chrono::seconds>(path, lo, hi, description, ref);
}

// A string key: `check` validates the text and stores it.
config_key string_key(std::string_view path, std::string_view range, std::string_view description,
                      std::function<error(const std::string&, const std::string&, settings&)> check,
                      std::function<json(const settings&)> value) {
    config_key k{path, key_type::string, 0, 0, range, {}, description, {}, std::move(value)};
    k.apply = [check = std::move(check)](const json& v, const std::string& p,
                                         settings& s) -> error {
        std::string text;
        if (auto e = read_string(v, p, text))
            return e;
        return check(text, p, s);
    };
    return k;
}

config_key section(std::string_view path, std::string_view default_note,
                   std::string_view description) {
    return config_key{path, key_type::object, 0, 0, {}, default_note, description, {}, {}};
}

error apply_schema(const std::string& schema, const std::string& p, settings& s) {
    if (!is_sql_identifier(schema))
        return fail(p +
                    ": expected a lower-case SQL identifier ([a-z_][a-z0-9_]*, at "
                    "most 63 characters), got " +
                    in_quotes(schema));
    // PostgreSQL refuses to create schemas named pg_*.
    if (schema.rfind("pg_", 0) == 0)
        return fail(p + ": the prefix 'pg_' is reserved by PostgreSQL, got " + in_quotes(schema));
    s.postgres.schema = schema;
    return std::nullopt;
}

error apply_flush(const std::string& text, const std::string& p, settings& s) {
    if (text == "syncfs")
        s.file.flush = file_flush::syncfs;
    else if (text == "fsync")
        s.file.flush = file_flush::fsync;
    else
        return fail(p + ": expected \"syncfs\" or \"fsync\", got " + in_quotes(text));
    return std::nullopt;
}

std::vector<config_key> make_keys() {
    // Each accessor is generic so that it serves both the const and the mutable settings.
    std::vector<config_key> k;
    k.push_back(string_key(
        "listen", "`HOST:PORT` or `[IPv6]:PORT`, port 0 to 65535", "address to listen on",
        [](const std::string& t, const std::string& p, settings& s) {
            return apply_listen(t, p, s);
        },
        [](const settings& s) {
            const bool v6 = s.listen_host.find(':') != std::string::npos;
            return json((v6 ? "[" + s.listen_host + "]" : s.listen_host) + ":" +
                        std::to_string(s.listen_port));
        }));
    k.push_back(string_key(
        "store", "`file:PATH`, `postgresql://...`, `postgres://...`", "where data and fences live",
        [](const std::string& t, const std::string& p, settings& s) {
            return apply_store(t, p, s);
        },
        [](const settings& s) { return json(s.store); }));
    k.push_back(integer_key(
        "threads", 0, max_threads, "I/O threads; 0: one per core",
        [](auto& s) -> auto& { return s.threads; }));
    k.push_back(string_key(
        "log_level", "`debug`, `info`, `warn`, `error`", "the least severe log line written",
        [](const std::string& t, const std::string& p, settings& s) {
            return apply_level(t, p, s);
        },
        [](const settings& s) { return json(to_string(s.log_level)); }));
    k.push_back(string_key(
        "auth_token_file", "a path, 1 to 4096 bytes, no control characters",
        "bearer token file; unset: $FENCEKEEPER_AUTH_TOKEN, else no auth",
        [](const std::string& t, const std::string& p, settings& s) {
            return apply_auth_token_file(t, p, s);
        },
        [](const settings& s) { return s.auth_token_file ? json(*s.auth_token_file) : json(); }));
    k.push_back(millis_key(
        "shutdown_timeout_ms", 1, max_timeout_ms, "drain deadline on SIGTERM and SIGINT",
        [](auto& s) -> auto& { return s.shutdown_timeout; }));
    k.push_back(section("limits", "", "HTTP limits and timeouts"));
    k.push_back(section("postgres", "", "PostgreSQL store settings"));
    k.push_back(section("file", "", "file store settings"));
    k.push_back(section("idempotency", "", "Idempotency-Key records"));
    k.push_back(section("tls", "", "TLS and mTLS on the listener"));
    k.push_back(section("auth", "", "scoped clients"));
    config_key clients{"auth.clients",
                       key_type::array,
                       0,
                       0,
                       "1 to 1000 client objects",
                       {},
                       "scoped callers: who each is, and which names it may read and write",
                       {},
                       {}};
    clients.apply = [](const json& v, const std::string& p, settings& s) {
        return apply_auth_clients(v, p, s.auth_clients);
    };
    clients.value = [](const settings& s) {
        if (s.auth_clients.empty())
            return json();
        json a = json::array();
        for (const auto& c : s.auth_clients) {
            json o{{"name", c.name},
                   {"write_prefixes", c.write_prefixes},
                   {"read_prefixes", c.read_prefixes},
                   {"metrics", c.metrics},
                   {"admin", c.admin}};
            if (c.token_file)
                o["token_file"] = *c.token_file;
            if (c.tls_identity)
                o["tls_identity"] = *c.tls_identity;
            a.push_back(std::move(o));
        }
        return a;
    };
    k.push_back(std::move(clients));
    config_key ops = section("operations", "none", "named SQL statements");
    ops.apply = [](const json& v, const std::string& p, settings& s) {
        return apply_operations(v, p, s.operations);
    };
    k.push_back(std::move(ops));

    k.push_back(integer_key(
        "limits.max_header_bytes", min_header_bytes, max_header_bytes,
        "request line plus headers; 431 above",
        [](auto& s) -> auto& { return s.http.max_header_bytes; }));
    k.push_back(integer_key(
        "limits.max_body_bytes", 1, max_body_bytes, "request body; 413 above",
        [](auto& s) -> auto& { return s.http.max_body_bytes; }));
    k.push_back(millis_key(
        "limits.header_timeout_ms", 1, max_timeout_ms, "to receive a request head",
        [](auto& s) -> auto& { return s.http.header_timeout; }));
    k.push_back(millis_key(
        "limits.idle_timeout_ms", 1, max_timeout_ms, "keep-alive wait for the next request",
        [](auto& s) -> auto& { return s.http.idle_timeout; }));
    k.push_back(millis_key(
        "limits.body_timeout_ms", 1, max_timeout_ms, "to receive a body",
        [](auto& s) -> auto& { return s.http.body_timeout; }));
    k.push_back(millis_key(
        "limits.write_timeout_ms", 1, max_timeout_ms, "to send a response",
        [](auto& s) -> auto& { return s.http.write_timeout; }));
    k.push_back(millis_key(
        "limits.handshake_timeout_ms", 1, max_timeout_ms, "TLS only: to complete the handshake",
        [](auto& s) -> auto& { return s.http.handshake_timeout; }));
    k.push_back(integer_key(
        "limits.max_connections", 1, max_connections, "open client connections",
        [](auto& s) -> auto& { return s.http.max_connections; }));
    k.push_back(integer_key(
        "limits.max_inflight_requests", 1, max_inflight_requests,
        "requests served at once; 503 above",
        [](auto& s) -> auto& { return s.http.max_inflight_requests; }));
    k.push_back(integer_key(
        "limits.max_txn_ops", 1, max_txn_ops, "ops in one transaction; 400 above",
        [](auto& s) -> auto& { return s.http.max_txn_ops; }));
    k.push_back(integer_key(
        "limits.max_txn_op_body_bytes", 0, max_body_bytes,
        "one put's body in a transaction; 413 above",
        [](auto& s) -> auto& { return s.http.max_txn_op_body_bytes; }));

    k.push_back(string_key(
        "postgres.schema",
        "lower-case SQL identifier: a letter or `_`, then letters, digits or `_`, at most 63 "
        "characters, not starting with `pg_`",
        "the schema fencekeeper creates and migrates", apply_schema,
        [](const settings& s) { return json(s.postgres.schema); }));
    k.push_back(integer_key(
        "postgres.pool_size", 0, max_pool_size, "connections; 0: 2 x threads, at least 16",
        [](auto& s) -> auto& { return s.postgres.pool_size; }));
    k.push_back(integer_key(
        "postgres.queue_limit", 0, max_queue_limit, "requests waiting for a connection; 503 above",
        [](auto& s) -> auto& { return s.postgres.queue_limit; }));
    k.push_back(millis_key(
        "postgres.connect_timeout_ms", 1, max_timeout_ms, "to open one connection",
        [](auto& s) -> auto& { return s.postgres.connect_timeout; }));
    k.push_back(millis_key(
        "postgres.statement_timeout_ms", 1, max_timeout_ms, "for one request's statements",
        [](auto& s) -> auto& { return s.postgres.statement_timeout; }));
    k.push_back(integer_key(
        "postgres.fence_cache_size", 1, max_fence_cache_size,
        "locks kept by the stale-rejection cache",
        [](auto& s) -> auto& { return s.postgres.fence_cache_size; }));
    k.push_back(integer_key(
        "postgres.batch_max", 1, max_batch_max, "writes per group-commit statement",
        [](auto& s) -> auto& { return s.postgres.batch_max; }));
    k.push_back(integer_key(
        "postgres.batch_concurrency", 1, max_batch_concurrency,
        "group-commit batches in flight at once",
        [](auto& s) -> auto& { return s.postgres.batch_concurrency; }));
    k.push_back(millis_key(
        "postgres.batch_overlap_ms", 0, max_batch_overlap_ms,
        "a batch beyond the first starts once the newest has run this long",
        [](auto& s) -> auto& { return s.postgres.batch_overlap; }));
    k.push_back(millis_key(
        "postgres.far_round_trip_ms", 0, max_far_round_trip_ms,
        "a round trip at least this long makes the database far; 0: off",
        [](auto& s) -> auto& { return s.postgres.far_round_trip; }));

    k.push_back(string_key("file.flush", "`\"syncfs\"`, `\"fsync\"`",
                           "how a batch's bodies are made durable", apply_flush,
                           [](const settings& s) {
                               return json(s.file.flush == file_flush::syncfs ? "syncfs" : "fsync");
                           }));
    config_key io = integer_key(
        "file.io_threads", 1, max_file_io_threads,
        "threads for the store's blocking file system calls",
        [](auto& s) -> auto& { return s.file.io_threads; });
    io.default_note = "`2` with `\"syncfs\"`, `4` with `\"fsync\"`"; // 0 in settings: by flush
    k.push_back(std::move(io));
    k.push_back(integer_key(
        "file.fence_cache_size", 1, max_fence_cache_size, "locks kept by the stale-rejection cache",
        [](auto& s) -> auto& { return s.file.fence_cache_size; }));
    k.push_back(integer_key(
        "file.max_redo_rows", 1, max_redo_rows,
        "redo rows not yet known durable before writes wait for the flusher",
        [](auto& s) -> auto& { return s.file.max_redo_rows; }));
    k.push_back(integer_key(
        "file.max_redo_bytes", 1, max_redo_bytes,
        "bytes of those rows' bodies before writes wait for the flusher",
        [](auto& s) -> auto& { return s.file.max_redo_bytes; }));
    const auto path_key = [](std::string_view path, std::string_view description,
                             std::optional<std::string> tls_settings::*member) {
        return string_key(
            path, "a path, 1 to 4096 bytes, no control characters", description,
            [member](const std::string& t, const std::string& p, settings& s) {
                return apply_path(t, p, s.tls.*member);
            },
            [member](const settings& s) {
                const auto& v = s.tls.*member;
                return v ? json(*v) : json();
            });
    };
    k.push_back(path_key("tls.cert_file",
                         "PEM certificate chain, the server's own first; set: TLS only",
                         &tls_settings::cert_file));
    k.push_back(
        path_key("tls.key_file", "PEM private key of that certificate", &tls_settings::key_file));
    k.push_back(path_key("tls.client_ca_file",
                         "PEM CA certificates; set: every client needs a certificate they signed",
                         &tls_settings::client_ca_file));
    k.push_back(string_key("tls.min_version", "`\"1.2\"`, `\"1.3\"`",
                           "the oldest TLS version accepted", apply_tls_version,
                           [](const settings& s) {
                               return json(s.tls.min_version == tls_version::v1_2 ? "1.2" : "1.3");
                           }));
    k.push_back(seconds_key(
        "idempotency.retention_s", 1, max_idempotency_retention_s,
        "how long a write's Idempotency-Key record answers retries",
        [](auto& s) -> auto& { return s.idempotency.retention; }));
    k.push_back(integer_key(
        "idempotency.max_records_per_client", 0, max_idempotency_records,
        "records one client may hold; 0: no bound",
        [](auto& s) -> auto& { return s.idempotency.max_records_per_client; }));
    k.push_back(integer_key(
        "idempotency.max_bytes_per_client", 0, max_idempotency_bytes,
        "bytes of records one client may hold; 0: no bound",
        [](auto& s) -> auto& { return s.idempotency.max_bytes_per_client; }));
    return k;
}

// Applies the members of the object `obj` at `prefix` ("" for the document).
error apply_object(const json& obj, const std::string& prefix, settings& s) {
    for (const auto& [key, v] : obj.items()) {
        const std::string p = join(prefix, key);
        const config_key* k = find_key(prefix.empty() ? key : prefix + "." + key);
        if (!k)
            return unknown_key(p);
        error e;
        if (k->apply)
            e = k->apply(v, p, s);
        else if (!(e = expect_object(v, p)))
            e = apply_object(v, p, s);
        if (e)
            return e;
    }
    return std::nullopt;
}

// nlohmann keeps the last of two equal keys; a config that says two things is an error.
struct duplicate_finder {
    struct frame {
        bool is_object = false;
        std::string path;
        std::set<std::string> keys;
        std::string last_key;
    };
    std::vector<frame> stack;
    std::optional<std::string> duplicate;

    bool operator()(int /*depth*/, json::parse_event_t event, json& parsed) {
        switch (event) {
        case json::parse_event_t::object_start:
        case json::parse_event_t::array_start: {
            std::string path;
            if (!stack.empty())
                path = stack.back().is_object ? join(stack.back().path, stack.back().last_key)
                                              : stack.back().path + "[]";
            stack.push_back(
                frame{event == json::parse_event_t::object_start, std::move(path), {}, {}});
            break;
        }
        case json::parse_event_t::object_end:
        case json::parse_event_t::array_end:
            if (!stack.empty())
                stack.pop_back();
            break;
        case json::parse_event_t::key:
            if (!stack.empty() && parsed.is_string()) {
                frame& top = stack.back();
                top.last_key = parsed.get<std::string>();
                if (!top.keys.insert(top.last_key).second && !duplicate)
                    duplicate = join(top.path, top.last_key);
            }
            break;
        default:
            break;
        }
        return true;
    }
};

// nlohmann's messages start with "[json.exception.parse_error.101] "; the rest names
// the line and column.
std::string without_exception_tag(const char* what) {
    std::string_view s = what;
    if (!s.empty() && s.front() == '[') {
        const auto end = s.find("] ");
        if (end != std::string_view::npos)
            s.remove_prefix(end + 2);
    }
    return std::string(s);
}

error read_config_file(const std::string& path, std::string& out) {
    const std::string name = "config file " + in_quotes(path);
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (ec)
        return fail("cannot read " + name + ": " + ec.message());
    if (std::filesystem::is_directory(status))
        return fail("cannot read " + name + ": it is a directory");
    errno = 0;
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        const int err = errno;
        return fail("cannot read " + name + ": " +
                    (err ? std::generic_category().message(err) : "cannot open"));
    }
    // Bounded read: /dev/zero or a log file passed by mistake must not eat the memory.
    out.assign(max_config_file_bytes + 1, '\0');
    in.read(out.data(), static_cast<std::streamsize>(out.size()));
    if (in.bad())
        return fail("cannot read " + name + ": read error");
    out.resize(static_cast<std::size_t>(in.gcount()));
    if (out.size() > max_config_file_bytes)
        return fail(name + " is larger than 1 MiB");
    return std::nullopt;
}

} // namespace

std::string_view to_string(key_type t) noexcept {
    switch (t) {
    case key_type::integer:
        return "integer";
    case key_type::string:
        return "string";
    case key_type::boolean:
        return "boolean";
    case key_type::object:
        return "object";
    case key_type::array:
        return "array";
    }
    return "unknown";
}

const std::vector<config_key>& config_keys() {
    static const std::vector<config_key> keys = make_keys();
    return keys;
}

const config_key* find_key(std::string_view path) noexcept {
    for (const auto& k : config_keys())
        if (k.path == path)
            return &k;
    return nullptr;
}

std::string range_text(const config_key& k) {
    if (k.type == key_type::integer)
        return std::to_string(k.min) + " to " + std::to_string(k.max);
    return std::string(k.range);
}

std::string default_text(const config_key& k) {
    if (!k.default_note.empty() || !k.value)
        return std::string(k.default_note);
    const json v = k.value(settings{});
    return v.is_null() ? "none" : "`" + v.dump() + "`";
}

std::optional<parse_error> apply_json(std::string_view json_text, settings& into) {
    if (json_nesting_exceeds(json_text, max_json_depth))
        return fail("invalid JSON: nested deeper than " + std::to_string(max_json_depth) +
                    " levels");
    duplicate_finder finder;
    json doc;
    try {
        doc = json::parse(json_text.begin(), json_text.end(), std::ref(finder));
    } catch (const json::exception& ex) {
        return fail("invalid JSON: " + without_exception_tag(ex.what()));
    }
    if (finder.duplicate)
        return fail("duplicate key '" + *finder.duplicate + "'");
    if (!doc.is_object())
        return fail(std::string("the config must be a JSON object, got ") + type_name(doc));

    // Work on a copy so that a failed document leaves `into` untouched.
    settings s = into;
    if (auto e = apply_object(doc, "", s))
        return e;
    into = std::move(s);
    return std::nullopt;
}

std::optional<std::pair<std::string, std::uint16_t>> parse_listen(std::string_view text) {
    std::string_view host;
    std::string_view port;
    if (!text.empty() && text.front() == '[') {
        const auto close = text.find(']');
        if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
            return std::nullopt;
        host = text.substr(1, close - 1);
        port = text.substr(close + 2);
        // An IPv6 literal, optionally with a zone ("fe80::1%eth0").
        const auto percent = host.find('%');
        const std::string_view addr = host.substr(0, percent);
        if (addr.find(':') == std::string_view::npos)
            return std::nullopt;
        const bool addr_ok = std::all_of(addr.begin(), addr.end(), [](char c) {
            return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') ||
                   c == ':' || c == '.';
        });
        if (!addr_ok)
            return std::nullopt;
        if (percent != std::string_view::npos) {
            const std::string_view zone = host.substr(percent + 1);
            const bool zone_ok = !zone.empty() && std::all_of(zone.begin(), zone.end(), [](char c) {
                return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                       c == '_' || c == '.' || c == '-';
            });
            if (!zone_ok)
                return std::nullopt;
        }
    } else {
        const auto colon = text.rfind(':');
        if (colon == std::string_view::npos)
            return std::nullopt;
        host = text.substr(0, colon);
        port = text.substr(colon + 1);
        // A bare IPv6 address is ambiguous ("::1:80"); it must be bracketed.
        const bool host_ok = std::all_of(host.begin(), host.end(), [](char c) {
            return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                   c == '.' || c == '-' || c == '_';
        });
        if (!host_ok)
            return std::nullopt;
    }
    if (host.empty() || host.size() > max_host_bytes)
        return std::nullopt;
    if (port.empty() || port.size() > 5 ||
        !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return std::nullopt;
    unsigned value = 0;
    std::from_chars(port.data(), port.data() + port.size(), value);
    if (value > 65535)
        return std::nullopt;
    return std::pair{std::string(host), static_cast<std::uint16_t>(value)};
}

namespace {

namespace po = boost::program_options;

// The flags, their value names and help lines: the one description --help prints and
// the parser accepts.
const po::options_description& flag_descriptions() {
    static const po::options_description desc = [] {
        po::options_description d("Options", 90, 45);
        const auto text = [](const char* name) {
            return po::value<std::string>()->value_name(name);
        };
        d.add_options()("config", text("FILE"),
                        "JSON config file; it is read first and the flags below override it")(
            "listen", text("HOST:PORT"),
            "address to listen on, [IPv6]:PORT for IPv6 (default 127.0.0.1:8080; port 0 "
            "picks a free port)")("store", text("URL"),
                                  "file:PATH or postgresql://... (default file:./data)")(
            "threads", text("N"), "I/O threads, 1 to 1024 (default: the number of cores)")(
            "log-level", text("LEVEL"), "debug, info, warn or error (default info)")(
            "auth-token-file", text("FILE"),
            "require \"Authorization: Bearer <first line of FILE>\" on /v1/* and /metrics "
            "(default: $FENCEKEEPER_AUTH_TOKEN if set, else no auth); SIGHUP re-reads it")(
            "tls-cert", text("FILE"),
            "serve TLS only, with this PEM certificate chain (needs --tls-key); SIGHUP "
            "re-reads it")("tls-key", text("FILE"), "the PEM private key of --tls-cert")(
            "check-config",
            "validate the config file and flags (and the token and TLS files), print \"config ok\" "
            "and exit 0, or print the problem and exit 2; opens no store and binds no port")(
            "help,h", "print this help and exit")("version", "print the version and exit");
        return d;
    }();
    return desc;
}

// Long flags as "--flag value" or "--flag=value", and -h; no abbreviations, no bundling.
constexpr int flag_style =
    po::command_line_style::allow_long | po::command_line_style::long_allow_adjacent |
    po::command_line_style::long_allow_next | po::command_line_style::allow_short |
    po::command_line_style::allow_dash_for_short | po::command_line_style::short_allow_next;

// The parser's exceptions, worded as the rest of the config errors.
parse_error from_parser(const po::error& ex) {
    if (const auto* unknown = dynamic_cast<const po::unknown_option*>(&ex)) {
        std::string name = unknown->get_option_name();
        name = name.substr(0, name.find('='));
        return fail("unknown flag " + in_quotes(name));
    }
    if (const auto* syntax = dynamic_cast<const po::invalid_command_line_syntax*>(&ex)) {
        const std::string name = syntax->get_option_name();
        switch (syntax->kind()) {
        case po::invalid_command_line_syntax::missing_parameter:
        case po::invalid_command_line_syntax::empty_adjacent_parameter:
            return fail(name + ": missing value");
        case po::invalid_command_line_syntax::extra_parameter:
            return fail(name + ": takes no value");
        default:
            break;
        }
    }
    return fail(ex.what());
}

} // namespace

std::variant<command_line, parse_error> parse_command_line(const std::vector<std::string>& args) {
    // The parser reads "--" as the end of the flags; fencekeeper takes no arguments after
    // flags, so it is a mistyped flag.
    if (std::find(args.begin(), args.end(), "--") != args.end())
        return fail("unknown flag '--'");
    po::parsed_options parsed{nullptr};
    try {
        parsed = po::command_line_parser(args).options(flag_descriptions()).style(flag_style).run();
    } catch (const po::error& ex) {
        return from_parser(ex);
    }

    struct flag_value {
        std::string flag;
        std::string value;
    };
    command_line cl;
    std::vector<flag_value> values; // in command-line order, applied after the file
    for (const auto& opt : parsed.options) {
        if (opt.position_key >= 0 || opt.string_key.empty())
            return fail("unexpected argument " +
                        in_quotes(opt.original_tokens.empty() ? "" : opt.original_tokens[0]) +
                        " (see --help)");
        const std::string flag = "--" + opt.string_key;
        if (opt.value.empty()) {
            (flag == "--help"      ? cl.show_help
             : flag == "--version" ? cl.show_version
                                   : cl.check_config) = true;
            continue;
        }
        // "--listen --help": the parser takes the next word whatever it is; a value given
        // as its own word must not start with "--" (use --flag=VALUE for that).
        const std::string& value = opt.value.front();
        if (value.empty() || (opt.original_tokens.size() == 2 && value.rfind("--", 0) == 0))
            return fail(flag + ": missing value");
        if (flag == "--config") {
            if (cl.config_file)
                return fail("--config: given more than once");
            cl.config_file = value;
        } else {
            values.push_back({flag, value});
        }
    }
    // Help and version must work whatever else is on the line or in the file.
    if (cl.show_help || cl.show_version)
        return cl;

    if (cl.config_file) {
        std::string text;
        if (auto e = read_config_file(*cl.config_file, text))
            return *e;
        if (auto e = apply_json(text, cl.values))
            return fail("config file " + in_quotes(*cl.config_file) + ": " + e->message);
    }
    for (const auto& [flag, value] : values) {
        error e;
        if (flag == "--listen") {
            e = apply_listen(value, flag, cl.values);
        } else if (flag == "--store") {
            e = apply_store(value, flag, cl.values);
        } else if (flag == "--log-level") {
            e = apply_level(value, flag, cl.values);
        } else if (flag == "--auth-token-file") {
            e = apply_auth_token_file(value, flag, cl.values);
        } else if (flag == "--tls-cert") {
            e = apply_path(value, flag, cl.values.tls.cert_file);
        } else if (flag == "--tls-key") {
            e = apply_path(value, flag, cl.values.tls.key_file);
        } else if (flag == "--threads") {
            const bool digits =
                value.size() <= 4 && std::all_of(value.begin(), value.end(),
                                                 [](char c) { return c >= '0' && c <= '9'; });
            int n = 0;
            if (digits)
                std::from_chars(value.data(), value.data() + value.size(), n);
            if (!digits || n < 1 || n > max_threads)
                e = fail("--threads: expected an integer between 1 and " +
                         std::to_string(max_threads) + ", got " + in_quotes(value));
            else
                cl.values.threads = n;
        }
        if (e)
            return *e;
    }
    if (auto e = check_tls(cl.values.tls))
        return *e;
    if (auto e = check_auth(cl.values))
        return *e;
    return cl;
}

std::string usage_text() {
    std::ostringstream out;
    out << "Usage: fencekeeper [OPTIONS]\n\n"
           "A fencing-aware HTTP storage proxy: a write is applied only when its fencing token "
           "is at\nleast the highest token already accepted for its lock.\n\n"
        << flag_descriptions()
        << "\nFlags take their value as \"--flag value\" or \"--flag=value\"; the last one "
           "given wins.\nEvery config key is described in docs/configuration.md.\n";
    return out.str();
}

} // namespace fk::config
