#include "fence/json_string.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

using fk::fence::append_json_string;

namespace {
std::string nlohmann_string(std::string_view s) {
    return nlohmann::json(std::string{s})
        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}
std::string escaped(std::string_view s) {
    std::string out;
    append_json_string(out, s);
    return out;
}
} // namespace

TEST_CASE("append_json_string: the same text as nlohmann's dump with replace") {
    const std::vector<std::string> cases = {
        "",
        "plain",
        "quote \" backslash \\ slash /",
        std::string{"nul \0 and \x01\x1f\x7f", 14},
        "\b\f\n\r\t",
        "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
        "\xff",
        "\x80",
        "\xc3",
        "\xc3(",
        "\xe2\x82",
        "\xe2\x82(",
        "\xf0\x9f\x98",
        "\xf0\x9f\x98(x",
        "\xed\xa0\x80",     // a surrogate
        "\xc0\xaf",         // overlong
        "\xe0\x80\xaf",     // overlong
        "\xf4\x90\x80\x80", // above U+10FFFF
        "\xf5\x80\x80\x80",
        "a\xc3\xc3\xa9z",
    };
    for (const auto& s : cases) {
        CAPTURE(s);
        CHECK(escaped(s) == nlohmann_string(s));
    }
    // Every short byte string over an alphabet of interesting bytes.
    const unsigned char alphabet[] = {'a',  '"',  '\\', 0x00, 0x1f, 0x7f, 0x80, 0x9f, 0xa0,
                                      0xbf, 0xc2, 0xdf, 0xe0, 0xed, 0xef, 0xf0, 0xf4, 0xff};
    constexpr std::size_t n = sizeof alphabet;
    for (std::size_t len = 1; len <= 4; ++len) {
        std::size_t total = 1;
        for (std::size_t k = 0; k < len; ++k)
            total *= n;
        for (std::size_t x = 0; x < total; ++x) {
            std::string s;
            for (std::size_t k = 0, v = x; k < len; ++k, v /= n)
                s += static_cast<char>(alphabet[v % n]);
            if (escaped(s) != nlohmann_string(s)) {
                CAPTURE(s);
                CHECK(escaped(s) == nlohmann_string(s));
                return;
            }
        }
    }
}
