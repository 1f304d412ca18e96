#include "backends/file/file_store.hpp"

// Fence floors in the file store (docs/file-store.md, "Fence floors"; the contract in
// backends/store.hpp): every write path decided against the effective fence, the answers'
// current_token and floor, raises (equal refused, the limit, Idempotency-Key), reads,
// restarts, and a batch that mixes a raise with writes under and outside its prefix.
// Restarts after kill -9 and the format upgrade: file_store_recovery_test.cpp.

#include "backends/file/detail/file_store_impl.hpp"
#include "file_store_test_util.hpp"

#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace fk::store;
using fk::errc;
namespace net = boost::asio;
namespace detail = fk::store::detail;
using namespace fk::store::test;

namespace {

idempotency idem(std::string key, char fingerprint = 'a') {
    return {"", std::move(key), std::string(32, fingerprint)};
}

struct fixture {
    fixture() { reopen(); }

    temp_dir dir;
    net::io_context io;
    std::unique_ptr<store> s;

    void reopen() {
        s.reset();
        s = open_ok(io, dir.path / "root");
    }

    write_result put(std::string key, std::string lock, token_t token, std::string body = "v") {
        return run(io, s->put(put_req(std::move(key), std::move(lock), token, std::move(body))));
    }
    write_result del(std::string key, std::string lock, token_t token) {
        return run(io, s->remove(del_req(std::move(key), std::move(lock), token)));
    }
    write_result advance(std::string lock, token_t token, std::optional<idempotency> i = {}) {
        return run(io, s->advance_fence({std::move(lock), token, std::move(i)}));
    }
    write_result raise(std::string prefix, token_t token, std::optional<idempotency> i = {}) {
        return run(io, s->raise_floor({std::move(prefix), token, std::move(i)}));
    }
    fence_result read(std::string lock) { return run(io, s->read_fence(std::move(lock))); }
    std::vector<floor_info> floors() {
        auto r = run(io, s->list_floors());
        REQUIRE(r.error == errc::ok);
        return r.floors;
    }
    // Polls the io_context until the committer has been handed `n` items in all.
    void wait_enqueued(std::uint64_t n) {
        for (int i = 0; i < 5000 && detail::enqueued_for_tests() < n; ++i) {
            io.restart();
            io.poll();
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        REQUIRE(detail::enqueued_for_tests() == n);
    }
};

void check_stale(const write_result& r, token_t current, std::optional<std::string> floor) {
    CHECK(r.error == errc::stale_token);
    CHECK(r.current_token == current);
    CHECK(r.floor == floor);
}

} // namespace

TEST_CASE("floors: a write below a floor is refused for fenced and never-fenced locks") {
    fixture f;
    REQUIRE(f.put("jobs/a", "jobs/a", 5).error == errc::ok);     // own fence 5
    REQUIRE(f.put("jobs/hi", "jobs/hi", 200).error == errc::ok); // own fence above the floor
    const auto raised = f.raise("jobs/", 100);
    REQUIRE(raised.error == errc::ok);
    CHECK(raised.token == 100);

    // Below the floor: stale, the floor's token and prefix, for every write path.
    check_stale(f.put("jobs/a", "jobs/a", 99), 100, "jobs/");
    check_stale(f.put("jobs/new", "jobs/new", 1), 100, "jobs/"); // never fenced
    check_stale(f.del("jobs/a", "jobs/a", 50), 100, "jobs/");
    check_stale(f.del("jobs/none", "jobs/none", 50), 100, "jobs/"); // missing key, no fence
    check_stale(f.advance("jobs/a", 7), 100, "jobs/");
    check_stale(f.advance("jobs/fresh", 7), 100, "jobs/");
    // The own fence above the floor decides, and no floor is named.
    check_stale(f.put("jobs/hi", "jobs/hi", 150), 200, std::nullopt);
    check_stale(f.advance("jobs/hi", 199), 200, std::nullopt);
    // Outside the prefix nothing changes.
    CHECK(f.put("other", "other", 1).error == errc::ok);
    CHECK(f.put("jobs", "jobs", 1).error == errc::ok); // "jobs" does not start with "jobs/"
    // Nothing refused was applied.
    CHECK(run(f.io, f.s->get("jobs/new", true)).error == errc::not_found);
    CHECK(run(f.io, f.s->get("jobs/a", true)).version == 1);

    // At the floor and above: accepted, and the own fence moves as without floors.
    auto at = f.put("jobs/a", "jobs/a", 100);
    CHECK(at.error == errc::ok);
    CHECK(at.token == 100);
    CHECK(at.version == 2);
    CHECK(f.put("jobs/new", "jobs/new", 101).error == errc::ok);
    CHECK(f.advance("jobs/fresh", 100).error == errc::ok);
    CHECK(f.del("jobs/none", "jobs/none", 100).error == errc::ok);
    auto rf = f.read("jobs/fresh");
    CHECK(rf.fence.token == 100);
    CHECK_FALSE(rf.fence.floor); // its own fence is 100 now, equal to the floor
    // A later raise refuses writes the own fence alone accepted.
    REQUIRE(f.raise("jobs/", 300).error == errc::ok);
    check_stale(f.put("jobs/new", "jobs/new", 250), 300, "jobs/");
    check_stale(f.put("jobs/hi", "jobs/hi", 250), 300, "jobs/");
}

TEST_CASE("floors: the empty prefix covers every lock; the highest matching floor decides") {
    fixture f;
    REQUIRE(f.raise("", 10).error == errc::ok);
    REQUIRE(f.raise("a/", 30).error == errc::ok);
    REQUIRE(f.raise("a/b/", 20).error == errc::ok);
    check_stale(f.put("x", "x", 9), 10, "");
    check_stale(f.put("a/b/c", "a/b/c", 25), 30, "a/");
    CHECK(f.put("a/b/c", "a/b/c", 30).error == errc::ok);
    CHECK(f.put("x", "x", 10).error == errc::ok);
    // A key under a lock: the lock's name is what the floor matches.
    check_stale(f.put("z/key", "a/lock", 29), 30, "a/");
    CHECK(f.put("a/key", "x", 11).error == errc::ok);
}

TEST_CASE("floors: a raise must go up; equal and lower are refused with the floor") {
    fixture f;
    REQUIRE(f.raise("p", 5).error == errc::ok);
    auto equal = f.raise("p", 5);
    CHECK(equal.error == errc::stale_token);
    CHECK(equal.current_token == 5);
    auto lower = f.raise("p", 3);
    CHECK(lower.error == errc::stale_token);
    CHECK(lower.current_token == 5);
    auto up = f.raise("p", 6);
    CHECK(up.error == errc::ok);
    CHECK(up.token == 6);
    const auto list = f.floors();
    REQUIRE(list.size() == 1);
    CHECK(list[0].prefix == "p");
    CHECK(list[0].token == 6);
    CHECK(list[0].updated_at_ms > 0);
}

TEST_CASE("floors: at most store::max_floors; raising an existing prefix still works") {
    fixture f;
    // Queued together, so that they commit in a few batches.
    std::vector<std::optional<write_result>> out(max_floors);
    for (std::size_t i = 0; i < max_floors; ++i)
        net::co_spawn(f.io, f.s->raise_floor({"p" + std::to_string(i), 1, std::nullopt}),
                      [&out, i](std::exception_ptr, write_result r) { out[i] = r; });
    f.io.restart();
    f.io.run();
    for (auto& r : out) {
        REQUIRE(r);
        REQUIRE(r->error == errc::ok);
    }
    auto full = f.raise("another", 1);
    CHECK(full.error == errc::invalid_request);
    CHECK(full.message.find("1000") != std::string::npos);
    CHECK(f.raise("p7", 2).error == errc::ok);
    CHECK(f.floors().size() == max_floors);
    f.reopen(); // the limit counts the floors loaded from the index too
    CHECK(f.raise("another", 1).error == errc::invalid_request);
    CHECK(f.raise("p8", 2).error == errc::ok);
}

TEST_CASE("floors: a keyed raise replays its outcome; another request with its key is refused") {
    fixture f;
    auto first = f.raise("jobs/", 40, idem("r1"));
    REQUIRE(first.error == errc::ok);
    CHECK_FALSE(first.replayed);
    CHECK(first.token == 40);
    REQUIRE(f.raise("jobs/", 50).error == errc::ok); // the floor moves on
    auto again = f.raise("jobs/", 40, idem("r1"));
    CHECK(again.error == errc::ok);
    CHECK(again.replayed);
    CHECK(again.token == 40);
    CHECK(f.raise("jobs/", 60, idem("r1", 'b')).error == errc::idempotency_key_reused);
    CHECK(f.floors().front().token == 50); // neither applied anything
    // A refused raise records nothing: its retry is decided afresh.
    auto refused = f.raise("jobs/", 45, idem("r2"));
    CHECK(refused.error == errc::stale_token);
    CHECK(refused.current_token == 50);
    f.reopen();
    auto after = f.raise("jobs/", 40, idem("r1"));
    CHECK(after.replayed);
    CHECK(after.token == 40);
    CHECK(f.raise("jobs/", 70, idem("r2")).token == 70);
}

TEST_CASE("floors: read_fence returns the effective fence and names the floor that sets it") {
    fixture f;
    CHECK(f.read("jobs/a").error == errc::not_found);
    REQUIRE(f.put("jobs/a", "jobs/a", 5).error == errc::ok);
    REQUIRE(f.put("jobs/z", "jobs/z", 500).error == errc::ok);
    REQUIRE(f.raise("jobs/", 100).error == errc::ok);
    const auto floor_ms = f.floors().front().updated_at_ms;

    auto a = f.read("jobs/a"); // own 5, floor 100
    REQUIRE(a.error == errc::ok);
    CHECK(a.fence.lock == "jobs/a");
    CHECK(a.fence.token == 100);
    CHECK(a.fence.floor == std::optional<std::string>("jobs/"));
    CHECK(a.fence.updated_at_ms == floor_ms);
    auto none = f.read("jobs/never"); // only the floor
    REQUIRE(none.error == errc::ok);
    CHECK(none.fence.token == 100);
    CHECK(none.fence.floor == std::optional<std::string>("jobs/"));
    auto z = f.read("jobs/z"); // own fence above the floor
    REQUIRE(z.error == errc::ok);
    CHECK(z.fence.token == 500);
    CHECK_FALSE(z.fence.floor);
    CHECK(f.read("other").error == errc::not_found);
    // Listings stay own fences only.
    auto listed = run(f.io, f.s->list_fences({"jobs/", std::nullopt, 100}));
    REQUIRE(listed.fences.size() == 2);
    CHECK(listed.fences[0].token == 5);
}

TEST_CASE("floors: list_floors is sorted bytewise; floors survive a restart") {
    fixture f;
    for (const char* p : {"b", "a/", "", "A", "a\xC3\xA9", "ab"})
        REQUIRE(f.raise(p, 7).error == errc::ok);
    REQUIRE(f.raise("ab", 9).error == errc::ok);
    auto names = [&] {
        std::vector<std::string> out;
        for (auto& fl : f.floors())
            out.push_back(fl.prefix);
        return out;
    };
    const std::vector<std::string> sorted = {"", "A", "a/", "ab", "a\xC3\xA9", "b"};
    CHECK(names() == sorted);
    f.reopen();
    CHECK(names() == sorted);
    CHECK(f.floors()[3].token == 9);
    check_stale(f.put("abc", "abc", 8), 9, "ab");
    check_stale(f.advance("zzz", 6), 7, "");
    CHECK(f.raise("ab", 9).error == errc::stale_token);
}

TEST_CASE("floors: the fence cache never lets a write below a floor through") {
    fixture f;
    // The cache learns own fence 5 of L; a floor above it must still decide (and be named).
    REQUIRE(f.put("jobs/L", "jobs/L", 5).error == errc::ok);
    check_stale(f.put("jobs/L", "jobs/L", 4), 5, std::nullopt); // from the cache
    REQUIRE(f.raise("jobs/", 50).error == errc::ok);
    check_stale(f.put("jobs/L", "jobs/L", 4), 50, "jobs/");
    check_stale(f.del("jobs/L", "jobs/L", 4), 50, "jobs/");
    check_stale(f.advance("jobs/L", 4), 50, "jobs/");
    // The "already there" shortcut of a fence advance (cached own fence == token).
    check_stale(f.advance("jobs/L", 5), 50, "jobs/");
    // A stale answer that a floor gave teaches the cache nothing: the own fence is still 5.
    CHECK(f.advance("jobs/L", 50).error == errc::ok);
    auto r = f.read("jobs/L");
    CHECK(r.fence.token == 50);
    CHECK_FALSE(r.fence.floor); // the own fence moved to 50
    // Keyed writes: the record first, then the same checks.
    auto keyed = put_req("jobs/L", "jobs/L", 4, "v");
    keyed.idem = idem("k1");
    check_stale(run(f.io, f.s->put(std::move(keyed))), 50, std::nullopt);
    REQUIRE(f.raise("jobs/", 60).error == errc::ok);
    auto keyed2 = put_req("jobs/L", "jobs/L", 55, "v");
    keyed2.idem = idem("k2");
    check_stale(run(f.io, f.s->put(std::move(keyed2))), 60, "jobs/");
    check_stale(f.advance("jobs/L", 55, idem("k3")), 60, "jobs/");
}

TEST_CASE("floors: a batch decides in order against the floors of its earlier raises") {
    fixture f;
    REQUIRE(f.put("jobs/a", "jobs/a", 1).error == errc::ok);
    REQUIRE(f.put("free/a", "free/a", 1).error == errc::ok);
    const auto base = detail::enqueued_for_tests();
    std::vector<std::optional<write_result>> out(7);
    auto keep = [&out](std::size_t i) {
        return [&out, i](std::exception_ptr, write_result r) { out[i] = std::move(r); };
    };
    detail::set_commit_hold_for_tests(true);
    // 0: before the raise, below it: accepted (ordered before it).
    net::co_spawn(f.io, f.s->put(put_req("jobs/a", "jobs/a", 5, "before")), keep(0));
    f.wait_enqueued(base + 1);
    net::co_spawn(f.io, f.s->raise_floor({"jobs/", 10, std::nullopt}), keep(1));
    f.wait_enqueued(base + 2);
    // After the raise in the same batch: below it refused, at it accepted, outside it free.
    net::co_spawn(f.io, f.s->put(put_req("jobs/a", "jobs/a", 6, "after")), keep(2));
    f.wait_enqueued(base + 3);
    net::co_spawn(f.io, f.s->put(put_req("free/a", "free/a", 2, "free")), keep(3));
    f.wait_enqueued(base + 4);
    net::co_spawn(f.io, f.s->advance_fence({"jobs/b", 10, std::nullopt}), keep(4));
    f.wait_enqueued(base + 5);
    net::co_spawn(f.io, f.s->raise_floor({"jobs/", 10, std::nullopt}), keep(5)); // equal
    f.wait_enqueued(base + 6);
    net::co_spawn(f.io, f.s->remove(del_req("jobs/c", "jobs/c", 9)), keep(6));
    f.wait_enqueued(base + 7);
    detail::set_commit_hold_for_tests(false);
    f.io.restart();
    f.io.run();
    for (auto& r : out)
        REQUIRE(r);
    CHECK(out[0]->error == errc::ok);
    CHECK(out[1]->error == errc::ok);
    check_stale(*out[2], 10, "jobs/");
    CHECK(out[3]->error == errc::ok);
    CHECK(out[4]->error == errc::ok);
    CHECK(out[5]->error == errc::stale_token);
    CHECK(out[5]->current_token == 10);
    check_stale(*out[6], 10, "jobs/");
    CHECK(run(f.io, f.s->get("jobs/a", true)).body == "before");
    CHECK(run(f.io, f.s->get("free/a", true)).body == "free");
    CHECK(f.read("jobs/b").fence.token == 10);
}

// Raises, writes, fence reads, listings and the cache's fast path at once: the pool's
// readers and the I/O thread read the floors while the committer installs them (run under
// ThreadSanitizer too). Every answer agrees with the rule as of some moment.
TEST_CASE("floors: raises, writes and reads at once") {
    fixture f;
    constexpr int rounds = 40;
    std::vector<std::optional<write_result>> writes(rounds * 3), raises(rounds);
    std::vector<std::optional<fence_result>> reads(rounds);
    std::vector<std::optional<floors_result>> lists(rounds);
    REQUIRE(f.raise("c/", 5).error == errc::ok); // every read finds at least this
    for (int i = 0; i < rounds; ++i) {
        const token_t t = 10 * (i + 1);
        net::co_spawn(f.io, f.s->raise_floor({"c/", t, std::nullopt}),
                      [&raises, i](std::exception_ptr, write_result r) { raises[i] = r; });
        for (int j = 0; j < 3; ++j) {
            const std::string lock = "c/" + std::to_string(j);
            const token_t wt = t + 5 - 10 * j; // above, a little below, well below
            auto done = [&writes, k = i * 3 + j](std::exception_ptr, write_result r) {
                writes[k] = r;
            };
            if (j == 1)
                net::co_spawn(f.io, f.s->advance_fence({lock, wt, std::nullopt}), done);
            else
                net::co_spawn(f.io, f.s->put(put_req(lock, lock, wt, "v")), done);
        }
        net::co_spawn(f.io, f.s->read_fence("c/" + std::to_string(i % 3)),
                      [&reads, i](std::exception_ptr, fence_result r) { reads[i] = r; });
        net::co_spawn(f.io, f.s->list_floors(),
                      [&lists, i](std::exception_ptr, floors_result r) { lists[i] = r; });
    }
    f.io.restart();
    f.io.run();
    for (auto& r : raises) {
        REQUIRE(r);
        CHECK(r->error == errc::ok); // queued in order: each goes up
    }
    for (auto& w : writes) {
        REQUIRE(w);
        CHECK((w->error == errc::ok || w->error == errc::stale_token));
        if (w->error == errc::stale_token) {
            CHECK(w->current_token > 0);
            CHECK((!w->floor || *w->floor == "c/"));
        }
    }
    for (auto& r : reads) {
        REQUIRE(r);
        CHECK(r->error == errc::ok);
        CHECK((!r->fence.floor || *r->fence.floor == "c/"));
    }
    for (auto& l : lists) {
        REQUIRE(l);
        CHECK(l->error == errc::ok);
        CHECK(l->floors.size() == 1);
    }
    CHECK(f.floors().front().token == 10 * rounds);
    for (int j = 0; j < 3; ++j) {
        const auto r = f.read("c/" + std::to_string(j));
        CHECK(r.fence.token >= 10 * rounds);
    }
}
