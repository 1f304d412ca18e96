#include "backends/file/file_store.hpp"

// Idempotency-Key records in the file store (docs/file-store.md, "Idempotency records";
// the promises in backends/store.hpp): replays, a reused key, refused writes, expiry,
// restarts, and two writes with one key in one batch. Through the store's API; the
// index is read with plain SQL where a test checks what was recorded.

#include "backends/file/detail/file_store_impl.hpp"
#include "backends/file/detail/index.hpp"
#include "file_store_test_util.hpp"

#include <doctest/doctest.h>
#include <sqlite3.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace fk::store;
using fk::errc;
namespace fence = fk::fence;
namespace net = boost::asio;
namespace detail = fk::store::detail;
using namespace fk::store::test;

namespace {

idempotency idem(std::string key, char fingerprint = 'a', std::string scope = "") {
    return {std::move(scope), std::move(key), std::string(32, fingerprint)};
}

// Moves the store's clock for one test, back to the real one at the end.
struct clock_offset {
    explicit clock_offset(std::chrono::milliseconds by) { detail::set_clock_offset_for_tests(by); }
    ~clock_offset() { detail::set_clock_offset_for_tests(std::chrono::milliseconds(0)); }
    clock_offset(const clock_offset&) = delete;
    clock_offset& operator=(const clock_offset&) = delete;
};

struct fixture {
    explicit fixture(std::chrono::seconds retention = std::chrono::seconds(86'400)) {
        opts.io_threads = 4;
        opts.idempotency_retention = retention;
        reopen();
    }

    temp_dir dir;
    file_store_options opts;
    net::io_context io;
    std::unique_ptr<store> s;

    std::filesystem::path root() const { return dir.path / "root"; }
    void reopen() {
        s.reset();
        auto r = open_file_store(io, root().string(), opts);
        if (auto* err = std::get_if<open_error>(&r))
            FAIL("open_file_store failed: " << err->message);
        s = std::move(std::get<std::unique_ptr<store>>(r));
    }

    write_result put(std::string key, std::string lock, token_t token, std::string body,
                     std::optional<idempotency> i = {}) {
        auto r = put_req(std::move(key), std::move(lock), token, std::move(body));
        r.idem = std::move(i);
        return run(io, s->put(std::move(r)));
    }
    write_result del(std::string key, std::string lock, token_t token,
                     std::optional<idempotency> i = {}) {
        auto r = del_req(std::move(key), std::move(lock), token);
        r.idem = std::move(i);
        return run(io, s->remove(std::move(r)));
    }
    write_result advance(std::string lock, token_t token, std::optional<idempotency> i = {}) {
        fence_request r;
        r.lock = std::move(lock);
        r.token = token;
        r.idem = std::move(i);
        return run(io, s->advance_fence(std::move(r)));
    }
    object_result get(std::string key) { return run(io, s->get(std::move(key), true)); }
    token_t fence_of(std::string lock) {
        return run(io, s->read_fence(std::move(lock))).fence.token;
    }

    // The number of idempotency records in the index (committed ones, read-only).
    int records(const std::string& where = "1") {
        sqlite3* db = nullptr;
        REQUIRE(sqlite3_open_v2((root() / detail::index_file).c_str(), &db, SQLITE_OPEN_READONLY,
                                nullptr) == SQLITE_OK);
        sqlite3_stmt* st = nullptr;
        const std::string sql = "SELECT count(*) FROM idempotency WHERE " + where;
        REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK);
        REQUIRE(sqlite3_step(st) == SQLITE_ROW);
        const int n = sqlite3_column_int(st, 0);
        sqlite3_finalize(st);
        sqlite3_close(db);
        return n;
    }
    // Files under objects/ (bodies and temp files).
    std::size_t files() {
        std::size_t n = 0;
        for (auto& e : std::filesystem::recursive_directory_iterator(root() / "objects"))
            n += e.is_regular_file() ? 1 : 0;
        return n;
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

void check_replay_of(const write_result& replay, const write_result& first) {
    CHECK(replay.error == errc::ok);
    CHECK(replay.replayed);
    CHECK(replay.created == first.created);
    CHECK(replay.version == first.version);
    CHECK(replay.token == first.token);
}

} // namespace

TEST_CASE("idempotency: a retry is answered from the record, nothing applied again") {
    fixture f;
    const auto first = f.put("k", "L", 5, "v1", idem("p1"));
    REQUIRE(first.error == errc::ok);
    CHECK_FALSE(first.replayed);
    CHECK(first.created);
    CHECK(first.version == 1);
    CHECK(f.records() == 1);

    // Answered on the pool from the committed record: the committer never sees it.
    const auto before = detail::enqueued_for_tests();
    const auto again = f.put("k", "L", 5, "v1", idem("p1"));
    check_replay_of(again, first);
    CHECK(detail::enqueued_for_tests() == before);
    auto g = f.get("k");
    CHECK(g.version == 1);
    CHECK(g.body == "v1");

    // Deletes and fence advances too.
    const auto d = f.del("k", "L", 6, idem("d1"));
    REQUIRE(d.error == errc::ok);
    CHECK(d.token == 6);
    REQUIRE(f.put("k", "L", 6, "v2").error == errc::ok); // the key is back
    const auto d2 = f.del("k", "L", 6, idem("d1"));
    CHECK(d2.error == errc::ok);
    CHECK(d2.replayed);
    CHECK(d2.token == 6);
    CHECK(f.get("k").body == "v2"); // the replayed delete deleted nothing

    const auto a = f.advance("F", 3, idem("f1"));
    REQUIRE(a.error == errc::ok);
    CHECK_FALSE(a.replayed);
    const auto a2 = f.advance("F", 3, idem("f1"));
    CHECK(a2.replayed);
    CHECK(a2.token == 3);
    CHECK(f.records() == 3);

    // The scope is part of the identity: another caller's key of the same name is new.
    const auto other = f.put("k", "L", 7, "v3", idem("p1", 'a', "alice"));
    CHECK(other.error == errc::ok);
    CHECK_FALSE(other.replayed);
    CHECK(other.version == 3);
    // No staged body was left by any replay.
    CHECK(f.files() == 1);
}

TEST_CASE("idempotency: a replay wins even after the fence moved on") {
    fixture f;
    const auto first = f.put("k", "L", 5, "v1", idem("p1"));
    REQUIRE(first.error == errc::ok);
    const auto fa = f.advance("G", 4, idem("g1"));
    REQUIRE(fa.error == errc::ok);
    const auto fd = f.del("gone", "G", 4, idem("g2"));
    REQUIRE(fd.error == errc::ok);
    // The fences move past the recorded tokens; the cache knows it (it learns committed
    // fences), so without the record these would be refused as stale on the I/O thread.
    REQUIRE(f.advance("L", 10).error == errc::ok);
    REQUIRE(f.advance("G", 10).error == errc::ok);
    CHECK(f.put("k", "L", 5, "v1").error == errc::stale_token);

    check_replay_of(f.put("k", "L", 5, "v1", idem("p1")), first);
    check_replay_of(f.advance("G", 4, idem("g1")), fa);
    check_replay_of(f.del("gone", "G", 4, idem("g2")), fd);
    // Nothing moved.
    CHECK(f.fence_of("L") == 10);
    CHECK(f.fence_of("G") == 10);
    CHECK(f.get("k").version == 1);
    CHECK(f.get("k").token == 5);
    // A new key with the same stale token is still refused.
    CHECK(f.put("k", "L", 5, "v1", idem("p2")).error == errc::stale_token);
}

TEST_CASE("idempotency: the same key with another fingerprint is refused, nothing applied") {
    fixture f;
    REQUIRE(f.put("k", "L", 5, "v1", idem("p1", 'a')).error == errc::ok);
    const auto reused = f.put("k", "L", 9, "other body", idem("p1", 'b'));
    CHECK(reused.error == errc::idempotency_key_reused);
    CHECK_FALSE(reused.replayed);
    CHECK(f.fence_of("L") == 5);
    CHECK(f.get("k").version == 1);
    CHECK(f.get("k").body == "v1");
    CHECK(f.del("k", "L", 9, idem("p1", 'c')).error == errc::idempotency_key_reused);
    CHECK(f.advance("L", 9, idem("p1", 'd')).error == errc::idempotency_key_reused);
    CHECK(f.get("k").body == "v1");
    CHECK(f.fence_of("L") == 5);
    CHECK(f.files() == 1);
    CHECK(f.records() == 1);
}

TEST_CASE("idempotency: a refused write records nothing; its retry is evaluated afresh") {
    fixture f;
    REQUIRE(f.put("k", "A", 5, "v1").error == errc::ok);
    // lock_mismatch (decided by the committer: the cache does not know the key is A's).
    CHECK(f.put("k", "B", 1, "x", idem("m")).error == errc::lock_mismatch);
    // stale_token, decided by the cache (after the record lookup found nothing).
    CHECK(f.put("k", "A", 4, "x", idem("s")).error == errc::stale_token);
    // precondition_failed
    {
        auto r = put_req("k", "A", 5, "x");
        r.pre.if_match = 7;
        r.idem = idem("c");
        CHECK(run(f.io, f.s->put(std::move(r))).error == errc::precondition_failed);
    }
    // stale, decided by the committer (a fresh start: the cache knows no fence).
    f.reopen();
    CHECK(f.advance("A", 3, idem("s2")).error == errc::stale_token);
    CHECK(f.records() == 0);
    CHECK(f.files() == 1);

    // The mismatch's cause goes away: the same request now applies (not a replay).
    REQUIRE(f.del("k", "A", 5).error == errc::ok);
    const auto retry = f.put("k", "B", 1, "x", idem("m"));
    CHECK(retry.error == errc::ok);
    CHECK_FALSE(retry.replayed);
    CHECK(retry.version == 2);
    CHECK(f.records() == 1);
}

TEST_CASE("idempotency: two writes with one key in one batch apply once") {
    fixture f;
    REQUIRE(f.put("k", "L", 1, "v1").error == errc::ok); // both write temp files
    const auto base = detail::enqueued_for_tests();
    std::optional<write_result> a, b, c, moved, d;
    detail::set_commit_hold_for_tests(true);
    auto put_keyed = [&](char fp, token_t token, std::optional<write_result>& out) {
        auto r = put_req("k", "L", token, "v2");
        r.idem = idem("same", fp);
        net::co_spawn(f.io, f.s->put(std::move(r)),
                      [&out](std::exception_ptr, write_result w) { out = w; });
    };
    // Each passes the pool's lookup (nothing committed yet) and queues; the committer
    // takes them as one batch, in this order.
    put_keyed('a', 2, a);
    f.wait_enqueued(base + 1);
    put_keyed('a', 2, b);
    f.wait_enqueued(base + 2);
    put_keyed('z', 3, c);
    f.wait_enqueued(base + 3);
    {
        fence_request r;
        r.lock = "L";
        r.token = 8;
        net::co_spawn(f.io, f.s->advance_fence(std::move(r)),
                      [&](std::exception_ptr, write_result w) { moved = w; });
    }
    f.wait_enqueued(base + 4);
    put_keyed('a', 2, d); // after the fence moved, in the same batch: still a replay
    f.wait_enqueued(base + 5);
    detail::set_commit_hold_for_tests(false);
    f.io.restart();
    f.io.run();
    REQUIRE(a);
    REQUIRE(b);
    REQUIRE(c);
    REQUIRE(moved);
    REQUIRE(d);
    CHECK(a->error == errc::ok);
    CHECK_FALSE(a->replayed);
    CHECK(a->version == 2);
    check_replay_of(*b, *a);
    CHECK(c->error == errc::idempotency_key_reused);
    CHECK(moved->error == errc::ok);
    check_replay_of(*d, *a);
    CHECK(f.get("k").version == 2);
    CHECK(f.fence_of("L") == 8);
    CHECK(f.records() == 1);
    CHECK(f.files() == 1); // the answered writes' temp files are gone
}

TEST_CASE("idempotency: a new key's second keyed write replays; its staged body goes") {
    fixture f;
    const auto base = detail::enqueued_for_tests();
    std::optional<write_result> a, b;
    detail::set_commit_hold_for_tests(true);
    for (auto* out : {&a, &b}) {
        auto r = put_req("d/new", "L", 1, "body");
        r.idem = idem("n");
        net::co_spawn(f.io, f.s->put(std::move(r)),
                      [out](std::exception_ptr, write_result w) { *out = w; });
    }
    // The first writes its body in place, the second a temp file; the second waits for
    // the first's batch (deferred), then finds its record.
    f.wait_enqueued(base + 2);
    detail::set_commit_hold_for_tests(false);
    f.io.restart();
    f.io.run();
    REQUIRE(a);
    REQUIRE(b);
    const write_result& applied = a->replayed ? *b : *a;
    const write_result& replay = a->replayed ? *a : *b;
    CHECK(applied.error == errc::ok);
    CHECK_FALSE(applied.replayed);
    check_replay_of(replay, applied);
    CHECK(f.get("d/new").version == 1);
    CHECK(f.files() == 1);
}

TEST_CASE("idempotency: records survive a restart") {
    fixture f;
    const auto p = f.put("k", "L", 5, "v1", idem("p1"));
    const auto a = f.advance("F", 2, idem("f1"));
    REQUIRE(p.error == errc::ok);
    REQUIRE(a.error == errc::ok);
    f.reopen();
    check_replay_of(f.put("k", "L", 5, "v1", idem("p1")), p);
    check_replay_of(f.advance("F", 2, idem("f1")), a);
    CHECK(f.put("k", "L", 5, "v1", idem("p1", 'x')).error == errc::idempotency_key_reused);
    CHECK(f.get("k").version == 1);
}

TEST_CASE("idempotency: a record older than the retention is absent, then deleted") {
    fixture f(std::chrono::seconds(1));
    const auto first = f.put("k", "L", 5, "v1", idem("p1"));
    REQUIRE(first.error == errc::ok);
    REQUIRE(f.put("other", "O", 1, "x", idem("o1")).error == errc::ok);
    check_replay_of(f.put("k", "L", 5, "v1", idem("p1")), first);
    {
        // One retention later (the store's clock moved, not the test's wait).
        clock_offset later(std::chrono::milliseconds(1000));
        const auto fresh = f.put("k", "L", 5, "v1", idem("p1"));
        CHECK(fresh.error == errc::ok);
        CHECK_FALSE(fresh.replayed);
        CHECK(fresh.version == 2);
        // That write recorded anew (over the expired row): a retry replays it.
        check_replay_of(f.put("k", "L", 5, "v1", idem("p1")), fresh);
        // A reused key past its retention is a new request too.
        CHECK(f.put("other", "O", 1, "y", idem("o1", 'b')).error == errc::ok);
    }
    {
        // Everything expired: the committer deletes the records in the background.
        clock_offset much_later(std::chrono::milliseconds(5000));
        for (int i = 0; i < 500 && f.records() != 0; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        CHECK(f.records() == 0);
    }
    CHECK(f.get("k").version == 2);
}

TEST_CASE("idempotency: the records per scope, as the bound counts them") {
    fixture f(std::chrono::seconds(60));
    REQUIRE(f.put("k1", "L", 1, "v", idem("key-1", 'a', "alpha")).error == errc::ok);
    REQUIRE(f.put("k2", "L", 1, "v", idem("key-22", 'a', "alpha")).error == errc::ok);
    REQUIRE(f.advance("M", 3, idem("f", 'a', "beta")).error == errc::ok);
    REQUIRE(f.put("k3", "L", 1, "v").error == errc::ok); // no key: no record

    auto u = run(f.io, f.s->idempotency_usage());
    REQUIRE(u.error == errc::ok);
    REQUIRE(u.scopes.size() == 2);
    CHECK(u.scopes[0].scope == "alpha");
    CHECK(u.scopes[0].records == 2);
    CHECK(u.scopes[0].bytes == idem_record_bytes(5, 5, 0) + idem_record_bytes(5, 6, 0));
    CHECK(u.scopes[0].oldest_ms > 0);
    CHECK(u.scopes[1].scope == "beta");
    CHECK(u.scopes[1].records == 1);

    CHECK(run(f.io, f.s->has_idempotency_record("alpha", "key-1")).found);
    CHECK_FALSE(run(f.io, f.s->has_idempotency_record("beta", "key-1")).found);
    CHECK_FALSE(run(f.io, f.s->has_idempotency_record("alpha", "nope")).found);
    {
        // Expired records count as absent, also here.
        clock_offset later(std::chrono::milliseconds(61'000));
        auto gone = run(f.io, f.s->idempotency_usage());
        REQUIRE(gone.error == errc::ok);
        CHECK(gone.scopes.empty());
        CHECK_FALSE(run(f.io, f.s->has_idempotency_record("alpha", "key-1")).found);
    }
}
