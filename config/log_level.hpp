#pragma once
// The log level: a setting (`log_level` in the config file, `--log-level`), here so that
// config/ depends on nothing but fence/. backends/log/logging.hpp names it
// logging::level and filters lines by it.

#include <optional>
#include <string_view>

namespace fk::config {

enum class log_level { debug = 0, info = 1, warn = 2, error = 3 };

// "debug", "info", "warn" or "error"; nothing else.
constexpr std::optional<log_level> parse_log_level(std::string_view text) noexcept {
    if (text == "debug")
        return log_level::debug;
    if (text == "info")
        return log_level::info;
    if (text == "warn")
        return log_level::warn;
    if (text == "error")
        return log_level::error;
    return std::nullopt;
}

constexpr std::string_view to_string(log_level l) noexcept {
    switch (l) {
    case log_level::debug:
        return "debug";
    case log_level::info:
        return "info";
    case log_level::warn:
        return "warn";
    case log_level::error:
        return "error";
    }
    return "unknown";
}

} // namespace fk::config
