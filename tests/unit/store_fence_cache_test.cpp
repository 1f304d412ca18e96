// The stale-rejection cache's storage: packed names, the flat LRU-ish tables, and
// fence_cache's semantics on top of them (bounded, fences only rise, thread-safe).
#include "backends/fence_cache.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace fk::store;
using cache_detail::fence_slot;
using cache_detail::lru_table;
using cache_detail::packed_name;

namespace {
std::uint32_t hash_of(const std::string& s) {
    return cache_detail::name_hash(s).table_hash();
}

fence_slot slot(const std::string& name, fk::fence::token_t t) {
    return fence_slot(name, t, hash_of(name));
}

fence_slot* find(lru_table<fence_slot>& t, const std::string& name) {
    return t.find(name, hash_of(name));
}
} // namespace

TEST_CASE("packed_name holds short names inline and long ones on the heap") {
    const std::string fifteen(15, 'a'), sixteen(16, 'b');
    packed_name a(fifteen);
    CHECK_FALSE(a.on_heap());
    CHECK(a.view() == fifteen);
    packed_name b(sixteen);
    CHECK(b.on_heap());
    CHECK(b.view() == sixteen);
    packed_name both("key", "lock");
    CHECK(both.view() == "keylock");
    packed_name empty;
    CHECK(empty.view().empty());

    packed_name moved(std::move(b));
    CHECK(moved.view() == sixteen);
    CHECK(b.view().empty()); // NOLINT(bugprone-use-after-move): a move leaves it empty
    moved = packed_name(fifteen, sixteen);
    CHECK(moved.view() == fifteen + sixteen);
    moved = std::move(a);
    CHECK(moved.view() == fifteen);
}

TEST_CASE("lru_table is exact LRU while it holds no more than the eviction sample") {
    lru_table<fence_slot> t(3);
    t.insert(slot("a", 1));
    t.insert(slot("b", 2));
    t.insert(slot("c", 3));
    REQUIRE(find(t, "a"));  // a is now the most recently used
    t.insert(slot("d", 4)); // evicts b
    CHECK(find(t, "a"));
    CHECK_FALSE(find(t, "b"));
    CHECK(find(t, "c")->token == 3);
    CHECK(find(t, "d"));    // order of use now: a, c, d
    t.insert(slot("e", 5)); // evicts a
    CHECK_FALSE(find(t, "a"));
    CHECK(t.size() == 3);
    CHECK(t.erase("c", hash_of("c")));
    CHECK_FALSE(t.erase("c", hash_of("c")));
    CHECK(t.size() == 2);

    lru_table<fence_slot> off(0);
    CHECK(off.insert(slot("a", 1)) == nullptr);
    CHECK(off.size() == 0);
    CHECK_FALSE(find(off, "a"));
}

TEST_CASE("lru_table keeps recently used entries under a stream of new ones") {
    constexpr int cap = 1000;
    lru_table<fence_slot> t(cap);
    // Fewer hot entries than the eviction sample: every sample holds an older entry.
    const int hot = static_cast<int>(lru_table<fence_slot>::eviction_sample) - 1;
    for (int i = 0; i < hot; ++i)
        t.insert(slot("hot" + std::to_string(i), i));
    constexpr int stream = 20 * cap;
    for (int i = 0; i < stream; ++i) {
        auto* s = t.insert(slot("n" + std::to_string(i), i));
        REQUIRE(s);
        CHECK(s->key() == "n" + std::to_string(i));
        for (int h = 0; h < hot; ++h)
            REQUIRE(find(t, "hot" + std::to_string(h)));
        REQUIRE(t.size() == static_cast<std::size_t>(std::min(hot + i + 1, cap)));
    }
    CHECK(t.slot_count() <= cap + cap / 4 + 1); // table stays at capacity / 0.8
    int old_left = 0, recent_left = 0;
    for (int i = 0; i < cap; ++i)
        old_left += find(t, "n" + std::to_string(i)) != nullptr;
    for (int i = stream - cap / 4; i < stream; ++i)
        recent_left += find(t, "n" + std::to_string(i)) != nullptr;
    CHECK(old_left == 0);
    CHECK(recent_left >= cap / 4 * 9 / 10); // the newest quarter is nearly all there
}

TEST_CASE("lru_table matches a map under inserts, finds and erases, even on equal hashes") {
    // Forcing a handful of hash values makes long probe chains and same-hash neighbours:
    // entries must still be told apart by their full names.
    for (std::uint32_t distinct_hashes : {3u, 1000u, 0xFFFF'FFFFu}) {
        CAPTURE(distinct_hashes);
        lru_table<fence_slot> t(4000); // larger than the name space: nothing is evicted
        std::map<std::string, std::pair<int, fk::fence::token_t>> model; // n, token
        std::mt19937 rng(42);
        auto h_of = [&](int n) {
            return static_cast<std::uint32_t>(n * 2654435761u % distinct_hashes) + 1;
        };
        for (int step = 0; step < 60000; ++step) {
            const int n = static_cast<int>(rng() % 3000);
            const std::string name = (n % 2 ? "lock-with-a-long-name-" : "l") + std::to_string(n);
            const auto h = h_of(n);
            switch (rng() % 3) {
            case 0: {
                auto* s = t.find(name, h);
                REQUIRE((s != nullptr) == model.count(name));
                if (s) {
                    s->token = step;
                } else {
                    auto* added = t.insert(fence_slot(name, step, h));
                    REQUIRE(added);
                    CHECK(added->key() == name);
                }
                model[name] = {n, step};
                break;
            }
            case 1:
                REQUIRE(t.erase(name, h) == (model.erase(name) == 1));
                break;
            default: {
                auto* s = t.find(name, h);
                auto it = model.find(name);
                REQUIRE((s != nullptr) == (it != model.end()));
                if (s)
                    CHECK(s->token == it->second.second);
            }
            }
            REQUIRE(t.size() == model.size());
        }
        for (auto& [name, v] : model) {
            auto* s = t.find(name, h_of(v.first));
            REQUIRE(s);
            CHECK(s->token == v.second);
        }
    }
}

TEST_CASE("fence cache: keys under themselves, under other locks, and long names") {
    fence_cache c(100);
    c.observe_key("k", "k");
    CHECK(c.key_known_under("k", "k"));
    CHECK_FALSE(c.key_known_under("k", "K"));
    c.observe_key("k", "other-lock"); // moved to another lock
    CHECK(c.key_known_under("k", "other-lock"));
    CHECK_FALSE(c.key_known_under("k", "k"));
    CHECK_FALSE(c.key_known_under("other-lock", "other-lock"));

    const std::string long_key(300, 'k'), long_lock(200, 'L');
    c.observe_key(long_key, long_lock);
    CHECK(c.key_known_under(long_key, long_lock));
    CHECK_FALSE(c.key_known_under(long_key, long_key));
    CHECK_FALSE(c.key_known_under(long_key, long_lock + "x"));
    CHECK_FALSE(c.key_known_under(long_key + "x", long_lock));
    c.observe_key(long_key, long_key);
    CHECK(c.key_known_under(long_key, long_key));
    CHECK_FALSE(c.key_known_under(long_key, long_lock));
    c.forget_key(long_key);
    CHECK_FALSE(c.key_known_under(long_key, long_key));

    c.observe_fence(long_lock, 5);
    c.observe_fence(long_lock, 3);
    CHECK(c.fence(long_lock) == 5);
    CHECK(c.stale_bound(long_lock, 4) == 5);
    CHECK_FALSE(c.fence(long_lock + "x").has_value());
    CHECK_FALSE(c.stale_bound("never-seen", 0).has_value());
}

TEST_CASE("fence cache with capacity 0 keeps nothing") {
    fence_cache c(0);
    c.observe_fence("L", 10);
    c.observe_key("k", "L");
    CHECK_FALSE(c.fence("L").has_value());
    CHECK_FALSE(c.stale_bound("L", 1).has_value());
    CHECK_FALSE(c.key_known_under("k", "L"));
    c.forget_key("k");
    CHECK(c.fence_count() == 0);
}

TEST_CASE("fence cache stays within its capacity and keeps the newest locks") {
    constexpr std::size_t cap = 1600; // 100 per shard
    fence_cache c(cap);
    for (int i = 0; i < 20000; ++i) {
        const std::string lock = "m-" + std::to_string(i);
        c.observe_fence(lock, i + 1);
        c.observe_key(lock, lock);
        REQUIRE(c.fence(lock) == i + 1); // just seen: always there
        REQUIRE(c.key_known_under(lock, lock));
    }
    CHECK(c.fence_count() <= cap);
    CHECK(c.fence_count() > cap * 3 / 4);
    CHECK_FALSE(c.fence("m-0").has_value());
    CHECK_FALSE(c.key_known_under("m-0", "m-0"));
}

TEST_CASE("fence cache: concurrent observers never lower a fence") {
    fence_cache c(10000); // room for every lock: nothing is evicted
    constexpr int locks = 200, rounds = 2000;
    std::atomic<bool> stop{false};
    std::atomic<int> failures{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < 3; ++t)
        ts.emplace_back([&, t] {
            for (int r = 0; r < rounds; ++r)
                for (int l = t; l < locks; l += 3) {
                    const std::string lock = "lock" + std::to_string(l);
                    c.observe_fence(lock, r);
                    c.observe_fence(lock, r / 2); // late, older report
                    const std::string key = "key" + std::to_string(l);
                    c.observe_key(key, r % 2 ? lock : key);
                    if (r % 7 == 0)
                        c.forget_key(key);
                }
        });
    ts.emplace_back([&] {
        std::vector<fk::fence::token_t> last(locks, -1);
        while (!stop.load()) {
            for (int l = 0; l < locks; ++l) {
                const std::string lock = "lock" + std::to_string(l);
                if (auto f = c.fence(lock)) {
                    if (*f < last[l])
                        ++failures;
                    last[l] = *f;
                }
                (void)c.key_known_under("key" + std::to_string(l), lock);
            }
        }
    });
    for (int t = 0; t < 3; ++t)
        ts[t].join();
    stop = true;
    ts.back().join();
    CHECK(failures.load() == 0);
    CHECK(c.fence_count() == locks);
    for (int l = 0; l < locks; ++l)
        CHECK(c.fence("lock" + std::to_string(l)) == rounds - 1);
}
