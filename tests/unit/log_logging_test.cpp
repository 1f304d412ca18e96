#include "backends/log/logging.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include <unistd.h>

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

TEST_CASE("format_line with a field list: the same line as with a JSON object") {
    const std::string_view key = "k\xff\"ey";
    const auto fast = format_line(level::warn, "rejected stale write",
                                  {field{"peer", "127.0.0.1:5"}, field{"key", key},
                                   field{"missing", nullptr}, field{"token", std::int64_t{-7}},
                                   field{"big", std::int64_t{9223372036854775807}},
                                   field::optional("opt", std::nullopt)},
                                  when);
    const nlohmann::json fields = {{"peer", "127.0.0.1:5"},        {"key", std::string{key}},
                                   {"missing", nullptr},           {"token", -7},
                                   {"big", 9223372036854775807LL}, {"opt", nullptr}};
    // nlohmann's object keeps keys sorted; compare parsed values and the head.
    const auto slow = format_line(level::warn, "rejected stale write", fields, when);
    CHECK(nlohmann::json::parse(fast) == nlohmann::json::parse(slow));
    CHECK(
        fast.rfind(
            R"({"ts":"2026-11-29T10:00:00.123Z","level":"warn","msg":"rejected stale write","peer":)",
            0) == 0);
}

TEST_CASE("write_fields and write reach stderr, one line each; with the writer thread after "
          "flush") {
    SUBCASE("written at once") {}
    SUBCASE("background writer") {
        start_writer();
    }
    // Redirect fd 2 into a pipe for the duration of the test.
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    const int saved = ::dup(2);
    REQUIRE(::dup2(fds[1], 2) == 2);
    write_fields(level::warn, "one", {field{"n", std::int64_t{1}}});
    write(level::warn, "two", nlohmann::json{{"n", 2}});
    flush();
    ::dup2(saved, 2);
    ::close(saved);
    ::close(fds[1]);
    std::string got;
    char buf[4096];
    for (ssize_t r; (r = ::read(fds[0], buf, sizeof buf)) > 0;)
        got.append(buf, static_cast<std::size_t>(r));
    ::close(fds[0]);
    const auto nl = got.find('\n');
    REQUIRE(nl != std::string::npos);
    CHECK(nlohmann::json::parse(got.substr(0, nl))["msg"] == "one");
    CHECK(nlohmann::json::parse(got.substr(nl + 1, got.size() - nl - 2))["n"] == 2);
    CHECK(got.back() == '\n');
}
