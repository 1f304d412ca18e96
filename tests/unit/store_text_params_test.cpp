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
