// writes_in_flight (backends/writes_in_flight.hpp): when the fence cache may answer a
// rejection with the fence it holds.
#include "backends/writes_in_flight.hpp"

#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <thread>
#include <vector>

using fk::store::writes_in_flight;

TEST_CASE("writes_in_flight: quiet only with no write of the lock in flight") {
    writes_in_flight w;
    auto q = w.quiet("L");
    REQUIRE(q.has_value());
    CHECK(w.still("L", *q));
    {
        auto g = w.begin("L");
        CHECK_FALSE(w.quiet("L").has_value());
        CHECK_FALSE(w.still("L", *q));
        auto g2 = w.begin("L"); // two at once
        { auto moved = std::move(g); }
        CHECK_FALSE(w.quiet("L").has_value()); // g2 still in flight
    }
    auto q2 = w.quiet("L");
    REQUIRE(q2.has_value());
    // A write that began and ended between quiet() and still() is seen.
    CHECK_FALSE(w.still("L", *q));
    CHECK(w.still("L", *q2));
}

TEST_CASE("writes_in_flight: a floor raise is in flight for every lock") {
    writes_in_flight w;
    auto q = w.quiet("any/lock");
    REQUIRE(q.has_value());
    {
        auto g = w.begin_every_lock();
        CHECK_FALSE(w.quiet("any/lock").has_value());
        CHECK_FALSE(w.quiet("other").has_value());
    }
    CHECK(w.quiet("other").has_value());
    CHECK_FALSE(w.still("any/lock", *q));
}

TEST_CASE("writes_in_flight: other locks are independent, but for a shared slot") {
    writes_in_flight w;
    // Find a lock on another slot than "A": most are.
    auto g = w.begin("A");
    int quiet_others = 0;
    for (int i = 0; i < 100; ++i)
        quiet_others += w.quiet("lock" + std::to_string(i)).has_value() ? 1 : 0;
    CHECK(quiet_others >= 95);
}

TEST_CASE("writes_in_flight: balanced under threads") {
    writes_in_flight w;
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t)
        ts.emplace_back([&, t] {
            for (int i = 0; i < 20000; ++i) {
                auto g = w.begin("lock" + std::to_string((i + t) % 7));
                if (i % 100 == 0) {
                    auto all = w.begin_every_lock();
                }
            }
        });
    for (auto& t : ts)
        t.join();
    for (int i = 0; i < 7; ++i)
        CHECK(w.quiet("lock" + std::to_string(i)).has_value());
}
