// The JSON reader of the request bodies (proxy/detail/json_reader.hpp) against nlohmann's
// SAX parser, which it replaces there: the same verdict, the same events in the same order
// (strings byte for byte, doubles bit for bit, each number's own text), the same kind of
// error. Hand-picked texts first, then mutations of them from a fixed seed (the fuzz
// target tests/fuzz/fuzz_json_reader.cpp does the same without end).

#include "proxy/detail/json_reader.hpp"
#include "tests/support/json_event_log.hpp"

#include <doctest/doctest.h>

#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace {

using fk::test::read_with_nlohmann;
using fk::test::read_with_reader;

const std::vector<std::string>& texts() {
    static const std::vector<std::string> t = {
        // Accepted.
        "{}",
        "[]",
        "null",
        "true",
        "false",
        "0",
        "-0",
        "1",
        "-1",
        "0.5",
        "-0.0",
        "1e5",
        "1E+5",
        "1e-5",
        "12.5e-3",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "-9223372036854775809",
        "18446744073709551615",
        "18446744073709551616",
        "123456789012345678901234567890",
        "1e308",
        "1.7976931348623157e308",
        "1e-400",
        "4.9e-324",
        "2.4e-324",
        "0.1",
        "3.141592653589793238462643383279",
        "\"\"",
        "\"abc\"",
        "\"a\\\"b\\\\c\\/d\\be\\ff\\ng\\rh\\ti\"",
        "\"\\u0041\\u00e9\\u20AC\"",
        "\"\\u0000\"",
        "\"\\ud83d\\ude00\"",
        "\"\\uD83D\\uDE00x\"",
        "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"",
        "\"\xef\xbf\xbf\xf4\x8f\xbf\xbf\"",
        " \t\r\n{ \"a\" : [ 1 , 2 , { } , [ ] ] } \n",
        "{\"ops\":[{\"op\":\"put\",\"key\":\"k\",\"body\":\"x\",\"token\":3}]}",
        "{\"params\":[1,\"two\",null,true,{\"a\":[1.50,\"\\u00e9\"]},-0,1e400]}",
        "{\"a\":1,\"a\":2}",
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
        "\xEF\xBB\xBF{}",
        "\xEF\xBB\xBF 1",
        // Refused.
        "",
        " ",
        "{",
        "[",
        "}",
        "]",
        "[1,]",
        "[,1]",
        "{\"a\"}",
        "{\"a\":}",
        "{\"a\":1,}",
        "{1:2}",
        "{\"a\" 1}",
        "[1 2]",
        "1 2",
        "01",
        "-01",
        "00",
        "1.",
        ".5",
        "-",
        "--1",
        "+1",
        "1e",
        "1e+",
        "1.e5",
        "0x10",
        "1e400",
        "-1e400",
        "1e99999999999",
        "tru",
        "truex",
        "nul",
        "nulll",
        "falsy",
        "True",
        "NaN",
        "Infinity",
        "\"abc",
        "\"\\x\"",
        "\"\\u12\"",
        "\"\\u12G4\"",
        "\"\\ud83d\"",
        "\"\\ud83dx\"",
        "\"\\ud83d\\u0041\"",
        "\"\\ude00\"",
        "\"\\ud83d\\",
        "\"\\",
        "\"a\x01\"",
        "\"a\x1f\"",
        "\"\x7f\"",
        "\"\x80\"",
        "\"\xc0\xaf\"",
        "\"\xc2\"",
        "\"\xc2\x20\"",
        "\"\xe0\x80\xaf\"",
        "\"\xed\xa0\x80\"",
        "\"\xf4\x90\x80\x80\"",
        "\"\xf5\x80\x80\x80\"",
        "\"\xff\"",
        "\"\xe2\x82\"",
        "\"\xf0\x9f\x98\"",
        "[\"a\"\"b\"]",
        "\xEF\xBB{}",
        "\xEF{}",
        "\xEF",
        "{}\xEF\xBB\xBF",
        "[1]x",
        "{\"a\":1}}",
        "[1]]",
        "\x00",
        "[\x00]",
        "/* c */ 1",
        "1 // c",
        "'a'",
        "[1;2]",
        "{\"a\":1;\"b\":2}",
    };
    return t;
}

void same(std::string_view text) {
    const auto ours = read_with_reader(text);
    const auto theirs = read_with_nlohmann(text);
    INFO("text: ", std::string{text});
    CHECK(ours.events == theirs.events);
    if (fk::test::nul_ends_nlohmann(text, ours, theirs))
        return; // the one difference (json_event_log.hpp)
    CHECK(ours.accepted == theirs.accepted);
    CHECK(ours.error == theirs.error);
}

} // namespace

TEST_CASE("json reader: hand-picked texts read as nlohmann reads them") {
    for (const auto& t : texts())
        same(std::string_view{t.data(), t == "\x00" ? 1 : t.size()});
    // NUL bytes inside, which the literals above cannot hold.
    same(std::string_view{"[\0]", 3});
    same(std::string_view{"\"a\0\"", 4});
    same(std::string_view{"1\0", 2});
}

TEST_CASE("json reader: mutated texts read as nlohmann reads them") {
    std::mt19937 rng{45};
    const std::string alphabet = std::string{"{}[],:\"\\/-+.0123456789eEtrufalsn \t\r\nbu"} +
                                 "\x00\x01\x1f\x7f\x80\xbf\xc0\xc2\xdf\xe0\xed\xef\xf0\xf4\xf5"
                                 "\xff" +
                                 std::string(1, '\0');
    for (int round = 0; round < 20000; ++round) {
        std::string t = texts()[rng() % texts().size()];
        const int edits = 1 + static_cast<int>(rng() % 4);
        for (int e = 0; e < edits; ++e) {
            const std::size_t at = t.empty() ? 0 : rng() % (t.size() + 1);
            const char c = alphabet[rng() % alphabet.size()];
            switch (rng() % 4) {
            case 0:
                t.insert(at, 1, c);
                break;
            case 1:
                if (at < t.size())
                    t[at] = c;
                break;
            case 2:
                if (at < t.size())
                    t.erase(at, 1);
                break;
            default:
                t.insert(at, texts()[rng() % texts().size()]);
                break;
            }
        }
        same(t);
    }
}

TEST_CASE("json reader: a string without escapes is a view of the text") {
    struct first_string final : fk::proxy::detail::json_events {
        std::string_view seen;
        bool null() override { return true; }
        bool boolean(bool) override { return true; }
        bool number_integer(std::int64_t) override { return true; }
        bool number_unsigned(std::uint64_t) override { return true; }
        bool number_float(double, std::string_view) override { return true; }
        bool string(std::string_view v) override { return seen = v, true; }
        bool key(std::string_view) override { return true; }
        bool start_object() override { return true; }
        bool end_object() override { return true; }
        bool start_array() override { return true; }
        bool end_array() override { return true; }
        bool parse_error(std::size_t, fk::proxy::detail::json_error) override { return false; }
    } h;
    const std::string text = "{\"k\":\"a long enough value, \xc3\xa9 and all\"}";
    REQUIRE(fk::proxy::detail::read_json(text, h));
    CHECK(h.seen == "a long enough value, \xc3\xa9 and all");
    CHECK(h.seen.data() == text.data() + 6);
}

TEST_CASE("json reader: a callback that returns false stops it at once") {
    struct stop_at_second final : fk::proxy::detail::json_events {
        int calls = 0;
        bool next() { return ++calls < 2; }
        bool null() override { return next(); }
        bool boolean(bool) override { return next(); }
        bool number_integer(std::int64_t) override { return next(); }
        bool number_unsigned(std::uint64_t) override { return next(); }
        bool number_float(double, std::string_view) override { return next(); }
        bool string(std::string_view) override { return next(); }
        bool key(std::string_view) override { return next(); }
        bool start_object() override { return next(); }
        bool end_object() override { return next(); }
        bool start_array() override { return next(); }
        bool end_array() override { return next(); }
        bool parse_error(std::size_t, fk::proxy::detail::json_error) override {
            return ++calls, false;
        }
    } h;
    CHECK_FALSE(fk::proxy::detail::read_json("[1, 2, x", h));
    CHECK(h.calls == 2); // start_array, then 1; never the error at x
}
