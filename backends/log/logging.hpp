#pragma once
// Structured logs: one JSON object per line on standard error, each line written whole
// so that lines from different threads never interleave.
//
// Until start_writer() is called (and in processes that never call it: tests, tools,
// --check-config) each line is written at once with write(2). After it, write() formats
// the line on the calling thread and appends it to an in-memory buffer (a short critical
// section, no syscall); a background thread writes the buffer to fd 2 every 50 ms, at
// once when it passes 64 KiB or an error line arrives, and at exit. So the I/O threads
// never block on a slow stderr, and nothing is lost on a normal exit (main returning or
// exit(3)): only a crash or SIGKILL can lose the last ~50 ms. When stderr stays blocked
// and 8 MiB are waiting, further lines are dropped and counted; a line saying how many
// is written when it drains.

#include "config/log_level.hpp"

#include <nlohmann/json_fwd.hpp>

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

namespace fk::logging {

using level = config::log_level;
using config::to_string;
inline std::optional<level> parse_level(std::string_view text) noexcept {
    return config::parse_log_level(text);
}

void set_level(level l) noexcept;
level current_level() noexcept;
inline bool enabled(level l) noexcept {
    return l >= current_level();
}

// {"ts": RFC3339, "level": ..., "msg": msg, ...fields}. `fields` must be an object or null.
void write(level l, std::string_view msg, const nlohmann::json& fields);
void write(level l, std::string_view msg);

// One field of write_fields: a string, an integer or null. The hot-path alternative to
// a nlohmann::json object (no tree, no allocation per field); the line is the same.
struct field {
    enum class kind { string, integer, null };
    std::string_view key;
    kind type = kind::null;
    std::string_view text;
    std::int64_t number = 0;

    field(std::string_view k, std::string_view v) noexcept : key(k), type(kind::string), text(v) {}
    field(std::string_view k, const char* v) noexcept : field(k, std::string_view{v}) {}
    field(std::string_view k, std::int64_t v) noexcept : key(k), type(kind::integer), number(v) {}
    field(std::string_view k, std::nullptr_t) noexcept : key(k) {}
    // A string, or null when absent.
    static field optional(std::string_view k, std::optional<std::string_view> v) noexcept {
        return v ? field{k, *v} : field{k, nullptr};
    }
};

// write() with fields given as a list, in order; `key`s must not be ts, level or msg.
void write_fields(level l, std::string_view msg, std::initializer_list<field> fields);

// Starts the background writer (see above). Idempotent. The process must not fork
// afterwards (a child would inherit a buffer without its writer).
void start_writer() noexcept;

// Writes every line buffered so far to stderr before returning. For shutdown and tests;
// also runs at exit. Never call it on an I/O thread.
void flush() noexcept;

// The line write() emits, without the trailing newline; exposed for tests. Fields named
// ts, level or msg are renamed field.ts, ... so that no key appears twice. Invalid UTF-8
// in msg or fields is replaced with U+FFFD rather than dropping the line.
std::string format_line(level l, std::string_view msg, const nlohmann::json& fields,
                        std::chrono::system_clock::time_point when);
std::string format_line(level l, std::string_view msg, std::initializer_list<field> fields,
                        std::chrono::system_clock::time_point when);

} // namespace fk::logging
