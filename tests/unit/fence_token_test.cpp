#include "fence/token.hpp"

#include <doctest/doctest.h>

#include <string>

using fk::errc;
using fk::fence::parse_token;
using fk::fence::token_from_headers;

TEST_CASE("valid tokens parse to their value") {
    CHECK(parse_token("0").value == 0);
    CHECK(parse_token("0").error == errc::ok);
    CHECK(parse_token("7").value == 7);
    CHECK(parse_token("101").value == 101);
    CHECK(parse_token("9223372036854775807").value == INT64_MAX);
    CHECK(parse_token("1000000000000000000").value == 1000000000000000000);
}

TEST_CASE("surrounding whitespace is ignored") {
    CHECK(parse_token(" 42").value == 42);
    CHECK(parse_token("42 ").value == 42);
    CHECK(parse_token("\t42\t").value == 42);
    CHECK(parse_token("  0  ").error == errc::ok);
}

TEST_CASE("every malformed token form of docs/api.md#tokens is invalid_token") {
    for (const char* bad : {"",
                            " ",
                            "\t",
                            "+5",
                            "-1",
                            "-0",
                            "0x2A",
                            "1e3",
                            "007",
                            "00",
                            "01",
                            "4 2",
                            "5,6",
                            "9223372036854775808",
                            "99999999999999999999",
                            "18446744073709551616",
                            "12345678901234567890",
                            "1.0",
                            "1.",
                            ".1",
                            "abc",
                            "4\n",
                            "\n4",
                            "٣",
                            "1_000",
                            "0b1",
                            "+0",
                            "5;6",
                            "5 ,6"}) {
        INFO("token: '" << bad << "'");
        CHECK(parse_token(bad).error == errc::invalid_token);
    }
    // An embedded NUL must not truncate the value.
    CHECK(parse_token(std::string_view("4\0", 2)).error == errc::invalid_token);
}

TEST_CASE("token header selection") {
    using std::nullopt;
    CHECK(token_from_headers(0, nullopt, 0, nullopt).error == errc::missing_token);
    CHECK(token_from_headers(1, "5", 0, nullopt).value == 5);
    CHECK(token_from_headers(0, nullopt, 1, "6").value == 6);
    CHECK(token_from_headers(2, "5", 0, nullopt).error == errc::invalid_token); // given twice
    CHECK(token_from_headers(0, nullopt, 2, "5").error == errc::invalid_token);
    CHECK(token_from_headers(1, "5", 1, "5").error == errc::invalid_token); // both names
    CHECK(token_from_headers(1, "x", 0, nullopt).error == errc::invalid_token);
    CHECK(token_from_headers(1, "", 0, nullopt).error == errc::invalid_token);
}
