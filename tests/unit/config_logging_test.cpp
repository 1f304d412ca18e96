#include "config/logging.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

using namespace fk::logging;

TEST_CASE("level names round-trip") {
    for (auto l : {level::debug, level::info, level::warn, level::error}) {
        auto parsed = parse_level(to_string(l));
        REQUIRE(parsed);
        CHECK(*parsed == l);
    }
    for (auto bad : {"", "DEBUG", "Info", "warning", "err", "trace", "info ", "fatal"}) {
        CAPTURE(bad);
        CHECK_FALSE(parse_level(bad));
    }
}

TEST_CASE("the global level filters") {
    const level before = current_level();
    set_level(level::warn);
    CHECK(current_level() == level::warn);
    CHECK_FALSE(enabled(level::debug));
    CHECK_FALSE(enabled(level::info));
    CHECK(enabled(level::warn));
    CHECK(enabled(level::error));
    set_level(level::debug);
    CHECK(enabled(level::debug));
    set_level(before);
}

namespace {
// 2026-11-29T10:00:00.123Z
const auto when = std::chrono::system_clock::time_point(std::chrono::milliseconds(1795946400123));
} // namespace

TEST_CASE("format_line: timestamp, level, message, then the fields in order") {
    CHECK(format_line(level::warn, "stale write", nlohmann::json(), when) ==
          R"({"ts":"2026-11-29T10:00:00.123Z","level":"warn","msg":"stale write"})");
    const nlohmann::json fields = {{"lock", "l"}, {"token", 5}, {"current_token", 7}};
    const auto line = format_line(level::info, "m", fields, when);
    CHECK(line.rfind(R"({"ts":"2026-11-29T10:00:00.123Z","level":"info","msg":"m",)", 0) == 0);
    const auto parsed = nlohmann::json::parse(line);
    CHECK(parsed["lock"] == "l");
    CHECK(parsed["token"] == 5);
    CHECK(parsed["current_token"] == 7);
}

TEST_CASE("format_line: always one valid JSON line") {
    const nlohmann::json fields = {{"key", "a\nb"}, {"ts", "x"}, {"msg", 1}};
    const auto line = format_line(level::error, "bad \"name\"\n\xff", fields, when);
    CHECK(line.find('\n') == std::string::npos);
    const auto parsed = nlohmann::json::parse(line); // throws if not valid JSON
    CHECK(parsed["ts"] == "2026-11-29T10:00:00.123Z");
    CHECK(parsed["msg"] == "bad \"name\"\n\xEF\xBF\xBD");
    CHECK(parsed["field.ts"] == "x");
    CHECK(parsed["field.msg"] == 1);
    CHECK(parsed["key"] == "a\nb");
    // Fields that are not an object are kept, not dropped.
    CHECK(nlohmann::json::parse(format_line(level::info, "m", 42, when))["fields"] == 42);
}

TEST_CASE("format_line: milliseconds are zero-padded; epoch") {
    const auto epoch = std::chrono::system_clock::time_point(std::chrono::milliseconds(7));
    CHECK(format_line(level::debug, "", nlohmann::json(), epoch) ==
          R"({"ts":"1970-01-01T00:00:00.007Z","level":"debug","msg":""})");
}

TEST_CASE("write below the level writes nothing and does not throw") {
    const level before = current_level();
    set_level(level::error);
    CHECK_NOTHROW(write(level::debug, "hidden", nlohmann::json{{"a", 1}}));
    CHECK_NOTHROW(write(level::info, "hidden"));
    set_level(before);
}
