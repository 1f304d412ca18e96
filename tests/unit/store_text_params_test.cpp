// store::text_params (backends/text_params.hpp): values and NULLs in order, C strings.
#include "backends/text_params.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

using fk::store::text_params;

TEST_CASE("text_params: values, empty values and NULLs keep their order") {
    text_params p{"1", std::nullopt, "", "x y", std::nullopt};
    REQUIRE(p.size() == 5);
    std::vector<std::optional<std::string>> seen;
    std::vector<const char*> c;
    for (auto it = p.begin(); it != p.end(); ++it) {
        auto v = *it;
        seen.push_back(v ? std::optional<std::string>{*v} : std::nullopt);
        c.push_back(it.c_str());
    }
    CHECK(seen ==
          std::vector<std::optional<std::string>>{"1", std::nullopt, "", "x y", std::nullopt});
    CHECK(std::strcmp(c[0], "1") == 0);
    CHECK(c[1] == nullptr);
    CHECK(std::strcmp(c[2], "") == 0);
    CHECK(std::strcmp(c[3], "x y") == 0);
    CHECK(c[4] == nullptr);
    CHECK(p.at(3) == "x y");
    CHECK_FALSE(p.at(4));
    CHECK_THROWS_AS(p.at(5), std::out_of_range);
    CHECK(p == text_params{"1", std::nullopt, "", "x y", std::nullopt});
    CHECK_FALSE(p == text_params{"1", "", "", "x y", std::nullopt});
}

TEST_CASE("text_params: a value with a NUL or 0xFF byte is a caller's bug") {
    text_params p;
    CHECK_THROWS_AS(p.push_back(std::string_view{"a\0b", 3}), std::invalid_argument);
    CHECK_THROWS_AS(p.push_back(std::string_view{"\xff"}), std::invalid_argument);
    CHECK(p.empty());
}

TEST_CASE("text_params: a parameter costs its text and one byte") {
    text_params p;
    for (int i = 0; i < 10000; ++i)
        p.push_back(std::string_view{"1"});
    p.shrink_to_fit();
    CHECK(p.held_bytes() < 2 * 10000 + 64);
    p.release();
    CHECK(p.empty());
    CHECK(p.begin() == p.end());
}

TEST_CASE("text_params: a value is added with one growth of the buffer, not two") {
    // The value and its NUL: appended one after the other, a value that filled the buffer
    // made it grow again for the NUL, to twice the value (issue 45).
    const std::string big(100000, 'x');
    text_params p;
    p.push_back(std::string_view{big});
    CHECK(p.held_bytes() < big.size() + 64);
    p.push_back(std::string_view{big});
    CHECK(p.held_bytes() < 2 * (2 * big.size() + 2)); // doubled once, as a string does
    CHECK(p.at(1) == big);
}

TEST_CASE("text_params: a value written in place, and clear() keeping the buffer") {
    text_params p{"a"};
    auto start = p.raw().size();
    p.raw() += "[1,";
    p.raw() += "2]";
    p.end_raw(start);
    p.push_back(std::optional<std::string_view>{});
    start = p.raw().size();
    p.end_raw(start); // an empty value
    CHECK(p == text_params{"a", "[1,2]", std::nullopt, ""});
    start = p.raw().size();
    p.raw() += std::string_view{"x\0y", 3};
    CHECK_THROWS_AS(p.end_raw(start), std::invalid_argument);
    const auto held = p.held_bytes();
    p.clear();
    CHECK(p.empty());
    CHECK(p.begin() == p.end());
    CHECK(p.held_bytes() == held);
}

TEST_CASE("text_params: shrink_to_fit copies only for slack worth giving back") {
    text_params p;
    p.reserve(1000);
    p.push_back(std::string_view{std::string(950, 'x')});
    const auto held = p.held_bytes();
    p.shrink_to_fit(); // 49 bytes of slack for 951 used: kept
    CHECK(p.held_bytes() == held);
    text_params q;
    q.reserve(100000);
    q.push_back(std::string_view{"1"});
    q.shrink_to_fit();
    CHECK(q.held_bytes() < 64);
}
