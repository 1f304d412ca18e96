#include "backends/fence_cache.hpp"
#include "backends/postgres/detail/pool_state.hpp"

#include <doctest/doctest.h>

#include <memory>
#include <thread>
#include <vector>

using namespace fk::store;
using namespace fk::store::pg;

TEST_CASE("fence cache keeps the maximum and proves staleness only below it") {
    fence_cache c(100);
    CHECK_FALSE(c.stale_bound("L", 1).has_value());
    c.observe_fence("L", 10);
    c.observe_fence("L", 7); // an older observation never lowers it
    CHECK(c.fence("L") == 10);
    CHECK(c.stale_bound("L", 9) == 10);
    CHECK_FALSE(c.stale_bound("L", 10).has_value()); // equal is accepted: ask the DB
    CHECK_FALSE(c.stale_bound("L", 11).has_value());
    c.observe_key("k", "L");
    CHECK(c.key_known_under("k", "L"));
    CHECK_FALSE(c.key_known_under("k", "M"));
    c.forget_key("k");
    CHECK_FALSE(c.key_known_under("k", "L"));
}

TEST_CASE("fence cache is bounded and thread-safe") {
    fence_cache c(1000);
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t)
        ts.emplace_back([&, t] {
            for (int i = 0; i < 20000; ++i)
                c.observe_fence("lock" + std::to_string((i * 7 + t) % 5000), i);
        });
    for (auto& t : ts)
        t.join();
    CHECK(c.fence_count() <= 1000 + 16);
    CHECK(c.fence_count() > 0);
}

namespace {
struct fake_waiter {
    int id;
};
using waiter = std::shared_ptr<fake_waiter>;
using pool = detail::pool_state<int, waiter>;
} // namespace

TEST_CASE("pool: refuses while nothing is alive, queues up to the limit") {
    pool p(2, 1);
    auto w1 = std::make_shared<fake_waiter>(fake_waiter{1});
    auto w2 = std::make_shared<fake_waiter>(fake_waiter{2});
    CHECK(p.missing() == 2);
    CHECK(p.acquire(w1).d == pool::decision::reject); // database down: 503 at once
    p.connect_started();
    p.connect_started();
    CHECK(p.missing() == 0);
    CHECK_FALSE(p.connected(10).has_value());
    CHECK(p.live() == 1);
    auto a = p.acquire(w1);
    CHECK(a.d == pool::decision::take);
    CHECK(*a.conn == 10);
    CHECK(p.acquire(w1).d == pool::decision::wait);
    CHECK(p.acquire(w2).d == pool::decision::reject); // queue_limit 1
    // The second connection goes straight to the waiter.
    auto h = p.connected(11);
    REQUIRE(h.has_value());
    CHECK(h->first == w1);
    CHECK(h->second == 11);
    CHECK(p.waiting() == 0);
}

TEST_CASE("pool: healthy back to idle or a waiter, broken dropped and replaced") {
    pool p(2, 10);
    p.connect_started();
    p.connect_started();
    p.connected(1);
    p.connected(2);
    auto w = std::make_shared<fake_waiter>(fake_waiter{1});
    CHECK(*p.acquire(w).conn == 2); // most recently used first
    CHECK(*p.acquire(w).conn == 1);
    CHECK(p.acquire(w).d == pool::decision::wait);
    auto h = p.release(2, true);
    REQUIRE(h.has_value());
    CHECK(h->second == 2);
    CHECK_FALSE(p.release(1, false).has_value());
    CHECK(p.live() == 1);
    CHECK(p.missing() == 1);
    CHECK(p.release(2, true) == std::nullopt);
    CHECK(p.idle() == 1);
}

TEST_CASE("pool: waiters are failed when the last connection dies; cancel") {
    pool p(1, 10);
    p.connect_started();
    p.connected(1);
    auto w1 = std::make_shared<fake_waiter>(fake_waiter{1});
    auto w2 = std::make_shared<fake_waiter>(fake_waiter{2});
    CHECK(p.acquire(w1).d == pool::decision::take);
    CHECK(p.acquire(w1).d == pool::decision::wait);
    CHECK(p.acquire(w2).d == pool::decision::wait);
    CHECK(p.cancel(w2));
    CHECK_FALSE(p.cancel(w2));
    CHECK(p.stranded_waiters().empty()); // still one alive
    p.release(1, false);
    auto stranded = p.stranded_waiters();
    REQUIRE(stranded.size() == 1);
    CHECK(stranded[0] == w1);
    CHECK(p.waiting() == 0);
    CHECK(p.take_idle().empty());
}

TEST_CASE("pool: a request waits for the first connection attempt; only its failure refuses") {
    pool p(2, 10);
    auto w1 = std::make_shared<fake_waiter>(fake_waiter{1});
    auto w2 = std::make_shared<fake_waiter>(fake_waiter{2});
    // Start-up: one slot is connecting, nothing is alive yet.
    p.connect_started();
    CHECK(p.has_prospect());
    CHECK(p.acquire(w1).d == pool::decision::wait);
    CHECK(p.acquire(w2).d == pool::decision::wait);
    CHECK(p.stranded_waiters().empty());
    // The attempt succeeds: the first waiter gets the connection, the second keeps waiting
    // (for the connection's release or the next slot).
    auto h = p.connected(10);
    REQUIRE(h.has_value());
    CHECK(h->first == w1);
    CHECK(h->second == 10);
    CHECK(p.waiting() == 1);
    CHECK(p.stranded_waiters().empty());
    auto back = p.release(10, true);
    REQUIRE(back.has_value());
    CHECK(back->first == w2);
}

TEST_CASE("pool: a failed attempt refuses its waiters, a retry queues them again") {
    pool p(1, 10);
    auto w1 = std::make_shared<fake_waiter>(fake_waiter{1});
    auto w2 = std::make_shared<fake_waiter>(fake_waiter{2});
    p.connect_started();
    CHECK(p.acquire(w1).d == pool::decision::wait);
    auto refused = p.attempt_failed();
    REQUIRE(refused.size() == 1);
    CHECK(refused[0] == w1);
    CHECK(p.waiting() == 0);
    // Backing off: the last attempt failed, so a request is refused at once.
    CHECK_FALSE(p.has_prospect());
    CHECK(p.acquire(w2).d == pool::decision::reject);
    CHECK(p.missing() == 0); // the slot still counts: no second one is started
    // The retry: requests wait for it again, and its success serves them.
    p.attempt_started();
    CHECK(p.acquire(w2).d == pool::decision::wait);
    auto h = p.connected(7);
    REQUIRE(h.has_value());
    CHECK(h->first == w2);
    CHECK(p.attempting() == 0);
    CHECK(p.connecting() == 0);
    CHECK(p.live() == 1);
}

TEST_CASE("pool: with several attempts in progress, one failure refuses nobody") {
    pool p(2, 10);
    auto w = std::make_shared<fake_waiter>(fake_waiter{1});
    p.connect_started();
    p.connect_started();
    CHECK(p.acquire(w).d == pool::decision::wait);
    CHECK(p.attempt_failed().empty()); // the other attempt may still succeed
    CHECK(p.waiting() == 1);
    auto refused = p.attempt_failed();
    REQUIRE(refused.size() == 1);
    CHECK(refused[0] == w);
    p.slot_ended();
    p.slot_ended();
    CHECK(p.missing() == 2);
}

TEST_CASE("pool: when the last connection dies, waiters wait for its replacement") {
    pool p(1, 10);
    p.connect_started();
    CHECK_FALSE(p.connected(1).has_value());
    auto w = std::make_shared<fake_waiter>(fake_waiter{1});
    CHECK(p.acquire(w).d == pool::decision::take);
    CHECK(p.acquire(w).d == pool::decision::wait);
    CHECK_FALSE(p.release(1, false).has_value());
    // The store starts the replacement before it looks for stranded waiters.
    REQUIRE(p.missing() == 1);
    p.connect_started();
    CHECK(p.stranded_waiters().empty());
    auto h = p.connected(2);
    REQUIRE(h.has_value());
    CHECK(h->first == w);
}
