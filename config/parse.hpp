#pragma once
// Command line and JSON config (docs/configuration.md). A flag overrides the file. Every unknown
// flag or key and every bad value is an error whose message names it; the caller prints
// it and exits with status 2.

#include "config/keys.hpp"
#include "config/settings.hpp"

#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace fk::config {

// What the command line asked for besides settings.
struct command_line {
    settings values;
    bool show_help = false;
    bool show_version = false;
    bool check_config = false; // --check-config: validate, print, exit 0 or 2
    std::optional<std::string> config_file;
};

// Applies a JSON config document on top of `into`: the keys of config_keys()
// (config/keys.hpp), operations{NAME: {sql, expose_errors}} included. Unknown keys,
// duplicate keys and values of the wrong type or out of range are errors.
std::optional<parse_error> apply_json(std::string_view json_text, settings& into);

// Parses argv[1..]: --config FILE (loaded first), --listen HOST:PORT, --store URL,
// --threads N, --log-level LEVEL, --auth-token-file FILE, --tls-cert FILE, --tls-key FILE,
// --check-config, --help,
// --version; both "--flag value" and "--flag=value" (Boost.Program_options). Reads the config file
// from disk (not the token file: that is proxy/auth.hpp's job).
std::variant<command_line, parse_error> parse_command_line(const std::vector<std::string>& args);

// "HOST:PORT" and "[v6]:PORT"; port 0 allowed.
std::optional<std::pair<std::string, std::uint16_t>> parse_listen(std::string_view text);

std::string usage_text();

} // namespace fk::config
