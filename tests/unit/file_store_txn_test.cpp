#include "backends/file/file_store.hpp"

// Transactions in the file store (docs/file-store.md, "Transactions"; the contract in
// backends/store.hpp and backends/txn.hpp): all or nothing, the first failing op named,
// every op kind, floors, batches that mix a transaction with single writes, Idempotency-Key
// records with their results text, restarts, kill -9 at each failpoint of a transaction's
// commit, and an index made before the records' results column.

#include "backends/file/detail/file_store_impl.hpp"
#include "file_store_test_util.hpp"

#include <boost/asio/co_spawn.hpp>

#include <doctest/doctest.h>
#include <sqlite3.h>

#include <csignal>
#include <optional>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace fk::store;
using fk::errc;
namespace net = boost::asio;
namespace detail = fk::store::detail;
using namespace fk::store::test;

namespace {

txn_op put_op(std::string key, std::string lock, token_t token, std::string body,
              fk::fence::preconditions pre = {}) {
    txn_op op;
    op.op = txn_op::kind::put;
    op.key = std::move(key);
    op.lock = std::move(lock);
    op.token = token;
    op.body = std::move(body);
    op.content_type = "text/plain";
    op.pre = pre;
    return op;
}

txn_op del_op(std::string key, std::string lock, token_t token, fk::fence::preconditions pre = {}) {
    txn_op op;
    op.op = txn_op::kind::remove;
    op.key = std::move(key);
    op.lock = std::move(lock);
    op.token = token;
    op.pre = pre;
    return op;
}

txn_op lock_op(txn_op::kind k, std::string lock, token_t token) {
    txn_op op;
    op.op = k;
    op.lock = std::move(lock);
    op.token = token;
    return op;
}
txn_op fence_op(std::string lock, token_t token) {
    return lock_op(txn_op::kind::fence, std::move(lock), token);
}
txn_op check_op(std::string lock, token_t token) {
    return lock_op(txn_op::kind::check, std::move(lock), token);
}

// check_version: `version` set → the key must have it; nullopt → absent.
txn_op version_op(std::string key, std::optional<std::int64_t> version) {
    txn_op op;
    op.op = txn_op::kind::check_version;
    op.key = std::move(key);
    op.version = version;
    return op;
}

fk::fence::preconditions if_match(std::int64_t v) {
    fk::fence::preconditions p;
    p.if_match = v;
    return p;
}
fk::fence::preconditions if_none_match() {
    fk::fence::preconditions p;
    p.if_none_match_any = true;
    return p;
}

idempotency idem(std::string key, char fingerprint = 'a') {
    return {"", std::move(key), std::string(32, fingerprint)};
}

// Bodies above journaled_body_max take the temp file + syncfs path; small ones go into
// their redo rows. Both are staged as temp files in a transaction.
const std::string large_body(detail::journaled_body_max + 100, 'L');

struct fixture {
    explicit fixture(fk::config::file_flush flush = fk::config::file_flush::syncfs)
        : flush_(flush) {
        reopen();
    }

    temp_dir dir;
    net::io_context io;
    std::unique_ptr<store> s;
    fk::config::file_flush flush_;

    fs::path root() const { return dir.path / "root"; }
    void reopen() {
        s.reset();
        s = open_ok(io, root(), 4, flush_);
    }

    txn_result txn(std::vector<txn_op> ops, std::optional<idempotency> i = {}) {
        return run(io, s->transact({std::move(ops), std::move(i)}));
    }
    write_result put(std::string key, std::string lock, token_t token, std::string body = "v") {
        return run(io, s->put(put_req(std::move(key), std::move(lock), token, std::move(body))));
    }
    write_result del(std::string key, std::string lock, token_t token) {
        return run(io, s->remove(del_req(std::move(key), std::move(lock), token)));
    }
    object_result get(std::string key) { return run(io, s->get(std::move(key), true)); }
    std::optional<token_t> fence(std::string lock) {
        auto r = run(io, s->read_fence(std::move(lock)));
        if (r.error == errc::not_found)
            return std::nullopt;
        REQUIRE(r.error == errc::ok);
        return r.fence.token;
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
    // Files under objects/ that only a write in flight (or a leak) leaves: temp files.
    int temp_files() {
        int n = 0;
        for (auto& e : fs::recursive_directory_iterator(root() / "objects"))
            if (e.path().filename().string().find("~tmp~") != std::string::npos)
                ++n;
        return n;
    }
};

// The state the tests compare before and after a refused transaction.
struct snapshot {
    std::vector<std::pair<std::string, object_result>> keys;
    std::vector<std::pair<std::string, std::optional<token_t>>> fences;

    static snapshot of(fixture& f, const std::vector<std::string>& keys,
                       const std::vector<std::string>& locks) {
        snapshot out;
        for (auto& k : keys)
            out.keys.emplace_back(k, f.get(k));
        for (auto& l : locks)
            out.fences.emplace_back(l, f.fence(l));
        return out;
    }
    void check_same(const snapshot& o) const {
        REQUIRE(keys.size() == o.keys.size());
        for (std::size_t i = 0; i < keys.size(); ++i) {
            CAPTURE(keys[i].first);
            CHECK(keys[i].second.error == o.keys[i].second.error);
            CHECK(keys[i].second.body == o.keys[i].second.body);
            CHECK(keys[i].second.version == o.keys[i].second.version);
            CHECK(keys[i].second.token == o.keys[i].second.token);
        }
        REQUIRE(fences.size() == o.fences.size());
        for (std::size_t i = 0; i < fences.size(); ++i) {
            CAPTURE(fences[i].first);
            CHECK(fences[i].second == o.fences[i].second);
        }
    }
};

} // namespace

TEST_CASE("txn: every op applies, in one step, with the results text") {
    fixture f;
    REQUIRE(f.put("a", "A", 5, "old-a").error == errc::ok);
    REQUIRE(f.put("gone", "G", 2, "x").error == errc::ok);
    REQUIRE(f.put("kept", "K", 1, "k").error == errc::ok);
    auto r = f.txn({
        put_op("a", "A", 7, "new-a", if_match(1)),
        put_op("b/c", "A", 7, large_body),
        del_op("gone", "G", 2),
        fence_op("F", 9),
        check_op("K", 1),
        version_op("kept", 1),
        version_op("never", std::nullopt),
        del_op("missing", "M", 4),
        check_op("unfenced", 1),
    });
    REQUIRE(r.error == errc::ok);
    CHECK_FALSE(r.replayed);
    CHECK_FALSE(r.op_index);
    CHECK(r.results_json == R"([{"op":"put","key":"a","lock":"A","token":7,"version":2,)"
                            R"("created":false},)"
                            R"({"op":"put","key":"b/c","lock":"A","token":7,"version":1,)"
                            R"("created":true},)"
                            R"({"op":"delete","key":"gone","lock":"G","token":2,"version":1},)"
                            R"({"op":"fence","lock":"F","token":9},)"
                            R"({"op":"check","lock":"K","token":1},)"
                            R"({"op":"check_version","key":"kept","version":1},)"
                            R"({"op":"check_version","key":"never","version":0},)"
                            R"({"op":"delete","key":"missing","lock":"M","token":4,"version":0},)"
                            R"({"op":"check","lock":"unfenced","token":0}])");
    auto a = f.get("a");
    CHECK(a.body == "new-a");
    CHECK(a.version == 2);
    CHECK(a.token == 7);
    CHECK(f.get("b/c").body == large_body);
    CHECK(f.get("gone").error == errc::not_found);
    CHECK(f.fence("A") == 7); // two ops on A: advanced once
    CHECK(f.fence("F") == 9);
    CHECK(f.fence("M") == 4);         // deleting a missing key still advances its fence
    CHECK_FALSE(f.fence("unfenced")); // a check writes nothing
    CHECK(f.temp_files() == 0);
    // The committed fences reach the fence cache: an old token is refused.
    CHECK(f.put("a", "A", 6, "zombie").error == errc::stale_token);
}

TEST_CASE("txn: a stale op in the middle changes nothing and is named") {
    for (auto flush : {fk::config::file_flush::syncfs, fk::config::file_flush::fsync}) {
        CAPTURE(static_cast<int>(flush));
        fixture f(flush);
        REQUIRE(f.put("a", "A", 5, "old-a").error == errc::ok);
        REQUIRE(f.put("b", "B", 5, "old-b").error == errc::ok);
        REQUIRE(f.put("big", "B", 5, large_body).error == errc::ok);
        REQUIRE(run(f.io, f.s->advance_fence({"C", 10, std::nullopt})).error == errc::ok);
        const std::vector<std::string> keys{"a", "b", "big", "new", "new-big"};
        const std::vector<std::string> locks{"A", "B", "C", "D"};
        const auto before = snapshot::of(f, keys, locks);
        auto r = f.txn({
            put_op("a", "A", 6, "new-a"),
            put_op("new", "D", 3, "n"),
            put_op("new-big", "D", 3, large_body),
            del_op("b", "B", 8),
            fence_op("C", 9), // stale: C is at 10
            put_op("big", "B", 8, "small now"),
        });
        CHECK(r.error == errc::stale_token);
        CHECK(r.op_index == std::optional<std::size_t>(4));
        CHECK(r.current_token == 10);
        CHECK_FALSE(r.floor);
        CHECK(r.results_json.empty());
        snapshot::of(f, keys, locks).check_same(before);
        CHECK(f.temp_files() == 0);
        // The fences the refused transaction would have raised are not cached or kept: a
        // write at the old fences still applies.
        CHECK(f.put("a", "A", 5, "a-again").version == 2);
        CHECK(f.put("new", "D", 1, "d").version == 1);
        f.reopen(); // and nothing of it appears after a restart
        CHECK(f.get("new-big").error == errc::not_found);
        CHECK(f.fence("B") == 5);
        CHECK(f.fence("D") == 1);
    }
}

TEST_CASE("txn: lock_mismatch, preconditions and the first failing op decides") {
    fixture f;
    REQUIRE(f.put("a", "A", 5, "a").error == errc::ok);
    REQUIRE(f.put("b", "B", 5, "b").error == errc::ok);
    const auto before = snapshot::of(f, {"a", "b", "n"}, {"A", "B", "X"});

    auto mismatch = f.txn({put_op("n", "X", 1, "n"), put_op("a", "X", 1, "a2")});
    CHECK(mismatch.error == errc::lock_mismatch);
    CHECK(mismatch.op_index == std::optional<std::size_t>(1));
    CHECK(mismatch.lock == "A");

    auto wrong_version = f.txn({put_op("b", "B", 6, "b2"), put_op("a", "A", 6, "x", if_match(7))});
    CHECK(wrong_version.error == errc::precondition_failed);
    CHECK(wrong_version.op_index == std::optional<std::size_t>(1));

    auto exists = f.txn({put_op("a", "A", 6, "x", if_none_match())});
    CHECK(exists.error == errc::precondition_failed);
    CHECK(exists.op_index == std::optional<std::size_t>(0));

    auto del_version = f.txn({fence_op("X", 3), del_op("b", "B", 6, if_match(2))});
    CHECK(del_version.error == errc::precondition_failed);
    CHECK(del_version.op_index == std::optional<std::size_t>(1));

    // Several ops would fail: the first in op order is named (here a stale one before a
    // lock mismatch, and a lock mismatch before a stale token).
    auto first = f.txn({put_op("b", "B", 4, "b3"), put_op("a", "X", 9, "a3")});
    CHECK(first.error == errc::stale_token);
    CHECK(first.op_index == std::optional<std::size_t>(0));
    CHECK(first.current_token == 5);
    auto first2 = f.txn({put_op("a", "X", 9, "a3"), put_op("b", "B", 4, "b3")});
    CHECK(first2.error == errc::lock_mismatch);
    CHECK(first2.op_index == std::optional<std::size_t>(0));

    snapshot::of(f, {"a", "b", "n"}, {"A", "B", "X"}).check_same(before);
    CHECK(f.temp_files() == 0);
}

TEST_CASE("txn: check guards the effective fence and writes nothing") {
    fixture f;
    REQUIRE(run(f.io, f.s->advance_fence({"L", 10, std::nullopt})).error == errc::ok);
    auto stale = f.txn({put_op("k", "K", 1, "k"), check_op("L", 9)});
    CHECK(stale.error == errc::stale_token);
    CHECK(stale.op_index == std::optional<std::size_t>(1));
    CHECK(stale.current_token == 10);
    CHECK(f.get("k").error == errc::not_found);

    auto ok = f.txn({check_op("L", 12), put_op("k", "K", 1, "k")});
    REQUIRE(ok.error == errc::ok);
    CHECK(ok.results_json.find(R"({"op":"check","lock":"L","token":10})") != std::string::npos);
    CHECK(f.fence("L") == 10); // a check above the fence does not advance it
    CHECK(f.get("k").body == "k");
}

TEST_CASE("txn: check_version compares the version, or asks for an absent key") {
    fixture f;
    REQUIRE(f.put("k", "K", 1, "v1").error == errc::ok);
    REQUIRE(f.put("k", "K", 1, "v2").error == errc::ok); // version 2
    REQUIRE(f.put("d", "D", 1, "d").error == errc::ok);
    REQUIRE(f.del("d", "D", 1).error == errc::ok); // a tombstone at version 1

    CHECK(f.txn({version_op("k", 2)}).error == errc::ok);
    CHECK(f.txn({version_op("never", std::nullopt)}).error == errc::ok);
    CHECK(f.txn({version_op("d", std::nullopt)}).error == errc::ok); // deleted = absent

    auto old = f.txn({put_op("x", "X", 1, "x"), version_op("k", 1)});
    CHECK(old.error == errc::precondition_failed);
    CHECK(old.op_index == std::optional<std::size_t>(1));
    auto present = f.txn({version_op("k", std::nullopt)});
    CHECK(present.error == errc::precondition_failed);
    CHECK(present.op_index == std::optional<std::size_t>(0));
    // A deleted key has no version to match, not even the one it kept.
    CHECK(f.txn({version_op("d", 1)}).error == errc::precondition_failed);
    CHECK(f.txn({version_op("never", 1)}).error == errc::precondition_failed);
    CHECK(f.get("x").error == errc::not_found);

    // A guard on one key, a write to another: a compare-and-swap across keys.
    auto cas = f.txn({version_op("k", 2), put_op("k-index", "K", 1, "points at k v2")});
    REQUIRE(cas.error == errc::ok);
    CHECK(cas.results_json.find(R"({"op":"check_version","key":"k","version":2})") !=
          std::string::npos);
}

TEST_CASE("txn: ops are decided against fence floors") {
    fixture f;
    REQUIRE(f.put("jobs/a", "jobs/a", 5, "a").error == errc::ok);
    REQUIRE(run(f.io, f.s->raise_floor({"jobs/", 100, std::nullopt})).error == errc::ok);
    const auto before = snapshot::of(f, {"jobs/a", "free"}, {"jobs/a", "jobs/b", "free"});
    for (auto op : {put_op("jobs/a", "jobs/a", 50, "x"), del_op("jobs/a", "jobs/a", 50),
                    fence_op("jobs/b", 99), check_op("jobs/b", 1)}) {
        auto r = f.txn({put_op("free", "free", 1, "f"), op});
        CHECK(r.error == errc::stale_token);
        CHECK(r.op_index == std::optional<std::size_t>(1));
        CHECK(r.current_token == 100);
        CHECK(r.floor == std::optional<std::string>("jobs/"));
    }
    snapshot::of(f, {"jobs/a", "free"}, {"jobs/a", "jobs/b", "free"}).check_same(before);
    auto at = f.txn({check_op("jobs/b", 100), put_op("jobs/a", "jobs/a", 100, "at the floor")});
    REQUIRE(at.error == errc::ok);
    CHECK(at.results_json.find(R"({"op":"check","lock":"jobs/b","token":100})") !=
          std::string::npos);
    CHECK(f.get("jobs/a").body == "at the floor");
    CHECK(f.fence("jobs/a") == 100);
}

TEST_CASE("txn: operations and malformed ops are refused before anything") {
    fixture f;
    txn_op opn;
    opn.op = txn_op::kind::operation;
    opn.name = "ledger_insert";
    opn.lock = "L";
    opn.token = 1;
    const auto before = detail::enqueued_for_tests();
    auto r = f.txn({put_op("k", "K", 1, "k"), opn});
    CHECK(r.error == errc::invalid_request);
    CHECK(r.op_index == std::optional<std::size_t>(1));
    CHECK(r.message.find("Postgres store only") != std::string::npos);
    auto twice = f.txn({put_op("k", "K", 1, "k"), del_op("k", "K", 1)});
    CHECK(twice.error == errc::invalid_request);
    CHECK(twice.op_index == std::optional<std::size_t>(1));
    CHECK(f.txn({}).error == errc::invalid_request);
    auto bad_key = f.txn({put_op("", "K", 1, "k")});
    CHECK(bad_key.error == errc::invalid_request);
    CHECK(bad_key.op_index == std::optional<std::size_t>(0));
    CHECK(detail::enqueued_for_tests() == before); // nothing reached the committer
    CHECK(f.get("k").error == errc::not_found);
    CHECK(f.temp_files() == 0);
}

// One batch (the committer held): single writes before and after a transaction that
// fails, and one that commits. The singles commit whatever the transaction does; a
// refused transaction's fence advances are not seen by the items after it; a committed
// one's are.
TEST_CASE("txn: in one batch with single writes") {
    fixture f;
    REQUIRE(f.put("a", "A", 5, "a").error == errc::ok);
    // b and s1 have bodies, so the single puts of them below use temp files: a new key's in-place
    // body would defer the transaction that names it to the next batch (see the racing test).
    REQUIRE(f.put("b", "B", 1, "b").error == errc::ok);
    REQUIRE(f.put("s1", "S", 1, "s0").error == errc::ok);
    REQUIRE(run(f.io, f.s->advance_fence({"C", 10, std::nullopt})).error == errc::ok);
    const auto base = detail::enqueued_for_tests();
    std::vector<std::optional<write_result>> singles(5);
    std::vector<std::optional<txn_result>> txns(2);
    auto keep = [&singles](std::size_t i) {
        return [&singles, i](std::exception_ptr, write_result r) { singles[i] = std::move(r); };
    };
    auto keep_txn = [&txns](std::size_t i) {
        return [&txns, i](std::exception_ptr, txn_result r) { txns[i] = std::move(r); };
    };
    detail::set_commit_hold_for_tests(true);
    std::uint64_t n = base;
    net::co_spawn(f.io, f.s->put(put_req("s1", "S", 1, "s1")), keep(0));
    f.wait_enqueued(++n);
    // Refused at its last op, after raising A to 8 and writing a and s1 in the batch.
    net::co_spawn(f.io,
                  f.s->transact({{put_op("a", "A", 8, "txn-a"), put_op("s1", "S", 1, "txn-s1"),
                                  fence_op("C", 9)},
                                 std::nullopt}),
                  keep_txn(0));
    f.wait_enqueued(++n);
    // A's fence is still 5 for it: accepted.
    net::co_spawn(f.io, f.s->put(put_req("a", "A", 6, "after-refused")), keep(1));
    f.wait_enqueued(++n);
    // Commits, raising B to 20 and C to 10 (already there).
    net::co_spawn(f.io,
                  f.s->transact({{put_op("b", "B", 20, "txn-b"), check_op("C", 10),
                                  version_op("a", 2), put_op("big", "B", 20, large_body)},
                                 std::nullopt}),
                  keep_txn(1));
    f.wait_enqueued(++n);
    // Below the fence the committed transaction set in this batch: refused.
    net::co_spawn(f.io, f.s->put(put_req("b", "B", 19, "zombie")), keep(2));
    f.wait_enqueued(++n);
    net::co_spawn(f.io, f.s->put(put_req("b2", "B", 19, "zombie")), keep(3)); // a new key
    f.wait_enqueued(++n);
    net::co_spawn(f.io, f.s->put(put_req("b", "B", 20, "after-txn")), keep(4));
    f.wait_enqueued(++n);
    auto batches = [&f] {
        std::uint64_t count = 0;
        for (auto b : f.s->batches()->read().buckets)
            count += b;
        return count;
    };
    const auto batches_before = batches();
    detail::set_commit_hold_for_tests(false);
    f.io.restart();
    f.io.run();
    for (auto& r : singles)
        REQUIRE(r);
    for (auto& r : txns)
        REQUIRE(r);
    CHECK(batches() == batches_before + 1); // one batch, one COMMIT
    CHECK(singles[0]->error == errc::ok);
    CHECK(txns[0]->error == errc::stale_token);
    CHECK(txns[0]->op_index == std::optional<std::size_t>(2));
    CHECK(txns[0]->current_token == 10);
    CHECK(singles[1]->error == errc::ok);
    CHECK(singles[1]->version == 2);
    REQUIRE(txns[1]->error == errc::ok);
    CHECK(singles[2]->error == errc::stale_token);
    CHECK(singles[2]->current_token == 20);
    CHECK(singles[3]->error == errc::stale_token);
    CHECK(singles[4]->error == errc::ok);
    CHECK(singles[4]->version == 3);
    CHECK(f.get("s1").body == "s1");
    CHECK(f.get("a").body == "after-refused");
    CHECK(f.get("b").body == "after-txn");
    CHECK(f.get("big").body == large_body);
    CHECK(f.get("b2").error == errc::not_found);
    CHECK(f.fence("A") == 6);
    CHECK(f.fence("B") == 20);
    CHECK(f.fence("C") == 10);
    CHECK(f.temp_files() == 0);
}

TEST_CASE("txn: Idempotency-Key records the results text, replays it, and refuses reuse") {
    fixture f;
    REQUIRE(f.put("a", "A", 1, "a").error == errc::ok);
    auto ops = [] {
        return std::vector<txn_op>{put_op("a", "A", 2, "txn"), fence_op("F", 3),
                                   put_op("big", "A", 2, large_body)};
    };
    auto first = f.txn(ops(), idem("t-1"));
    REQUIRE(first.error == errc::ok);
    CHECK_FALSE(first.replayed);
    // The retry is answered from the record, even after the fence has moved on.
    REQUIRE(f.put("a", "A", 9, "later").error == errc::ok);
    auto again = f.txn(ops(), idem("t-1"));
    CHECK(again.error == errc::ok);
    CHECK(again.replayed);
    CHECK(again.results_json == first.results_json);
    CHECK(f.get("a").version == 3); // not applied again
    CHECK(f.temp_files() == 0);     // the replay's bodies were never staged
    // Another request under the key: a transaction, or a single write.
    CHECK(f.txn(ops(), idem("t-1", 'b')).error == errc::idempotency_key_reused);
    auto single = put_req("a", "A", 9, "single");
    single.idem = idem("t-1");
    CHECK(run(f.io, f.s->put(single)).error == errc::idempotency_key_reused);
    // A single write's record refuses a transaction under its key.
    single.idem = idem("w-1", 'w');
    REQUIRE(run(f.io, f.s->put(single)).error == errc::ok);
    CHECK(f.txn(ops(), idem("w-1", 'w')).error == errc::idempotency_key_reused);
    CHECK(f.get("a").body == "single");

    // A refused transaction records nothing: its retry is decided afresh.
    auto stale = f.txn({put_op("c", "C", 1, "c"), fence_op("F", 1)}, idem("t-2"));
    CHECK(stale.error == errc::stale_token);
    REQUIRE(run(f.io, f.s->advance_fence({"F", 1, std::nullopt})).error == errc::stale_token);
    auto fixed = f.txn({put_op("c", "C", 1, "c"), fence_op("F", 3)}, idem("t-2"));
    CHECK(fixed.error == errc::ok);
    CHECK_FALSE(fixed.replayed);

    // The record survives a restart with its text.
    f.reopen();
    auto after = f.txn(ops(), idem("t-1"));
    CHECK(after.replayed);
    CHECK(after.results_json == first.results_json);
}

// Two transactions with one Idempotency-Key in one batch: the second is answered from the
// record the first inserted in the batch's transaction, and nothing applies twice.
TEST_CASE("txn: one Idempotency-Key twice in a batch applies once") {
    fixture f;
    const auto base = detail::enqueued_for_tests();
    std::vector<std::optional<txn_result>> out(2);
    detail::set_commit_hold_for_tests(true);
    for (std::size_t i = 0; i < out.size(); ++i) {
        net::co_spawn(f.io,
                      f.s->transact({{put_op("k", "K", 1, "k"), fence_op("F", 2)}, idem("dup")}),
                      [&out, i](std::exception_ptr, txn_result r) { out[i] = std::move(r); });
        f.wait_enqueued(base + i + 1);
    }
    detail::set_commit_hold_for_tests(false);
    f.io.restart();
    f.io.run();
    REQUIRE(out[0]);
    REQUIRE(out[1]);
    CHECK(out[0]->error == errc::ok);
    CHECK_FALSE(out[0]->replayed);
    CHECK(out[1]->error == errc::ok);
    CHECK(out[1]->replayed);
    CHECK(out[1]->results_json == out[0]->results_json);
    CHECK(f.get("k").version == 1);
    CHECK(f.temp_files() == 0);
}

TEST_CASE("txn: a committed transaction survives a restart") {
    for (auto flush : {fk::config::file_flush::syncfs, fk::config::file_flush::fsync}) {
        CAPTURE(static_cast<int>(flush));
        fixture f(flush);
        REQUIRE(f.put("old", "O", 1, "old").error == errc::ok);
        REQUIRE(f.put("rep", "O", 1, "first").error == errc::ok);
        REQUIRE(f.txn({put_op("new", "N", 4, "n"), put_op("rep", "O", 2, large_body),
                       del_op("old", "O", 2), fence_op("F", 7)})
                    .error == errc::ok);
        f.reopen();
        CHECK(f.get("new").body == "n");
        auto rep = f.get("rep");
        CHECK(rep.body == large_body);
        CHECK(rep.version == 2);
        CHECK(f.get("old").error == errc::not_found);
        CHECK(f.fence("N") == 4);
        CHECK(f.fence("O") == 2);
        CHECK(f.fence("F") == 7);
        CHECK(f.put("new", "N", 3, "zombie").error == errc::stale_token);
    }
}

// Single puts that write new keys in place race transactions that write the same keys
// with temp files: a transaction waits (deferred) while a key of it has an undecided
// in-place body, so no rename ever replaces another write's file. Every key ends with the
// body of the write that got its last version.
TEST_CASE("txn: racing single puts on new keys") {
    fixture f;
    constexpr int keys = 60;
    std::vector<std::optional<write_result>> singles(keys);
    std::vector<std::optional<txn_result>> txns(keys / 2);
    for (int i = 0; i < keys; ++i)
        net::co_spawn(f.io, f.s->put(put_req("k" + std::to_string(i), "L", 1, "single")),
                      [&singles, i](std::exception_ptr, write_result r) { singles[i] = r; });
    for (int i = 0; i < keys / 2; ++i) {
        const std::string a = "k" + std::to_string(2 * i), b = "k" + std::to_string(2 * i + 1);
        net::co_spawn(f.io,
                      f.s->transact({{put_op(a, "L", 1, "txn-" + a), put_op(b, "L", 1, "txn-" + b)},
                                     std::nullopt}),
                      [&txns, i](std::exception_ptr, txn_result r) { txns[i] = r; });
    }
    f.io.restart();
    f.io.run();
    for (int i = 0; i < keys; ++i) {
        CAPTURE(i);
        REQUIRE(singles[i]);
        REQUIRE(txns[i / 2]);
        REQUIRE(singles[i]->error == errc::ok);
        REQUIRE(txns[i / 2]->error == errc::ok);
        const std::string key = "k" + std::to_string(i);
        auto g = f.get(key);
        CHECK(g.version == 2);
        CHECK(g.body == (singles[i]->version == 2 ? std::string("single") : "txn-" + key));
    }
    CHECK(f.temp_files() == 0);
}

// An index made before transactions (format 3 without idempotency.results) gets the
// column at open; its single write records keep answering, and transactions record.
TEST_CASE("txn: an index without the results column gets it at open") {
    fixture f;
    auto keyed = put_req("k", "K", 1, "k");
    keyed.idem = idem("before", 'p');
    REQUIRE(run(f.io, f.s->put(keyed)).error == errc::ok);
    f.s.reset();
    auto columns = [&] {
        sqlite3* db = nullptr;
        REQUIRE(sqlite3_open((f.root() / detail::index_file).c_str(), &db) == SQLITE_OK);
        sqlite3_stmt* st = nullptr;
        REQUIRE(sqlite3_prepare_v2(db, "SELECT name FROM pragma_table_info('idempotency')", -1, &st,
                                   nullptr) == SQLITE_OK);
        std::vector<std::string> names;
        while (sqlite3_step(st) == SQLITE_ROW)
            names.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)));
        sqlite3_finalize(st);
        sqlite3_close(db);
        return names;
    };
    REQUIRE(columns().back() == "results");
    {
        sqlite3* db = nullptr;
        REQUIRE(sqlite3_open((f.root() / detail::index_file).c_str(), &db) == SQLITE_OK);
        char* msg = nullptr;
        const int rc =
            sqlite3_exec(db, "ALTER TABLE idempotency DROP COLUMN results", nullptr, nullptr, &msg);
        INFO((msg ? msg : ""));
        sqlite3_free(msg);
        sqlite3_close(db);
        REQUIRE(rc == SQLITE_OK);
    }
    REQUIRE(columns().back() == "committed_ms");
    f.reopen();
    CHECK(columns().back() == "results");
    CHECK(run(f.io, f.s->put(keyed)).replayed); // the old record still answers
    auto t = f.txn({put_op("k", "K", 2, "t")}, idem("after"));
    REQUIRE(t.error == errc::ok);
    f.reopen();
    CHECK(columns().back() == "results"); // added once
    auto replay = f.txn({put_op("k", "K", 2, "t")}, idem("after"));
    CHECK(replay.replayed);
    CHECK(replay.results_json == t.results_json);
}

namespace {

// Runs `body` in a forked child, which is expected to die of SIGKILL at the failpoint it
// arms (3: it returned, 4: it threw; both failures). Returns the wait status.
template <typename Body> int status_of_child(Body body) {
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        try {
            body();
        } catch (...) {
            ::_exit(4);
        }
        ::_exit(3);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    return status;
}

} // namespace

// kill -9 at each failpoint a transaction passes: after the restart it has applied wholly
// (killed after its COMMIT) or not at all (killed before), and its retry with the same
// Idempotency-Key is replayed or applied accordingly.
TEST_CASE("txn: kill -9 at each failpoint leaves all or nothing") {
    REQUIRE_MESSAGE(detail::failpoints_compiled(),
                    "built without -DFK_FAILPOINTS=ON (scripts/test.sh turns it on)");
    struct point {
        const char* name;
        bool committed;
    };
    const point points[] = {
        {"before_body_fsync", false},   {"after_body_fsync", false},  {"txn_decided", false},
        {"before_index_commit", false}, {"after_index_commit", true}, {"after_rename", true},
        {"before_reply", true},
    };
    auto ops = [] {
        return std::vector<txn_op>{put_op("a", "A", 5, "txn-a"), put_op("new", "N", 2, "txn-new"),
                                   put_op("big", "A", 5, large_body), del_op("gone", "G", 3),
                                   fence_op("F", 9)};
    };
    for (auto flush : {fk::config::file_flush::syncfs, fk::config::file_flush::fsync}) {
        for (const auto& p : points) {
            CAPTURE(p.name);
            CAPTURE(static_cast<int>(flush));
            temp_dir dir;
            const fs::path root = dir.path / "root";
            {
                net::io_context io;
                auto s = open_ok(io, root, 4, flush);
                REQUIRE(run(io, s->put(put_req("a", "A", 1, "old-a"))).error == errc::ok);
                REQUIRE(run(io, s->put(put_req("big", "A", 1, "old-big"))).error == errc::ok);
                REQUIRE(run(io, s->put(put_req("gone", "G", 1, "g"))).error == errc::ok);
            }
            const int status = status_of_child([&] {
                net::io_context io;
                auto r = open_file_store(io, root.string(), file_store_options{4, flush});
                if (!std::holds_alternative<std::unique_ptr<store>>(r))
                    throw std::runtime_error("open failed");
                auto s = std::move(std::get<std::unique_ptr<store>>(r));
                detail::set_failpoint_for_tests(p.name);
                run(io, s->transact({ops(), idem("crash")}));
            });
            INFO("child exit status " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1));
            REQUIRE(WIFSIGNALED(status));
            CHECK(WTERMSIG(status) == SIGKILL);

            net::io_context io;
            auto s = open_ok(io, root, 4, flush);
            auto a = run(io, s->get("a", true));
            auto fence_f = run(io, s->read_fence("F"));
            if (p.committed) {
                CHECK(a.body == "txn-a");
                CHECK(a.version == 2);
                CHECK(run(io, s->get("new", true)).body == "txn-new");
                CHECK(run(io, s->get("big", true)).body == large_body);
                CHECK(run(io, s->get("gone", true)).error == errc::not_found);
                CHECK(fence_f.fence.token == 9);
            } else {
                CHECK(a.body == "old-a");
                CHECK(a.version == 1);
                CHECK(run(io, s->get("new", true)).error == errc::not_found);
                CHECK(run(io, s->get("big", true)).body == "old-big");
                CHECK(run(io, s->get("gone", true)).body == "g");
                CHECK(fence_f.error == errc::not_found);
                CHECK(run(io, s->read_fence("A")).fence.token == 1);
            }
            auto retry = run(io, s->transact({ops(), idem("crash")}));
            CHECK(retry.error == errc::ok);
            CHECK(retry.replayed == p.committed);
            CHECK(run(io, s->get("a", true)).version == 2);
            CHECK(run(io, s->get("big", true)).body == large_body);
            auto* impl = dynamic_cast<detail::file_store*>(s.get());
            REQUIRE(impl != nullptr);
            impl->wait_for_sweep();
        }
    }
}

// A transaction that names a key whose in-place body (a single put of a new key) is
// staged and undecided waits for the next batch as a whole, like a single write of that
// key would: none of its parts is decided before that body is.
// Runs the io_context until `done` or 10 s: a test of a deadlock must end either way.
template <class Done> void run_until(net::io_context& io, Done done) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done() && std::chrono::steady_clock::now() < until) {
        io.restart();
        io.poll();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

TEST_CASE("txn: new keys' bodies are written in place; a single put of one waits for it") {
    fixture f;
    const auto base = detail::enqueued_for_tests();
    std::optional<write_result> single;
    std::optional<txn_result> txn;
    detail::set_commit_hold_for_tests(true);
    net::co_spawn(f.io,
                  f.s->transact({{put_op("other", "O", 1, "o"), put_op("fresh", "L", 2, "txn"),
                                  put_op("big", "O", 1, large_body)},
                                 std::nullopt}),
                  [&txn](std::exception_ptr, txn_result r) { txn = std::move(r); });
    f.wait_enqueued(base + 1);
    // Staged at their final paths, not decided yet: no temp file.
    CHECK(f.temp_files() == 0);
    CHECK(fs::exists(f.root() / "objects" / "fresh"));
    // The key is claimed: this put stages a temp file and waits for the transaction's batch.
    net::co_spawn(f.io, f.s->put(put_req("fresh", "L", 2, "single")),
                  [&single](std::exception_ptr, write_result r) { single = std::move(r); });
    f.wait_enqueued(base + 2);
    CHECK(f.temp_files() == 1);
    detail::set_commit_hold_for_tests(false);
    run_until(f.io, [&] { return single && txn; });
    REQUIRE(single);
    REQUIRE(txn);
    REQUIRE(txn->error == errc::ok);
    CHECK(single->error == errc::ok);
    CHECK(single->version == 2);
    CHECK(f.get("fresh").body == "single");
    CHECK(f.get("other").body == "o");
    CHECK(f.get("big").body == large_body);
    CHECK(f.temp_files() == 0);
    // And they are where a restart finds them.
    f.reopen();
    CHECK(f.get("other").body == "o");
    CHECK(f.get("big").body == large_body);
}

TEST_CASE("txn: deferred as a whole behind an in-place body, its own moved aside") {
    fixture f;
    const auto base = detail::enqueued_for_tests();
    std::optional<write_result> single;
    std::optional<txn_result> txn;
    detail::set_commit_hold_for_tests(true);
    net::co_spawn(f.io, f.s->put(put_req("fresh", "L", 1, "single")),
                  [&single](std::exception_ptr, write_result r) { single = std::move(r); });
    f.wait_enqueued(base + 1);
    // "other" is written in place, "fresh" (claimed by the single put) to a temp file.
    net::co_spawn(f.io,
                  f.s->transact({{put_op("other", "O", 1, "o"), put_op("fresh", "L", 2, "txn")},
                                 std::nullopt}),
                  [&txn](std::exception_ptr, txn_result r) { txn = std::move(r); });
    f.wait_enqueued(base + 2);
    CHECK(f.temp_files() == 1);
    detail::set_commit_hold_for_tests(false);
    run_until(f.io, [&] { return single && txn; });
    REQUIRE(single);
    REQUIRE(txn);
    // The single put (queued first) was decided first; the transaction then overwrote it.
    CHECK(single->error == errc::ok);
    CHECK(single->version == 1);
    REQUIRE(txn->error == errc::ok);
    CHECK(f.get("fresh").body == "txn");
    CHECK(f.get("fresh").version == 2);
    CHECK(f.get("other").body == "o");
    CHECK(f.temp_files() == 0);
}

// Each writes a new key in place that the other deletes. Were a waiting transaction to keep
// its claims, each would wait for the other's in-place body forever.
TEST_CASE("txn: two transactions with in-place bodies of each other's keys both finish") {
    fixture f;
    const auto base = detail::enqueued_for_tests();
    std::optional<txn_result> t1, t2;
    detail::set_commit_hold_for_tests(true);
    net::co_spawn(f.io,
                  f.s->transact({{put_op("a", "L", 1, "t1"), del_op("b", "L", 1)}, std::nullopt}),
                  [&t1](std::exception_ptr, txn_result r) { t1 = std::move(r); });
    f.wait_enqueued(base + 1);
    net::co_spawn(f.io,
                  f.s->transact({{put_op("b", "L", 1, "t2"), del_op("a", "L", 1)}, std::nullopt}),
                  [&t2](std::exception_ptr, txn_result r) { t2 = std::move(r); });
    f.wait_enqueued(base + 2);
    CHECK(f.temp_files() == 0); // both in place
    detail::set_commit_hold_for_tests(false);
    run_until(f.io, [&] { return t1 && t2; });
    REQUIRE(t1);
    REQUIRE(t2);
    REQUIRE(t1->error == errc::ok);
    REQUIRE(t2->error == errc::ok);
    // t1 waited for t2's body of b: t2 committed first (a absent: version 0), then t1.
    CHECK(t2->results_json ==
          R"([{"op":"put","key":"b","lock":"L","token":1,"version":1,"created":true},)"
          R"({"op":"delete","key":"a","lock":"L","token":1,"version":0}])");
    CHECK(f.get("a").body == "t1");
    CHECK(f.get("b").error == errc::not_found);
    CHECK(f.temp_files() == 0);
}
