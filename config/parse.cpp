// The config file and the command line (config/parse.hpp): the file's JSON applied
// through the key table (keys.cpp), the flags through Boost.Program_options, both with
// the checks of config/values.hpp.
#include "config/parse.hpp"

#include "config/json_depth.hpp"
#include "config/values.hpp"
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

using namespace detail;

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
