#include "proxy/overload.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

using fk::proxy::limiter;

TEST_CASE("a limiter hands out at most `limit` permits and takes them back") {
    limiter l(2);
    CHECK(l.limit() == 2);
    auto a = l.try_acquire();
    auto b = l.try_acquire();
    auto c = l.try_acquire();
    CHECK(a);
    CHECK(b);
    CHECK_FALSE(c);
    CHECK(l.in_use() == 2);
    a.release();
    a.release(); // idempotent
    CHECK(l.in_use() == 1);
    auto d = l.try_acquire();
    CHECK(d);
    CHECK_FALSE(l.try_acquire());
    {
        auto scoped = std::move(d); // moving transfers, not duplicates, the permit
        CHECK_FALSE(d);
        CHECK(l.in_use() == 2);
    }
    CHECK(l.in_use() == 1);
    b = limiter::permit(); // assigning over a held permit releases it
    CHECK(l.in_use() == 0);
}

TEST_CASE("limit 0 refuses everything; unlimited refuses nothing") {
    limiter none(0);
    CHECK_FALSE(none.try_acquire());
    CHECK(none.in_use() == 0);

    limiter all(limiter::unlimited);
    std::vector<limiter::permit> held;
    for (int i = 0; i < 1000; ++i) {
        held.push_back(all.try_acquire());
        CHECK(held.back());
    }
    CHECK(all.in_use() == 1000);
    held.clear();
    CHECK(all.in_use() == 0);
}

TEST_CASE("lowering the limit keeps held permits and refuses new ones until below it") {
    limiter l(3);
    auto a = l.try_acquire();
    auto b = l.try_acquire();
    l.set_limit(1);
    CHECK(a);
    CHECK(b);
    CHECK_FALSE(l.try_acquire());
    a.release();
    CHECK_FALSE(l.try_acquire()); // 1 held, limit 1
    b.release();
    auto c = l.try_acquire();
    CHECK(c);
    l.set_limit(0); // draining
    c.release();
    CHECK_FALSE(l.try_acquire());
}

TEST_CASE("concurrent acquirers never exceed the limit and account for every attempt") {
    constexpr std::size_t cap = 5;
    constexpr int threads = 8;
    constexpr int attempts = 20'000;
    limiter l(cap);
    std::atomic<std::size_t> holders{0};
    std::atomic<std::size_t> max_seen{0};
    std::atomic<long> granted{0}, refused{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&] {
            for (int i = 0; i < attempts; ++i) {
                auto p = l.try_acquire();
                if (!p) {
                    ++refused;
                    continue;
                }
                ++granted;
                const auto now = ++holders;
                auto prev = max_seen.load();
                while (now > prev && !max_seen.compare_exchange_weak(prev, now)) {
                }
                --holders;
            }
        });
    }
    for (auto& t : pool) {
        t.join();
    }
    CHECK(max_seen.load() <= cap);
    CHECK(granted.load() + refused.load() == long(threads) * attempts);
    CHECK(granted.load() > 0);
    CHECK(l.in_use() == 0);
}
