// The config file's keys (config/keys.hpp): the one table that the parser applies, the
// documentation lists and --help describes, with each key's bounds and default.
#include "config/keys.hpp"

#include "config/values.hpp"
#include "fence/names.hpp"

#include <functional>
#include <set>

namespace fk::config {

namespace {

using namespace detail;

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

} // namespace fk::config
