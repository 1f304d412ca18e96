// fence::floor_set: the effective-fence rule of docs/api.md#fence-floors without I/O.
#include "fence/floors.hpp"

#include <doctest/doctest.h>

using fk::fence::floor_set;
using raise = floor_set::raise_outcome;

TEST_CASE("a floor applies to every lock under its prefix, fenced or not") {
    floor_set f;
    CHECK(f.raise("jobs/", 100, 1, 10) == raise::raised);
    auto e = f.effective("jobs/a", std::nullopt);
    REQUIRE(e.token);
    CHECK(*e.token == 100);
    REQUIRE(e.floor);
    CHECK(e.floor->prefix == "jobs/");
    CHECK(e.floor->updated_at_ms == 1);
    // Not a prefix match: no floor.
    CHECK_FALSE(f.effective("job", std::nullopt).token);
    CHECK_FALSE(f.effective("other/jobs/a", std::nullopt).token);
    // An own fence above the floor wins and names no floor; equal also names none.
    CHECK(*f.effective("jobs/a", 150).token == 150);
    CHECK_FALSE(f.effective("jobs/a", 150).floor);
    CHECK_FALSE(f.effective("jobs/a", 100).floor);
    CHECK(*f.effective("jobs/a", 99).token == 100);
    // The prefix itself is a lock that starts with it.
    CHECK(*f.effective("jobs/", std::nullopt).token == 100);
}

TEST_CASE("the empty prefix covers every lock") {
    floor_set f;
    CHECK(f.raise("", 7, 1, 10) == raise::raised);
    CHECK(*f.effective("x", std::nullopt).token == 7);
    CHECK(f.effective("x", std::nullopt).floor->prefix.empty());
}

TEST_CASE("the highest matching floor decides; on a tie the longest prefix is named") {
    floor_set f;
    CHECK(f.raise("", 10, 1, 10) == raise::raised);
    CHECK(f.raise("a", 30, 2, 10) == raise::raised);
    CHECK(f.raise("ab", 20, 3, 10) == raise::raised);
    CHECK(f.raise("abc", 30, 4, 10) == raise::raised);
    CHECK(f.highest_for("abd")->token == 30);
    CHECK(f.highest_for("abd")->prefix == "a");
    CHECK(f.highest_for("abcd")->prefix == "abc");
    CHECK(f.highest_for("b")->prefix == "");
    CHECK(f.highest_for("b")->token == 10);
}

TEST_CASE("floors only go up, and the set is bounded") {
    floor_set f;
    CHECK(f.raise("p", 5, 1, 2) == raise::raised);
    CHECK(f.raise("p", 5, 2, 2) == raise::not_above);
    CHECK(f.raise("p", 4, 2, 2) == raise::not_above);
    CHECK(*f.floor_of("p") == 5);
    CHECK(f.raise("p", 6, 3, 2) == raise::raised);
    CHECK(f.list().front().updated_at_ms == 3);
    CHECK(f.raise("q", 1, 4, 2) == raise::raised);
    CHECK(f.raise("r", 1, 5, 2) == raise::full);
    // Raising an existing prefix is allowed when full.
    CHECK(f.raise("q", 2, 6, 2) == raise::raised);
    CHECK(f.size() == 2);
}

TEST_CASE("list is sorted bytewise and load keeps the higher floor") {
    floor_set f;
    f.load({"b", 2, 20});
    f.load({"a", 1, 10});
    f.load({"b", 1, 30});
    f.load({"\xff", 3, 40});
    auto l = f.list();
    REQUIRE(l.size() == 3);
    CHECK(l[0].prefix == "a");
    CHECK(l[1].prefix == "b");
    CHECK(l[1].token == 2);
    CHECK(l[1].updated_at_ms == 20);
    CHECK(l[2].prefix == "\xff");
    CHECK(f.highest_for("bx")->token == 2);
}
