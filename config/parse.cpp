#include "config/parse.hpp"

#include "config/json_depth.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
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
constexpr std::size_t max_path_bytes = 4096;
constexpr std::int64_t max_threads = 1024;
constexpr std::int64_t max_pool_size = 1024;
constexpr std::int64_t max_queue_limit = 1'000'000;
constexpr std::int64_t max_fence_cache_size = 10'000'000;
constexpr std::int64_t max_batch_max = 1024;
constexpr std::int64_t max_batch_concurrency = 1024;
constexpr std::int64_t max_batch_overlap_ms = 60'000;
constexpr std::int64_t max_file_io_threads = 256;
constexpr std::int64_t max_far_round_trip_ms = 60'000;
constexpr std::size_t max_config_file_bytes = 1024 * 1024;
// Our schema is three levels deep; the bound keeps hostile input from costing more than
// a linear scan.
constexpr std::size_t max_json_depth = 16;
constexpr std::size_t max_operation_name = 64;
constexpr std::size_t max_host_bytes = 253;

parse_error fail(std::string message) {
    return parse_error{std::move(message)};
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

error read_millis(const json& v, const std::string& path, millis& out) {
    std::int64_t n = 0;
    if (auto e = read_int(v, path, 1, max_timeout_ms, n))
        return e;
    out = millis{n};
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
error apply_auth_token_file(const std::string& text, const std::string& name, settings& into) {
    const bool ok = !text.empty() && text.size() <= max_path_bytes &&
                    std::none_of(text.begin(), text.end(), [](char c) {
                        const auto u = static_cast<unsigned char>(c);
                        return u < 0x20 || u == 0x7f;
                    });
    if (!ok)
        return fail(name + ": expected a file path (1 to " + std::to_string(max_path_bytes) +
                    " bytes, no control characters), got " + in_quotes(text));
    into.auth_token_file = text;
    return std::nullopt;
}

error apply_level(std::string_view text, const std::string& name, settings& into) {
    auto l = logging::parse_level(text);
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

error apply_limits(const json& obj, const std::string& path, http_limits& out) {
    if (auto e = expect_object(obj, path))
        return e;
    for (const auto& [key, v] : obj.items()) {
        const std::string p = join(path, key);
        error e;
        if (key == "max_header_bytes")
            e = read_number(v, p, min_header_bytes, max_header_bytes, out.max_header_bytes);
        else if (key == "max_body_bytes")
            e = read_number(v, p, 1, max_body_bytes, out.max_body_bytes);
        else if (key == "header_timeout_ms")
            e = read_millis(v, p, out.header_timeout);
        else if (key == "idle_timeout_ms")
            e = read_millis(v, p, out.idle_timeout);
        else if (key == "body_timeout_ms")
            e = read_millis(v, p, out.body_timeout);
        else if (key == "write_timeout_ms")
            e = read_millis(v, p, out.write_timeout);
        else if (key == "max_connections")
            e = read_number(v, p, 1, max_connections, out.max_connections);
        else if (key == "max_inflight_requests")
            e = read_number(v, p, 1, max_inflight_requests, out.max_inflight_requests);
        else
            e = unknown_key(p);
        if (e)
            return e;
    }
    return std::nullopt;
}

error apply_postgres(const json& obj, const std::string& path, postgres_settings& out) {
    if (auto e = expect_object(obj, path))
        return e;
    for (const auto& [key, v] : obj.items()) {
        const std::string p = join(path, key);
        error e;
        if (key == "schema") {
            std::string schema;
            e = read_string(v, p, schema);
            if (!e && !is_sql_identifier(schema))
                e = fail(p +
                         ": expected a lower-case SQL identifier ([a-z_][a-z0-9_]*, at "
                         "most 63 characters), got " +
                         in_quotes(schema));
            // PostgreSQL refuses to create schemas named pg_*.
            else if (!e && schema.rfind("pg_", 0) == 0)
                e = fail(p + ": the prefix 'pg_' is reserved by PostgreSQL, got " +
                         in_quotes(schema));
            if (!e)
                out.schema = std::move(schema);
        } else if (key == "pool_size") {
            e = read_number(v, p, 0, max_pool_size, out.pool_size);
        } else if (key == "queue_limit") {
            e = read_number(v, p, 0, max_queue_limit, out.queue_limit);
        } else if (key == "connect_timeout_ms") {
            e = read_millis(v, p, out.connect_timeout);
        } else if (key == "statement_timeout_ms") {
            e = read_millis(v, p, out.statement_timeout);
        } else if (key == "fence_cache_size") {
            e = read_number(v, p, 1, max_fence_cache_size, out.fence_cache_size);
        } else if (key == "batch_max") {
            e = read_number(v, p, 1, max_batch_max, out.batch_max);
        } else if (key == "batch_concurrency") {
            e = read_number(v, p, 1, max_batch_concurrency, out.batch_concurrency);
        } else if (key == "batch_overlap_ms") {
            std::int64_t ms = 0;
            e = read_number(v, p, 0, max_batch_overlap_ms, ms);
            if (!e)
                out.batch_overlap = millis(ms);
        } else if (key == "far_round_trip_ms") {
            std::int64_t ms = 0;
            e = read_number(v, p, 0, max_far_round_trip_ms, ms);
            if (!e)
                out.far_round_trip = millis(ms);
        } else {
            e = unknown_key(p);
        }
        if (e)
            return e;
    }
    return std::nullopt;
}

error apply_file(const json& obj, const std::string& path, file_settings& out) {
    if (auto e = expect_object(obj, path))
        return e;
    for (const auto& [key, v] : obj.items()) {
        const std::string p = join(path, key);
        error e;
        if (key == "flush") {
            std::string text;
            e = read_string(v, p, text);
            if (!e && text == "syncfs")
                out.flush = file_flush::syncfs;
            else if (!e && text == "fsync")
                out.flush = file_flush::fsync;
            else if (!e)
                e = fail(p + ": expected \"syncfs\" or \"fsync\", got " + in_quotes(text));
        } else if (key == "io_threads") {
            e = read_number(v, p, 1, max_file_io_threads, out.io_threads);
        } else {
            e = unknown_key(p);
        }
        if (e)
            return e;
    }
    return std::nullopt;
}

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
    for (const auto& [key, v] : doc.items()) {
        const std::string p = join("", key);
        error e;
        if (key == "listen") {
            std::string text;
            e = read_string(v, p, text);
            if (!e)
                e = apply_listen(text, p, s);
        } else if (key == "store") {
            std::string text;
            e = read_string(v, p, text);
            if (!e)
                e = apply_store(text, p, s);
        } else if (key == "threads") {
            e = read_number(v, p, 0, max_threads, s.threads);
        } else if (key == "log_level") {
            std::string text;
            e = read_string(v, p, text);
            if (!e)
                e = apply_level(text, p, s);
        } else if (key == "shutdown_timeout_ms") {
            e = read_millis(v, p, s.shutdown_timeout);
        } else if (key == "auth_token_file") {
            std::string text;
            e = read_string(v, p, text);
            if (!e)
                e = apply_auth_token_file(text, p, s);
        } else if (key == "limits") {
            e = apply_limits(v, p, s.http);
        } else if (key == "postgres") {
            e = apply_postgres(v, p, s.postgres);
        } else if (key == "file") {
            e = apply_file(v, p, s.file);
        } else if (key == "operations") {
            e = apply_operations(v, p, s.operations);
        } else {
            e = unknown_key(p);
        }
        if (e)
            return e;
    }
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

std::variant<command_line, parse_error> parse_command_line(const std::vector<std::string>& args) {
    struct flag_value {
        std::string flag;
        std::string value;
    };
    command_line cl;
    std::vector<flag_value> values; // in command-line order, applied after the file

    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (arg == "-h") {
            cl.show_help = true;
            continue;
        }
        if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
            if (!arg.empty() && arg.front() == '-' && arg != "-")
                return fail("unknown flag " + in_quotes(arg));
            return fail("unexpected argument " + in_quotes(arg) + " (see --help)");
        }
        const auto eq = arg.find('=');
        const std::string flag = arg.substr(0, eq);
        const bool inline_value = eq != std::string::npos;

        if (flag == "--help" || flag == "--version" || flag == "--check-config") {
            if (inline_value)
                return fail(flag + ": takes no value");
            (flag == "--help"      ? cl.show_help
             : flag == "--version" ? cl.show_version
                                   : cl.check_config) = true;
            continue;
        }
        if (flag != "--config" && flag != "--listen" && flag != "--store" && flag != "--threads" &&
            flag != "--log-level" && flag != "--auth-token-file")
            return fail("unknown flag " + in_quotes(flag));

        std::string value;
        if (inline_value) {
            value = arg.substr(eq + 1);
        } else if (i + 1 < args.size() && args[i + 1].compare(0, 2, "--") != 0) {
            value = args[++i];
        } else {
            return fail(flag + ": missing value");
        }
        if (value.empty())
            return fail(flag + ": missing value");

        if (flag == "--config") {
            if (cl.config_file)
                return fail("--config: given more than once");
            cl.config_file = std::move(value);
        } else {
            values.push_back({flag, std::move(value)});
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
    return cl;
}

std::string usage_text() {
    return R"(Usage: fencekeeper [OPTIONS]

A fencing-aware HTTP storage proxy: a write is applied only when its fencing token is at
least the highest token already accepted for its lock.

Options:
  --config FILE       JSON config file; it is read first and the flags below override it
  --listen HOST:PORT  address to listen on, [IPv6]:PORT for IPv6 (default 127.0.0.1:8080;
                      port 0 picks a free port)
  --store URL         file:PATH or postgresql://... (default file:./data)
  --threads N         I/O threads, 1 to 1024 (default: the number of cores)
  --log-level LEVEL   debug, info, warn or error (default info)
  --auth-token-file FILE
                      require "Authorization: Bearer <first line of FILE>" on /v1/* and
                      /metrics (default: $FENCEKEEPER_AUTH_TOKEN if set, else no auth);
                      SIGHUP re-reads it
  --check-config      validate the config file and flags (and the token file), print
                      "config ok" and exit 0, or print the problem and exit 2; opens no
                      store and binds no port
  -h, --help          print this help and exit
  --version           print the version and exit

Flags take their value as "--flag value" or "--flag=value"; the last one given wins.
Every config key is described in docs/configuration.md.
)";
}

} // namespace fk::config
