#pragma once
// Structured logs: one JSON object per line on standard error, written with a single
// write(2) so lines from different threads never interleave.

#include <nlohmann/json_fwd.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace fk::logging {

enum class level { debug = 0, info = 1, warn = 2, error = 3 };

std::optional<level> parse_level(std::string_view text) noexcept; // "debug", "info", ...
std::string_view to_string(level l) noexcept;

void set_level(level l) noexcept;
level current_level() noexcept;
inline bool enabled(level l) noexcept {
    return l >= current_level();
}

// {"ts": RFC3339, "level": ..., "msg": msg, ...fields}. `fields` must be an object or null.
void write(level l, std::string_view msg, const nlohmann::json& fields);
void write(level l, std::string_view msg);

// The line write() emits, without the trailing newline; exposed for tests. Fields named
// ts, level or msg are renamed field.ts, ... so that no key appears twice. Invalid UTF-8
// in msg or fields is replaced with U+FFFD rather than dropping the line.
std::string format_line(level l, std::string_view msg, const nlohmann::json& fields,
                        std::chrono::system_clock::time_point when);

} // namespace fk::logging
