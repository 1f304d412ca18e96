#include "fence/rule.hpp"

#include <doctest/doctest.h>

using fk::errc;
using namespace fk::fence;

TEST_CASE("the fence rule") {
    CHECK(accepts(std::nullopt, 0));
    CHECK(accepts(5, 5));
    CHECK(accepts(5, 6));
    CHECK_FALSE(accepts(5, 4));
    CHECK_FALSE(accepts(INT64_MAX, INT64_MAX - 1));
    CHECK(advanced(std::nullopt, 3) == 3);
    CHECK(advanced(3, 7) == 7);
    CHECK(advanced(7, 7) == 7);
}

TEST_CASE("check_write: order is lock_mismatch, stale, precondition") {
    key_state absent{};
    key_state mine{true, "L", 3};
    key_state theirs{true, "other", 3};
    preconditions none{};

    CHECK(check_write(absent, "L", std::nullopt, 1, none) == errc::ok);
    CHECK(check_write(mine, "L", 10, 10, none) == errc::ok);
    CHECK(check_write(mine, "L", 10, 9, none) == errc::stale_token);
    // lock mismatch wins over a stale token
    CHECK(check_write(theirs, "L", 10, 9, none) == errc::lock_mismatch);
    CHECK(check_write(theirs, "L", 10, 11, none) == errc::lock_mismatch);
    // a stale token wins over a failed precondition
    preconditions create_only{std::nullopt, false, true};
    CHECK(check_write(mine, "L", 10, 9, create_only) == errc::stale_token);
    CHECK(check_write(mine, "L", 10, 11, create_only) == errc::precondition_failed);
    CHECK(check_write(absent, "L", 10, 11, create_only) == errc::ok);
    // a deleted key (exists == false) is free for any lock, version kept
    key_state deleted{false, "other", 4};
    CHECK(check_write(deleted, "L", std::nullopt, 1, none) == errc::ok);
    CHECK(check_write(deleted, "L", std::nullopt, 1, create_only) == errc::ok);
}

TEST_CASE("check_write: If-Match") {
    key_state mine{true, "L", 3};
    CHECK(check_write(mine, "L", 1, 2, preconditions{3, false, false}) == errc::ok);
    CHECK(check_write(mine, "L", 1, 2, preconditions{2, false, false}) ==
          errc::precondition_failed);
    CHECK(check_write(key_state{}, "L", 1, 2, preconditions{1, false, false}) ==
          errc::precondition_failed);
    CHECK(check_write(mine, "L", 1, 2, preconditions{std::nullopt, true, false}) == errc::ok);
    CHECK(check_write(key_state{}, "L", 1, 2, preconditions{std::nullopt, true, false}) ==
          errc::precondition_failed);
}

TEST_CASE("error codes have wire names") {
    CHECK(fk::to_string(errc::stale_token) == "stale_token");
    CHECK(fk::to_string(errc::outcome_unknown) == "outcome_unknown");
    CHECK(fk::make_error_code(errc::lock_mismatch).message() == "lock_mismatch");
}
