// The checks config/values.hpp declares.
#include "config/values.hpp"

#include "config/parse.hpp"

#include <charconv>
#include <filesystem>

namespace fk::config::detail {

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

} // namespace fk::config::detail
