#include "fence/hex.hpp"

#include <doctest/doctest.h>

using namespace fk::fence;

TEST_CASE("hex_value: exactly the 22 hex digits") {
    int digits = 0;
    for (int c = 0; c < 256; ++c) {
        const int v = hex_value(static_cast<char>(c));
        if (v >= 0)
            ++digits;
    }
    CHECK(digits == 22);
    CHECK(hex_value('0') == 0);
    CHECK(hex_value('9') == 9);
    CHECK(hex_value('a') == 10);
    CHECK(hex_value('F') == 15);
    CHECK(hex_value('g') == -1);
    CHECK(hex_value('/') == -1);
}

TEST_CASE("percent_decode_bytes: strict") {
    CHECK(percent_decode_bytes("a%2Fb") == "a/b");
    CHECK(percent_decode_bytes("%00%ff") == std::string("\0\xff", 2));
    CHECK(percent_decode_bytes("a+b") == "a+b");
    CHECK(percent_decode_bytes("") == "");
    for (const char* bad : {"%", "a%", "a%2", "%G0", "%0g", "%%41"})
        CHECK_FALSE(percent_decode_bytes(bad).has_value());
}
