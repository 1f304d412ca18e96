#include "config/logging.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <unistd.h>

namespace fk::logging {

namespace {

std::atomic<level> g_level{level::info};

// Replace instead of throwing: a log line must never fail because a client sent a
// name with broken UTF-8.
std::string dump(const nlohmann::json& j) {
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string rfc3339_millis(std::chrono::system_clock::time_point when) {
    using namespace std::chrono;
    const auto ms_since_epoch = duration_cast<milliseconds>(when.time_since_epoch()).count();
    // Floor division so that instants before 1970 still format correctly.
    auto secs = ms_since_epoch / 1000;
    auto ms = ms_since_epoch % 1000;
    if (ms < 0) {
        ms += 1000;
        secs -= 1;
    }
    const std::time_t t = static_cast<std::time_t>(secs);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                  static_cast<int>(ms));
    return buf;
}

bool is_reserved(const std::string& key) {
    return key == "ts" || key == "level" || key == "msg";
}

void write_all(const std::string& line) noexcept {
    const char* p = line.data();
    std::size_t left = line.size();
    // One write(2) for the whole line; the loop only matters for lines longer than a
    // pipe's atomic size or an interrupted call.
    while (left > 0) {
        const ssize_t n = ::write(2, p, left);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return; // stderr is gone; nothing sensible left to do
        }
        p += n;
        left -= static_cast<std::size_t>(n);
    }
}

} // namespace

std::optional<level> parse_level(std::string_view text) noexcept {
    if (text == "debug")
        return level::debug;
    if (text == "info")
        return level::info;
    if (text == "warn")
        return level::warn;
    if (text == "error")
        return level::error;
    return std::nullopt;
}

std::string_view to_string(level l) noexcept {
    switch (l) {
    case level::debug:
        return "debug";
    case level::info:
        return "info";
    case level::warn:
        return "warn";
    case level::error:
        return "error";
    }
    return "unknown";
}

void set_level(level l) noexcept {
    g_level.store(l, std::memory_order_relaxed);
}

level current_level() noexcept {
    return g_level.load(std::memory_order_relaxed);
}

std::string format_line(level l, std::string_view msg, const nlohmann::json& fields,
                        std::chrono::system_clock::time_point when) {
    std::string line;
    line.reserve(96 + msg.size());
    line += R"({"ts":")";
    line += rfc3339_millis(when);
    line += R"(","level":")";
    line += to_string(l);
    line += R"(","msg":)";
    line += dump(nlohmann::json(msg));
    if (fields.is_object()) {
        for (const auto& [key, value] : fields.items()) {
            line += ',';
            line += dump(nlohmann::json(is_reserved(key) ? "field." + key : key));
            line += ':';
            line += dump(value);
        }
    } else if (!fields.is_null()) {
        line += R"(,"fields":)";
        line += dump(fields);
    }
    line += '}';
    return line;
}

void write(level l, std::string_view msg, const nlohmann::json& fields) {
    if (!enabled(l))
        return;
    std::string line;
    try {
        line = format_line(l, msg, fields, std::chrono::system_clock::now());
        line += '\n';
    } catch (const std::exception&) {
        // Only allocation can fail here; a lost log line beats a failed request.
        return;
    }
    write_all(line);
}

void write(level l, std::string_view msg) {
    write(l, msg, nlohmann::json());
}

} // namespace fk::logging
