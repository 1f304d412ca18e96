#include "backends/file/file_store.hpp"

#include "backends/file/detail/file_store_impl.hpp"
#include "backends/file/detail/sys.hpp"
#include "file_store_test_util.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

using namespace fk::store;
using fk::errc;
namespace fence = fk::fence;
namespace net = boost::asio;
namespace detail = fk::store::detail;
using namespace fk::store::test;
using fk::config::file_flush;

namespace {

struct fixture {
    explicit fixture(file_flush flush = file_flush::syncfs, int io_threads = 4)
        : s(open_ok(io, dir.path / "root", io_threads, flush)) {}

    temp_dir dir;
    net::io_context io;
    std::unique_ptr<store> s;

    write_result put(std::string key, std::string lock, token_t token, std::string body,
                     fence::preconditions pre = {}) {
        auto r = put_req(std::move(key), std::move(lock), token, std::move(body));
        r.pre = pre;
        return run(io, s->put(std::move(r)));
    }
    write_result del(std::string key, std::string lock, token_t token,
                     fence::preconditions pre = {}) {
        auto r = del_req(std::move(key), std::move(lock), token);
        r.pre = pre;
        return run(io, s->remove(std::move(r)));
    }
    object_result get(std::string key, bool body = true) {
        return run(io, s->get(std::move(key), body));
    }
    write_result advance(std::string lock, token_t token) {
        return run(io, s->advance_fence(fk::store::fence_request{std::move(lock), token, {}}));
    }
    fence_result fence_of(std::string lock) { return run(io, s->read_fence(std::move(lock))); }
    list_result list(std::string prefix, std::optional<std::string> after, std::size_t limit) {
        list_request r;
        r.prefix = std::move(prefix);
        r.after = std::move(after);
        r.limit = limit;
        return run(io, s->list_fences(std::move(r)));
    }
    // Polls the io_context every millisecond until done() or about 5 s have passed.
    template <typename Done> void poll_until(Done done) {
        for (int i = 0; i < 5000 && !done(); ++i) {
            io.restart();
            io.poll();
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }
    // Runs the io_context until the committer has been handed N items in all (the test
    // hook holding commits keeps them queued).
    void wait_enqueued(std::uint64_t n) {
        poll_until([n] { return detail::enqueued_for_tests() >= n; });
        REQUIRE(detail::enqueued_for_tests() == n);
    }
    std::string body_file(const std::string& rel) {
        std::ifstream in(dir.path / "root" / "objects" / rel, std::ios::binary);
        return {std::istreambuf_iterator<char>(in), {}};
    }
};

} // namespace

TEST_CASE("put, get, head and delete") {
    fixture f;
    CHECK(f.s->ready());
    auto w = f.put("k", "k", 5, "hello");
    CHECK(w.error == errc::ok);
    CHECK(w.created);
    CHECK(w.version == 1);
    CHECK(w.token == 5);

    auto g = f.get("k");
    CHECK(g.error == errc::ok);
    CHECK(g.body == "hello");
    CHECK(g.size == 5);
    CHECK(g.content_type == "text/plain");
    CHECK(g.version == 1);
    CHECK(g.token == 5);
    CHECK(g.lock == "k");
    CHECK(f.body_file("k") == "hello");

    auto h = f.get("k", false);
    CHECK(h.error == errc::ok);
    CHECK(h.body.empty());
    CHECK(h.size == 5);
    CHECK(h.version == 1);

    auto w2 = f.put("k", "k", 5, "world!"); // equal token: accepted
    CHECK(w2.error == errc::ok);
    CHECK_FALSE(w2.created);
    CHECK(w2.version == 2);
    CHECK(f.get("k").body == "world!");

    auto d = f.del("k", "k", 6);
    CHECK(d.error == errc::ok);
    CHECK(f.get("k").error == errc::not_found);
    CHECK(f.get("k", false).error == errc::not_found);
    CHECK_FALSE(std::filesystem::exists(f.dir.path / "root" / "objects" / "k"));
    CHECK(f.fence_of("k").fence.token == 6);

    // A write after a delete continues the count and is "created" again.
    auto w3 = f.put("k", "k", 7, "again");
    CHECK(w3.error == errc::ok);
    CHECK(w3.created);
    CHECK(w3.version == 3);
    CHECK(f.get("missing").error == errc::not_found);
}

TEST_CASE("an empty body and binary bytes are stored byte for byte") {
    fixture f;
    CHECK(f.put("empty", "empty", 0, "").error == errc::ok);
    CHECK(f.get("empty").body.empty());
    std::string bin;
    for (int i = 0; i < 70000; ++i)
        bin += static_cast<char>(i * 31);
    CHECK(f.put("bin", "bin", 1, bin).error == errc::ok);
    CHECK(f.get("bin").body == bin);
}

TEST_CASE("a stale write is rejected and changes nothing") {
    fixture f;
    REQUIRE(f.put("k", "L", 10, "v1").error == errc::ok);
    auto w = f.put("k", "L", 9, "zombie");
    CHECK(w.error == errc::stale_token);
    CHECK(w.current_token == 10);
    auto g = f.get("k");
    CHECK(g.body == "v1");
    CHECK(g.version == 1);
    CHECK(g.token == 10);
    CHECK(f.fence_of("L").fence.token == 10);
    auto d = f.del("k", "L", 3);
    CHECK(d.error == errc::stale_token);
    CHECK(f.get("k").body == "v1");
    // The stale write left no temp file behind.
    std::size_t files = 0;
    for (auto& e : std::filesystem::recursive_directory_iterator(f.dir.path / "root" / "objects")) {
        (void)e;
        ++files;
    }
    CHECK(files == 1);
    // A fence advanced without data also fences out writes.
    CHECK(f.advance("L", 20).error == errc::ok);
    CHECK(f.put("k", "L", 19, "x").error == errc::stale_token);
    CHECK(f.put("other", "L", 15, "x").current_token == 20);
}

TEST_CASE("a key belongs to its lock until deleted") {
    fixture f;
    REQUIRE(f.put("k", "A", 5, "v").error == errc::ok);
    auto w = f.put("k", "B", 100, "x");
    CHECK(w.error == errc::lock_mismatch);
    CHECK(w.lock == "A");
    // lock_mismatch is checked before the fence
    auto stale = f.put("k", "B", 0, "x");
    CHECK(stale.error == errc::lock_mismatch);
    CHECK(f.del("k", "B", 100).error == errc::lock_mismatch);
    CHECK(f.fence_of("B").error == errc::not_found); // nothing advanced
    CHECK(f.del("k", "A", 5).error == errc::ok);
    auto again = f.put("k", "B", 1, "free again");
    CHECK(again.error == errc::ok);
    CHECK(again.version == 2); // v1, tombstone (keeps 1), v2
    CHECK(f.get("k").lock == "B");
}

TEST_CASE("If-Match and If-None-Match: *") {
    fixture f;
    fence::preconditions create_only;
    create_only.if_none_match_any = true;
    CHECK(f.put("k", "k", 1, "v1", create_only).error == errc::ok);
    CHECK(f.put("k", "k", 2, "v2", create_only).error == errc::precondition_failed);
    CHECK(f.fence_of("k").fence.token == 1); // a failed precondition leaves the fence
    fence::preconditions match1;
    match1.if_match = 1;
    CHECK(f.put("k", "k", 2, "v2", match1).error == errc::ok);
    CHECK(f.put("k", "k", 3, "v3", match1).error == errc::precondition_failed);
    CHECK(f.get("k").body == "v2");
    fence::preconditions match2;
    match2.if_match = 2;
    CHECK(f.del("k", "k", 3, match1).error == errc::precondition_failed);
    CHECK(f.del("k", "k", 3, match2).error == errc::ok);
    CHECK(f.put("nokey", "nokey", 1, "x", match1).error == errc::precondition_failed);
}

TEST_CASE("deleting a missing key still checks and advances the fence") {
    fixture f;
    auto d = f.del("never", "L", 7);
    CHECK(d.error == errc::ok);
    CHECK(f.fence_of("L").fence.token == 7);
    CHECK(f.del("never", "L", 6).error == errc::stale_token);
    CHECK(f.del("never", "L", 7).error == errc::ok);
}

TEST_CASE("fence advance, read and paginated listing") {
    fixture f;
    CHECK(f.fence_of("x").error == errc::not_found);
    auto before = std::chrono::system_clock::now();
    for (auto lock : {"b/2", "a", "b/1", "c", "b/3", "bb"})
        CHECK(f.advance(lock, 10).error == errc::ok);
    auto fr = f.fence_of("b/1");
    CHECK(fr.error == errc::ok);
    CHECK(fr.fence.lock == "b/1");
    CHECK(fr.fence.token == 10);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(before.time_since_epoch());
    CHECK(fr.fence.updated_at_ms >= ms.count());
    auto w = f.advance("b/1", 9);
    CHECK(w.error == errc::stale_token);
    CHECK(w.current_token == 10);
    CHECK(f.advance("b/1", 10).error == errc::ok);
    auto w2 = f.advance("b/1", 11);
    CHECK(w2.error == errc::ok);
    CHECK(w2.token == 11);

    auto all = f.list("", std::nullopt, 100);
    REQUIRE(all.fences.size() == 6);
    CHECK(all.fences[0].lock == "a");
    CHECK(all.fences[1].lock == "b/1");
    CHECK(all.fences[1].token == 11);
    CHECK(all.fences[5].lock == "c");
    CHECK_FALSE(all.next);

    auto p1 = f.list("b", std::nullopt, 2);
    REQUIRE(p1.fences.size() == 2);
    CHECK(p1.fences[0].lock == "b/1");
    CHECK(p1.fences[1].lock == "b/2");
    REQUIRE(p1.next);
    CHECK(*p1.next == "b/2");
    auto p2 = f.list("b", p1.next, 2);
    REQUIRE(p2.fences.size() == 2);
    CHECK(p2.fences[0].lock == "b/3");
    CHECK(p2.fences[1].lock == "bb");
    CHECK_FALSE(p2.next); // nothing after "bb" matches "b"
    CHECK(f.list("b/", std::nullopt, 3).fences.size() == 3);
    CHECK_FALSE(f.list("b/", std::nullopt, 3).next);
    CHECK(f.list("zzz", std::nullopt, 10).fences.empty());
    CHECK(f.list("", std::string("bb"), 10).fences.size() == 1);
    CHECK(f.list("b", std::string("a"), 10).fences.size() == 4); // after before the prefix
}

TEST_CASE("keys that look like paths never escape ROOT/objects") {
    fixture f;
    std::string percent(1024, '%');
    std::string euro;
    for (int i = 0; i < 341; ++i)
        euro += "\xE2\x82\xAC";
    std::vector<std::string> keys = {"a",
                                     "a/b",
                                     "..a",
                                     "a/..b",
                                     ".../x",
                                     "%2e%2e",
                                     "~",
                                     "a~/b",
                                     "a~tmp~x",
                                     "x~+",
                                     "LOCK",
                                     "journal",
                                     "index.db",
                                     "index.db-wal",
                                     "objects/../x",
                                     percent,
                                     euro,
                                     std::string(1024, 'z'),
                                     "\xC3\xA9/\xE2\x82\xAC",
                                     "a b/c d"};
    // "objects/../x" is not a valid key (".." segment): rejected, never touches disk.
    token_t t = 1;
    for (const auto& k : keys) {
        auto w = f.put(k, "shared", t++, "body of " + k);
        if (k == "objects/../x") {
            CHECK(w.error == errc::invalid_name);
            continue;
        }
        CHECK_MESSAGE(w.error == errc::ok, k);
    }
    for (const auto& k : keys) {
        if (k == "objects/../x")
            continue;
        auto g = f.get(k);
        CHECK_MESSAGE(g.error == errc::ok, k);
        CHECK_MESSAGE(g.body == "body of " + k, k);
    }
    // Only ROOT exists next to ROOT, and ROOT holds only LOCK, the index and objects.
    std::vector<std::string> top, inside;
    for (auto& e : std::filesystem::directory_iterator(f.dir.path))
        top.push_back(e.path().filename().string());
    for (auto& e : std::filesystem::directory_iterator(f.dir.path / "root"))
        inside.push_back(e.path().filename().string());
    std::sort(inside.begin(), inside.end());
    CHECK(top == std::vector<std::string>{"root"});
    CHECK(inside ==
          std::vector<std::string>{"LOCK", "index.db", "index.db-shm", "index.db-wal", "objects"});
    std::size_t files = 0;
    for (auto& e : std::filesystem::recursive_directory_iterator(f.dir.path / "root" / "objects")) {
        CHECK_FALSE(e.is_symlink());
        if (e.is_regular_file())
            ++files;
    }
    CHECK(files == keys.size() - 1);
    CHECK(std::filesystem::is_regular_file(f.dir.path / "root" / "objects" / "a"));
    CHECK(std::filesystem::is_regular_file(f.dir.path / "root" / "objects" / "a~" / "b"));
}

// Same token per lock: with different tokens, concurrent writes on one lock race and the
// lower one may legitimately be stale.
TEST_CASE("many concurrent puts on many locks all succeed") {
    fixture f;
    constexpr int n = 400;
    int done = 0, ok = 0;
    for (int i = 0; i < n; ++i) {
        auto req =
            put_req("dir" + std::to_string(i % 7) + "/key" + std::to_string(i),
                    "lock" + std::to_string(i % 50), 1000 + i % 50, std::string(1000 + i, 'x'));
        net::co_spawn(f.io, f.s->put(std::move(req)), [&](std::exception_ptr e, write_result r) {
            ++done;
            if (!e && r.error == errc::ok && r.version == 1 && r.created)
                ++ok;
        });
    }
    auto t0 = std::chrono::steady_clock::now();
    f.io.restart();
    f.io.run();
    auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    MESSAGE(n << " concurrent puts in " << secs << " s");
    CHECK(done == n);
    CHECK(ok == n);
    for (int l = 0; l < 50; ++l)
        CHECK(f.fence_of("lock" + std::to_string(l)).fence.token == 1000 + l);
    CHECK(f.get("dir3/key10").body == std::string(1010, 'x'));
}

// A body too large to be journaled: its batch syncs it with a syncfs before the commit.
const std::string large_body(detail::journaled_body_max + 1, 'L');

TEST_CASE("one batch: a stale write next to a fresh one on the same lock") {
    // Small bodies are journaled with their records, large ones synced before the commit:
    // the fence decides the same on both paths.
    for (const std::string& pad : {std::string(), large_body}) {
        CAPTURE(pad.size());
        fixture f;
        REQUIRE(f.advance("L", 2).error == errc::ok);
        REQUIRE(f.s->batches() != nullptr);
        const auto before = f.s->batches()->read();
        std::optional<write_result> fresh, stale;
        auto base = detail::enqueued_for_tests();
        detail::set_commit_hold_for_tests(true);
        // Both pass the pre-check (fence 2); the committer sees them in one batch, in order.
        net::co_spawn(f.io, f.s->put(put_req("k1", "L", 5, "fresh" + pad)),
                      [&](std::exception_ptr, write_result r) { fresh = r; });
        f.wait_enqueued(base + 1);
        net::co_spawn(f.io, f.s->put(put_req("k2", "L", 3, "stale" + pad)),
                      [&](std::exception_ptr, write_result r) { stale = r; });
        f.wait_enqueued(base + 2);
        detail::set_commit_hold_for_tests(false);
        f.io.restart();
        f.io.run();
        REQUIRE(fresh);
        REQUIRE(stale);
        CHECK(fresh->error == errc::ok);
        CHECK(stale->error == errc::stale_token);
        CHECK(stale->current_token == 5);
        CHECK(f.get("k1").body == "fresh" + pad);
        CHECK(f.get("k2").error == errc::not_found);
        CHECK_FALSE(std::filesystem::exists(f.dir.path / "root" / "objects" / "k2"));
        // The metrics saw one commit of two writes (the bucket "le 2", not cumulative).
        const auto after = f.s->batches()->read();
        CHECK(after.writes - before.writes == 2);
        for (std::size_t i = 0; i < after.buckets.size(); ++i)
            CHECK(after.buckets[i] - before.buckets[i] == (i == 1 ? 1U : 0U));
        // And after a restart (recovery replays both kinds of record).
        f.s.reset();
        f.s = open_ok(f.io, f.dir.path / "root");
        CHECK(f.get("k1").body == "fresh" + pad);
        CHECK(f.get("k2").error == errc::not_found);
        CHECK(f.put("k1", "L", 4, "zombie").error == errc::stale_token);
    }
}

TEST_CASE("the committer gathers puts still being staged, for at most its window") {
    struct reset_hooks {
        ~reset_hooks() {
            detail::set_stage_hold_for_tests("");
            detail::set_gather_window_for_tests(std::chrono::microseconds(0));
        }
    } reset;
    fixture f;
    SUBCASE("a put queued while another is on the pool waits for it: one batch") {
        const auto before = f.s->batches()->read();
        const auto base = detail::enqueued_for_tests();
        detail::set_gather_window_for_tests(std::chrono::seconds(60));
        detail::set_stage_hold_for_tests("y");
        std::optional<write_result> x, y;
        net::co_spawn(f.io, f.s->put(put_req("y", "Ly", 1, "why")),
                      [&](std::exception_ptr, write_result r) { y = r; });
        net::co_spawn(f.io, f.s->put(put_req("x", "Lx", 1, "ex")),
                      [&](std::exception_ptr, write_result r) { x = r; });
        f.wait_enqueued(base + 1); // x is queued, y is held on the pool
        // 300 ms: x alone would have been committed within a millisecond or so.
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
        f.poll_until([&] { return x.has_value() || std::chrono::steady_clock::now() > until; });
        CHECK_FALSE(x);
        detail::set_stage_hold_for_tests("");
        f.io.restart();
        f.io.run();
        REQUIRE(x);
        REQUIRE(y);
        CHECK(x->error == errc::ok);
        CHECK(y->error == errc::ok);
        CHECK(f.get("x").body == "ex");
        CHECK(f.get("y").body == "why");
        const auto after = f.s->batches()->read();
        CHECK(after.writes - before.writes == 2);
        for (std::size_t i = 0; i < after.buckets.size(); ++i)
            CHECK(after.buckets[i] - before.buckets[i] == (i == 1 ? 1U : 0U));
    }
    SUBCASE("the window bounds the wait: a put stuck on the pool does not hold others") {
        const auto before = f.s->batches()->read();
        detail::set_gather_window_for_tests(std::chrono::milliseconds(20));
        detail::set_stage_hold_for_tests("w");
        std::optional<write_result> v, w;
        net::co_spawn(f.io, f.s->put(put_req("w", "Lw", 1, "stuck")),
                      [&](std::exception_ptr, write_result r) { w = r; });
        net::co_spawn(f.io, f.s->put(put_req("v", "Lv", 1, "free")),
                      [&](std::exception_ptr, write_result r) { v = r; });
        f.poll_until([&] { return v.has_value(); });
        REQUIRE(v);
        CHECK(v->error == errc::ok);
        CHECK_FALSE(w);
        detail::set_stage_hold_for_tests("");
        f.io.restart();
        f.io.run();
        REQUIRE(w);
        CHECK(w->error == errc::ok);
        const auto after = f.s->batches()->read();
        CHECK(after.writes - before.writes == 2);
        CHECK(after.buckets[0] - before.buckets[0] == 2U); // two commits of one write
    }
}

TEST_CASE("a new key's body is written in place; a second write of it waits for the first") {
    for (const auto flush : {file_flush::syncfs, file_flush::fsync}) {
        CAPTURE(flush == file_flush::syncfs ? "syncfs" : "fsync");
        fixture f(flush);
        const auto objects = f.dir.path / "root" / "objects";
        const auto before = f.s->batches()->read();
        auto base = detail::enqueued_for_tests();
        std::optional<write_result> first, second;
        detail::set_commit_hold_for_tests(true);
        net::co_spawn(f.io, f.s->put(put_req("d/k", "L", 1, "first")),
                      [&](std::exception_ptr, write_result r) { first = r; });
        f.wait_enqueued(base + 1);
        // The first body sits at its final path, uncommitted; nothing else is there.
        std::vector<std::string> names;
        for (auto& e : std::filesystem::directory_iterator(objects / "d~"))
            names.push_back(e.path().filename().string());
        CHECK(names == std::vector<std::string>{"k"});
        std::optional<object_result> read;
        net::co_spawn(f.io, f.s->get("d/k", true),
                      [&](std::exception_ptr, object_result r) { read = std::move(r); });
        f.poll_until([&] { return read.has_value(); });
        REQUIRE(read);
        CHECK(read->error == errc::not_found); // uncommitted: not there for readers
        // A second write of the same key, while the first is undecided, stages a temp file
        // and is decided only after the first.
        net::co_spawn(f.io, f.s->put(put_req("d/k", "L", 2, "second")),
                      [&](std::exception_ptr, write_result r) { second = r; });
        f.wait_enqueued(base + 2);
        CHECK(std::distance(std::filesystem::directory_iterator(objects / "d~"),
                            std::filesystem::directory_iterator()) == 2);
        detail::set_commit_hold_for_tests(false);
        f.io.restart();
        f.io.run();
        REQUIRE(first);
        REQUIRE(second);
        CHECK(first->error == errc::ok);
        CHECK(first->created);
        CHECK(first->version == 1);
        CHECK(second->error == errc::ok);
        CHECK_FALSE(second->created);
        CHECK(second->version == 2);
        auto g = f.get("d/k");
        CHECK(g.body == "second");
        CHECK(g.version == 2);
        CHECK(f.body_file("d~/k") == "second");
        for (auto& e : std::filesystem::recursive_directory_iterator(objects))
            CHECK_MESSAGE(e.path().filename().string().find("~tmp~") == std::string::npos,
                          e.path());
        // Two commits of one write each: the second write was deferred, not batched.
        const auto after = f.s->batches()->read();
        CHECK(after.writes - before.writes == 2);
        CHECK(after.buckets[0] - before.buckets[0] == 2U);
        // The key's claim is gone: later writes, and a delete and re-create, go through.
        CHECK(f.put("d/k", "L", 3, "third").version == 3);
        CHECK(f.del("d/k", "L", 4).error == errc::ok);
        CHECK_FALSE(std::filesystem::exists(objects / "d~" / "k"));
        auto again = f.put("d/k", "L", 5, "fourth");
        CHECK(again.error == errc::ok);
        CHECK(again.created);
        CHECK(f.body_file("d~/k") == "fourth");
    }
}

TEST_CASE("concurrent writes of new keys: every body matches the version that wrote it") {
    // Several writes race for each new key: one gets its body written in place, the others
    // stage temp files, and the committer must never let one replace another's body
    // before it is decided. Each version's body is known, so a mix-up shows.
    fixture f;
    constexpr int keys = 200, writers = 6;
    std::map<std::pair<int, std::int64_t>, std::string> body_of; // (key, version) → body
    int done = 0;
    for (int k = 0; k < keys; ++k)
        for (int w = 0; w < writers; ++w) {
            std::string body = "key" + std::to_string(k) + "-writer" + std::to_string(w) +
                               std::string(static_cast<std::size_t>(w * 100), 'x');
            net::co_spawn(f.io, f.s->put(put_req("race/k" + std::to_string(k), "L", 1, body)),
                          [&, k, body](std::exception_ptr e, write_result r) {
                              ++done;
                              REQUIRE_FALSE(e);
                              REQUIRE(r.error == errc::ok);
                              CHECK(body_of.emplace(std::pair(k, r.version), body).second);
                          });
        }
    f.io.restart();
    f.io.run();
    REQUIRE(done == keys * writers);
    auto check_all = [&](fixture& fx) {
        for (int k = 0; k < keys; ++k) {
            auto g = fx.get("race/k" + std::to_string(k));
            REQUIRE(g.error == errc::ok);
            CHECK(g.version == writers);
            const std::string& expected = body_of[std::pair(k, g.version)];
            CHECK_MESSAGE(g.body == expected, "key " << k);
        }
        for (auto& e : std::filesystem::recursive_directory_iterator(fx.dir.path / "root"))
            CHECK_MESSAGE(e.path().filename().string().find("~tmp~") == std::string::npos,
                          e.path());
    };
    check_all(f);
    // A restart finds every body as its index row describes it.
    f.s.reset();
    f.s = open_ok(f.io, f.dir.path / "root");
    check_all(f);
}

TEST_CASE("a failed fsync puts the store in the failed state") {
    using detail::sync_kind;
    struct fault_case {
        file_flush flush;
        sync_kind kind;
        errc expected; // unavailable: nothing was written; outcome_unknown: may have been
        std::string v2;
    };
    const fault_case cases[] = {
        {file_flush::syncfs, sync_kind::staged, errc::unavailable, large_body},
        {file_flush::syncfs, sync_kind::index, errc::outcome_unknown, "v2"},
        {file_flush::syncfs, sync_kind::index, errc::outcome_unknown, large_body},
        {file_flush::fsync, sync_kind::body, errc::unavailable, "v2"},
        {file_flush::fsync, sync_kind::directory, errc::unavailable, "v2"}, // before commit
        {file_flush::fsync, sync_kind::index, errc::outcome_unknown, "v2"},
    };
    for (const auto& c : cases) {
        CAPTURE(c.flush == file_flush::syncfs ? "syncfs" : "fsync");
        CAPTURE(detail::to_string(c.kind));
        CAPTURE(c.v2.size());
        fixture f(c.flush);
        REQUIRE(f.put("k", "k", 1, "v1").error == errc::ok);
        const sync_kind kind = c.kind;
        detail::set_fsync_fault_for_tests([kind](sync_kind k) { return k == kind ? EIO : 0; });
        auto w = f.put("k", "k", 2, c.v2);
        detail::set_fsync_fault_for_tests(nullptr);
        CHECK(w.error == c.expected);

        CHECK_FALSE(f.s->ready());
        CHECK(f.put("k", "k", 3, "v3").error == errc::unavailable);
        CHECK(f.del("k", "k", 3).error == errc::unavailable);
        CHECK(f.advance("k", 3).error == errc::unavailable);
        CHECK(f.get("k").error == errc::unavailable);
        CHECK(f.fence_of("k").error == errc::unavailable);
        // A restart recovers: the first write is there, the uncertain one may or may not be.
        f.s.reset();
        f.s = open_ok(f.io, f.dir.path / "root", 4, c.flush);
        CHECK(f.s->ready());
        auto g = f.get("k");
        CHECK(g.error == errc::ok);
        if (c.expected == errc::unavailable)
            CHECK(g.body == "v1");
        else
            CHECK((g.body == "v1" || g.body == c.v2));
        CHECK(f.put("k", "k", 3, "v3").error == errc::ok);
    }
}

TEST_CASE("a failed background syncfs puts the store in the failed state; the write stays") {
    using detail::sync_kind;
    fixture f;
    std::atomic<int> flushes{0};
    std::atomic<bool> fail_flushes{false};
    detail::set_fsync_fault_for_tests([&](sync_kind k) {
        if (k != sync_kind::background)
            return 0;
        ++flushes;
        return fail_flushes.load() ? EIO : 0;
    });
    REQUIRE(f.put("k", "k", 1, "v1").error == errc::ok);
    f.poll_until([&] { return flushes.load() >= 1; }); // v1's flush, before the fault
    REQUIRE(flushes.load() >= 1);
    flushes = 0;
    fail_flushes = true;
    // Committed with its body in its redo row: acknowledged before the flusher runs.
    CHECK(f.put("k", "k", 2, "v2").error == errc::ok);
    f.poll_until([&] { return !f.s->ready(); });
    detail::set_fsync_fault_for_tests(nullptr);
    CHECK(flushes.load() >= 1);
    CHECK_FALSE(f.s->ready());
    CHECK(f.get("k").error == errc::unavailable);
    f.s.reset();
    f.s = open_ok(f.io, f.dir.path / "root");
    CHECK(f.get("k").body == "v2");
    CHECK(f.put("k", "k", 1, "zombie").error == errc::stale_token);
}

// The durability sequence of one write to an existing directory (docs/file-store.md,
// "Write sequence"): what file.flush changes, and that the index commit is synced last.
TEST_CASE("file.flush: the syncs of one write, in order") {
    using detail::sync_kind;
    std::mutex m;
    std::vector<sync_kind> seen;
    auto record = [&](sync_kind k) {
        std::lock_guard lock(m);
        seen.push_back(k);
        return 0; // and the real call goes ahead
    };
    // The flusher's syncfs runs on its own thread, at its own time.
    auto without_background = [&] {
        std::lock_guard lock(m);
        std::vector<sync_kind> out;
        for (auto k : seen)
            if (k != sync_kind::background)
                out.push_back(k);
        return out;
    };
    SUBCASE("syncfs, a large body: one syncfs before the index commit; no body or "
            "directory fsync") {
        fixture f(file_flush::syncfs);
        REQUIRE(f.put("k", "k", 1, "v1").error == errc::ok);
        detail::set_fsync_fault_for_tests(record);
        auto w = f.put("k", "k", 2, large_body);
        detail::set_fsync_fault_for_tests(nullptr);
        CHECK(w.error == errc::ok);
        CHECK(without_background() == std::vector{sync_kind::staged, sync_kind::index});
    }
    SUBCASE("syncfs, a small body: only the index commit is synced; a background syncfs "
            "follows") {
        fixture f(file_flush::syncfs);
        REQUIRE(f.put("k", "k", 1, "v1").error == errc::ok);
        detail::set_fsync_fault_for_tests(record);
        auto w = f.put("k", "k", 2, std::string(detail::journaled_body_max, 's'));
        CHECK(w.error == errc::ok);
        CHECK(without_background() == std::vector{sync_kind::index});
        // (The first put's flush may come in at any point.)
        auto background_after_commit = [&] {
            std::lock_guard lock(m);
            auto j = std::find(seen.begin(), seen.end(), sync_kind::index);
            return j != seen.end() && std::find(j, seen.end(), sync_kind::background) != seen.end();
        };
        f.poll_until(background_after_commit);
        detail::set_fsync_fault_for_tests(nullptr);
        CHECK(background_after_commit());
    }
    SUBCASE("syncfs, small and large bodies in one batch: one syncfs before the commit") {
        fixture f(file_flush::syncfs);
        const auto base = detail::enqueued_for_tests();
        detail::set_commit_hold_for_tests(true);
        std::vector<std::optional<write_result>> results(3);
        const std::string bodies[] = {"small", large_body, "tiny"};
        for (int i = 0; i < 3; ++i)
            net::co_spawn(f.io, f.s->put(put_req("k" + std::to_string(i), "k", 1, bodies[i])),
                          [&results, i](std::exception_ptr, write_result r) { results[i] = r; });
        f.wait_enqueued(base + 3);
        detail::set_fsync_fault_for_tests(record);
        detail::set_commit_hold_for_tests(false);
        f.io.restart();
        f.io.run();
        for (auto& r : results) {
            REQUIRE(r);
            CHECK(r->error == errc::ok);
        }
        REQUIRE(f.s->batches() != nullptr);
        detail::set_fsync_fault_for_tests(nullptr);
        CHECK(without_background() == std::vector{sync_kind::staged, sync_kind::index});
        for (int i = 0; i < 3; ++i)
            CHECK(f.get("k" + std::to_string(i)).body == bodies[i]);
    }
    SUBCASE("fsync: the body, its directory, the index commit, the directory again") {
        fixture f(file_flush::fsync);
        REQUIRE(f.put("k", "k", 1, "v1").error == errc::ok);
        detail::set_fsync_fault_for_tests(record);
        auto w = f.put("k", "k", 2, "v2");
        detail::set_fsync_fault_for_tests(nullptr);
        CHECK(w.error == errc::ok);
        CHECK(seen == std::vector{sync_kind::body, sync_kind::directory, sync_kind::index,
                                  sync_kind::directory});
    }
}

TEST_CASE("syncfs is used only where it reports write-back errors (Linux 5.8+)") {
    CHECK(detail::syncfs_reports_errors("6.1.0-27-amd64"));
    CHECK(detail::syncfs_reports_errors("5.8.0"));
    CHECK(detail::syncfs_reports_errors("5.10.0-32-cloud-amd64"));
    CHECK(detail::syncfs_reports_errors("10.0"));
    CHECK_FALSE(detail::syncfs_reports_errors("5.7.19"));
    CHECK_FALSE(detail::syncfs_reports_errors("4.19.0-26-amd64"));
    CHECK_FALSE(detail::syncfs_reports_errors("3.10.0-1160.el7.x86_64"));
    CHECK_FALSE(detail::syncfs_reports_errors(""));
    CHECK_FALSE(detail::syncfs_reports_errors("linux"));
}

TEST_CASE("stop(): later requests get unavailable") {
    fixture f;
    REQUIRE(f.put("k", "k", 1, "v1").error == errc::ok);
    f.s->stop();
    CHECK_FALSE(f.s->ready());
    CHECK(f.put("k", "k", 2, "v2").error == errc::unavailable);
    CHECK(f.get("k").error == errc::unavailable);
}

TEST_CASE("io_threads: as many puts are staged at once as the pool has threads") {
    struct reset_hooks {
        ~reset_hooks() { detail::set_stage_hold_for_tests(""); }
    } reset;
    for (const int threads : {1, 2}) {
        CAPTURE(threads);
        fixture f(file_flush::syncfs, threads);
        detail::set_stage_hold_for_tests("a");
        std::optional<write_result> a, b;
        net::co_spawn(f.io, f.s->put(put_req("a", "La", 1, "held")),
                      [&](std::exception_ptr, write_result r) { a = r; });
        net::co_spawn(f.io, f.s->put(put_req("b", "Lb", 1, "free")),
                      [&](std::exception_ptr, write_result r) { b = r; });
        if (threads == 2) {
            // The second thread stages b while a is held; the commit does not wait for a.
            f.poll_until([&] { return b.has_value(); });
            CHECK(b.has_value());
        } else {
            // The only thread is held by a: b waits (alone it would be done within a
            // millisecond or so).
            const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
            f.poll_until([&] { return b.has_value() || std::chrono::steady_clock::now() > until; });
            CHECK_FALSE(b.has_value());
        }
        CHECK_FALSE(a);
        detail::set_stage_hold_for_tests("");
        f.io.restart();
        f.io.run();
        REQUIRE(a);
        REQUIRE(b);
        CHECK(a->error == errc::ok);
        CHECK(b->error == errc::ok);
        CHECK(f.get("b").body == "free");
    }
}

TEST_CASE("file_io_threads: 2 with syncfs batches, 4 when every body is fsynced, else as set") {
    CHECK(fk::store::file_io_threads(0, true) == 2);
    CHECK(fk::store::file_io_threads(0, false) == 4);
    CHECK(fk::store::file_io_threads(1, true) == 1);
    CHECK(fk::store::file_io_threads(7, false) == 7);
}
