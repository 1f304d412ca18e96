#include "fence/names.hpp"
#include "fence/utf8.hpp"

#include <doctest/doctest.h>

#include <set>
#include <string>

using namespace fk::fence;

namespace {

// The oracle: every valid sequence, written from the code point ranges (no shared logic
// with the decoder), and every proper prefix of one.
struct oracle {
    std::set<std::string> valid;
    std::set<std::string> proper_prefixes;

    static std::string encode(char32_t cp) {
        std::string s;
        if (cp < 0x80)
            s = {static_cast<char>(cp)};
        else if (cp < 0x800)
            s = {static_cast<char>(0xC0 + cp / 64), static_cast<char>(0x80 + cp % 64)};
        else if (cp < 0x10000)
            s = {static_cast<char>(0xE0 + cp / 4096), static_cast<char>(0x80 + cp / 64 % 64),
                 static_cast<char>(0x80 + cp % 64)};
        else
            s = {static_cast<char>(0xF0 + cp / 262144), static_cast<char>(0x80 + cp / 4096 % 64),
                 static_cast<char>(0x80 + cp / 64 % 64), static_cast<char>(0x80 + cp % 64)};
        return s;
    }

    oracle() {
        for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
            if (cp >= 0xD800 && cp <= 0xDFFF)
                continue;
            const std::string s = encode(cp);
            valid.insert(s);
            for (std::size_t n = 1; n < s.size(); ++n)
                proper_prefixes.insert(s.substr(0, n));
        }
    }

    // The step the decoder must take at s[0]: the valid sequence's length, or minus the
    // longest proper prefix of a valid sequence (at least 1).
    int step(const std::string& s) const {
        for (std::size_t n = 1; n <= 4 && n <= s.size(); ++n)
            if (valid.count(s.substr(0, n)))
                return static_cast<int>(n);
        int skip = 1;
        for (std::size_t n = 1; n <= 3 && n <= s.size(); ++n)
            if (proper_prefixes.count(s.substr(0, n)))
                skip = static_cast<int>(n);
        return -skip;
    }
    bool is_valid(const std::string& s) const {
        for (std::size_t i = 0; i < s.size();) {
            const int n = step(s.substr(i));
            if (n < 0)
                return false;
            i += static_cast<std::size_t>(n);
        }
        return true;
    }
};

const oracle& the_oracle() {
    static const oracle o;
    return o;
}

void check_against_oracle(const std::string& s) {
    const auto& o = the_oracle();
    const int expected = o.step(s);
    const auto got = decode_utf8(s, 0);
    CHECK_MESSAGE(got.length == expected, "input length ", s.size());
    if (expected > 0) {
        CHECK(oracle::encode(got.code_point) == s.substr(0, static_cast<std::size_t>(expected)));
    }
    CHECK(is_valid_utf8(s) == o.is_valid(s));
}

} // namespace

TEST_CASE("decode_utf8 and is_valid_utf8: every 1- and 2-byte input") {
    for (int a = 0; a < 256; ++a) {
        check_against_oracle(std::string(1, static_cast<char>(a)));
        for (int b = 0; b < 256; ++b)
            check_against_oracle({static_cast<char>(a), static_cast<char>(b)});
    }
}

TEST_CASE("decode_utf8 and is_valid_utf8: 3- and 4-byte sequences around every boundary") {
    // Each lead byte with the continuation bytes at and beside the edges of every range
    // (E0's A0, ED's 9F, F0's 90, F4's 8F) and a few non-continuation bytes.
    const int edges[] = {0x00, 0x41, 0x7F, 0x80, 0x81, 0x8F, 0x90, 0x9F,
                         0xA0, 0xBF, 0xC0, 0xC2, 0xE0, 0xF0, 0xFF};
    for (int a = 0xC0; a < 256; ++a)
        for (int b : edges)
            for (int c : edges) {
                const std::string three{static_cast<char>(a), static_cast<char>(b),
                                        static_cast<char>(c)};
                check_against_oracle(three);
                for (int d : edges)
                    check_against_oracle(three + static_cast<char>(d));
            }
}

TEST_CASE("decode_utf8: known vectors, including nlohmann's replacement steps") {
    CHECK(decode_utf8("\xf4\x8f\xbf\xbf", 0).length == 4);
    CHECK(decode_utf8("\xf4\x8f\xbf\xbf", 0).code_point == 0x10FFFF);
    CHECK(decode_utf8("\xed\x9f\xbf", 0).code_point == 0xD7FF);
    CHECK(decode_utf8("\xed\xa0\x80", 0).length == -1);     // U+D800, a surrogate
    CHECK(decode_utf8("\xe0\x9f\xbf", 0).length == -1);     // overlong U+07FF
    CHECK(decode_utf8("\xf4\x90\x80\x80", 0).length == -1); // U+110000
    CHECK(decode_utf8("\xe2\x9c", 0).length == -2);         // cut short: both bytes skipped
    CHECK(decode_utf8("\xf0\x9f\x98x", 0).length == -3);    // 'x' is looked at again
    CHECK(decode_utf8("a\xc3\xa9", 1).code_point == 0xE9);
    CHECK_FALSE(is_valid_utf8("\xc0\x80"));
    CHECK(is_valid_utf8(""));
    CHECK(is_valid_utf8("r\xc3\xa9sum\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80"));
}

TEST_CASE("append_utf8 encodes every scalar value as the oracle does") {
    for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
        if (cp >= 0xD800 && cp <= 0xDFFF)
            continue;
        std::string s;
        append_utf8(s, cp);
        if (s != oracle::encode(cp)) {
            FAIL("code point ", static_cast<unsigned>(cp));
        }
    }
}

TEST_CASE("utf8_prefix_successor bounds exactly the strings with the prefix") {
    CHECK_FALSE(utf8_prefix_successor("").has_value());
    CHECK(utf8_prefix_successor("abc") == "abd");
    CHECK(utf8_prefix_successor("a/") == "a0");
    CHECK(utf8_prefix_successor("\x7f") == "\xc2\x80");                 // U+007F → U+0080
    CHECK(utf8_prefix_successor("\xc3\xbf") == "\xc4\x80");             // ÿ → Ā
    CHECK(utf8_prefix_successor("\xed\x9f\xbf") == "\xee\x80\x80");     // U+D7FF → U+E000
    CHECK(utf8_prefix_successor("\xef\xbf\xbf") == "\xf0\x90\x80\x80"); // U+FFFF → U+10000
    CHECK(utf8_prefix_successor("a\xf4\x8f\xbf\xbf") == "b");           // U+10FFFF dropped
    CHECK_FALSE(utf8_prefix_successor("\xf4\x8f\xbf\xbf").has_value());
    CHECK_FALSE(utf8_prefix_successor("a\xc3").has_value()); // not UTF-8
    const std::string p = "r\xc3\xa9sum";
    const auto s = *utf8_prefix_successor(p);
    for (std::string tail : {"", "\xf4\x8f\xbf\xbf", "zzz", "\xc3\xbf"})
        CHECK(p + tail < s);
}
