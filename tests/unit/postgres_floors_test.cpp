// Fence floors in the Postgres store, against a real Postgres (FK_TEST_PG_URL; each test
// case skips without it, and fails without it under FK_REQUIRE_SERVICES=1, as
// scripts/test.sh sets). Every case works in a schema of its own, dropped at the end.
// What is checked: the floor refuses every write path below it (single-row statements,
// the group-commit batch, fence advances, named operations; keyed and unkeyed), with the
// effective fence and the floor's prefix; raises, their limit and their
// Idempotency-Key; read_fence and list_floors; the SQL rule against fence::floor_set;
// the upgrade of a schema-2 database; and the ordering the SHARE lock promises against
// writes in flight, in both directions.
#include "backends/postgres/postgres_store.hpp"
#include "backends/postgres/result.hpp"
#include "backends/postgres/sql.hpp"
#include "fence/floors.hpp"
#include "postgres_live.hpp"
#include "store_requests.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include <doctest/doctest.h>
#include <libpq-fe.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace fk::store;
using namespace std::chrono_literals;
using fk::errc;

namespace net = boost::asio;
namespace sql = fk::store::pg::sql;
namespace pg = fk::store::pg;

using fk_test_store::del_req;

namespace {

// The URL and the plain libpq session of tests/unit/postgres_live.hpp.
using fk_test_pg::pg_url;
using fk_test_pg::session;

using options = fk_test_pg::options;

// The shared live store (postgres_live.hpp), with the two operations these tests call.
class pg_store : public fk_test_pg::pg_store {
public:
    pg_store(const std::string& url, const std::string& schema, options o = {})
        : fk_test_pg::pg_store(url, schema, with_operations(std::move(o))) {}

private:
    static options with_operations(options o) {
        o.operations["touch"] = fk::config::operation{"SELECT 1 AS one", false};
        o.operations["slow"] = fk::config::operation{"SELECT 1 AS one FROM pg_sleep(0.6)", false};
        return o;
    }
};

// A schema of its own, dropped at the end.
struct fixture : fk_test_pg::fixture {
    explicit fixture(std::string u) : fk_test_pg::fixture(std::move(u), "floors") {}
};

put_request put_req(std::string key, token_t token, std::optional<idempotency> idem = {}) {
    put_request r;
    r.lock = key;
    r.key = std::move(key);
    r.token = token;
    r.body = "b";
    r.content_type = "text/plain";
    r.idem = std::move(idem);
    return r;
}

fence_request fence_req(std::string lock, token_t token, std::optional<idempotency> idem = {}) {
    return fence_request{std::move(lock), token, std::move(idem)};
}

floor_request floor_req(std::string prefix, token_t token, std::optional<idempotency> idem = {}) {
    return floor_request{std::move(prefix), token, std::move(idem)};
}

operation_request op_req(std::string name, std::string lock, token_t token,
                         std::optional<idempotency> idem = {}) {
    operation_request r;
    r.name = std::move(name);
    r.lock = std::move(lock);
    r.token = token;
    r.idem = std::move(idem);
    return r;
}

idempotency key(std::string k, char fp = 'a') {
    return idempotency{"", std::move(k), std::string(32, fp)};
}

int key_counter = 0;
std::optional<idempotency> fresh_key() {
    return key("k" + std::to_string(++key_counter));
}

void check_stale(const write_result& r, token_t current, std::optional<std::string> floor) {
    INFO(r.message);
    CHECK(r.error == errc::stale_token);
    CHECK(r.current_token == current);
    CHECK(r.floor == floor);
}

void check_stale(const operation_result& r, token_t current, std::optional<std::string> floor) {
    INFO(r.message);
    CHECK(r.error == errc::stale_token);
    CHECK(r.current_token == current);
    CHECK(r.floor == floor);
}

// Every write path against one lock with `token`: expected stale with `current` and
// `floor`, or accepted (current 0). Keyed writes go through the batch statement, unkeyed
// lone ones through the single-row statements.
void every_path(pg_store& st, const std::string& lock, token_t token, token_t current,
                std::optional<std::string> floor) {
    for (bool keyed : {false, true}) {
        CAPTURE(keyed);
        CAPTURE(lock);
        auto idem = [&] { return keyed ? fresh_key() : std::nullopt; };
        auto check = [&](const auto& r) {
            if (current == 0)
                CHECK(r.error == errc::ok);
            else
                check_stale(r, current, floor);
        };
        check(st.run(st->put(put_req(lock, token, idem()))));
        delete_request d = del_req(lock, token);
        d.idem = idem();
        check(st.run(st->remove(d)));
        check(st.run(st->advance_fence(fence_req(lock, token, idem()))));
        check(st.run(st->run_operation(op_req("touch", lock, token, idem()))));
    }
}

} // namespace

TEST_CASE("schema 3 adds the floors table and the floor-checking fence step") {
    CHECK(sql::schema_version >= 3);
    const auto m = sql::migration_script("fk");
    const auto v3 = m.find("IF v < 3 THEN");
    REQUIRE(v3 != std::string::npos);
    CHECK(m.find("CREATE TABLE \"fk\".floors (", v3) != std::string::npos);
    CHECK(m.find("prefix text COLLATE \"C\" PRIMARY KEY", v3) != std::string::npos);
    CHECK(m.find("CREATE OR REPLACE FUNCTION \"fk\".fk_fence_step", v3) != std::string::npos);
    CHECK(m.find("INSERT INTO \"fk\".schema_version (version) VALUES (3)") != std::string::npos);
    CHECK(m.find("IF v > " + std::to_string(sql::schema_version) + " THEN") != std::string::npos);
    // Every write statement checks the floor in its fence step and names it.
    for (const auto& s :
         {sql::put_sql("fk"), sql::delete_sql("fk"), sql::advance_sql("fk"),
          sql::advance_idem_sql("fk"), sql::write_batch_sql("fk", sql::batch_shape::plain),
          sql::write_batch_sql("fk", sql::batch_shape::keyed)}) {
        CHECK(s.find("FROM \"fk\".floors fl") != std::string::npos);
        CHECK(s.find("starts_with(") != std::string::npos);
        CHECK(s.find(" AS floor") != std::string::npos);
    }
}

TEST_CASE("map_read_fence: the floor sets the fence when it is above the own one") {
    auto table = [](std::vector<std::optional<std::string>> row) {
        pg::exec_outcome o;
        pg::result_table t;
        t.st = pg::result_table::status::tuples_ok;
        for (const char* c : {"token", "updated_ms", "floor", "floor_token", "floor_updated_ms"})
            t.columns.push_back({c, 0});
        t.rows.push_back(std::move(row));
        o.results.push_back(std::move(t));
        return o;
    };
    const std::optional<std::string> null;
    auto own = pg::map_read_fence(table({"5", "100", null, null, null}), "L");
    CHECK(own.fence.token == 5);
    CHECK_FALSE(own.fence.floor);
    auto fl = pg::map_read_fence(table({"5", "100", "", "9", "200"}), "L");
    CHECK(fl.fence.token == 9);
    CHECK(fl.fence.updated_at_ms == 200);
    CHECK(fl.fence.floor == std::optional<std::string>(""));
    auto tie = pg::map_read_fence(table({"9", "100", "p", "9", "200"}), "L");
    CHECK(tie.fence.updated_at_ms == 100);
    CHECK_FALSE(tie.fence.floor);
    auto only = pg::map_read_fence(table({null, null, "p", "3", "200"}), "L");
    CHECK(only.error == errc::ok);
    CHECK(only.fence.floor == std::optional<std::string>("p"));
    CHECK(pg::map_read_fence(table({null, null, null, null, null}), "L").error == errc::not_found);
}

TEST_CASE("map_raise_floor: 504 once the COMMIT may have left, a server error is definite") {
    const auto req = floor_req("p", 5);
    // COMMIT runs at its Execute: a pipeline that failed before its Sync left may still
    // have committed.
    pg::exec_outcome unsent;
    unsent.t = pg::exec_outcome::transport::failed_unsent;
    CHECK(pg::map_raise_floor(unsent, req).result.error == errc::outcome_unknown);
    pg::exec_outcome lost;
    lost.t = pg::exec_outcome::transport::failed_after_send;
    CHECK(pg::map_raise_floor(lost, req).result.error == errc::outcome_unknown);
    lost.t = pg::exec_outcome::transport::timeout_after_send;
    CHECK(pg::map_raise_floor(lost, req).result.error == errc::outcome_unknown);
    // A server error rolled it back, whatever happened to the connection afterwards.
    pg::result_table err;
    err.st = pg::result_table::status::error;
    err.sqlstate = "57014"; // statement_timeout while waiting for the lock
    lost.results = {err};
    CHECK(pg::map_raise_floor(lost, req).result.error == errc::unavailable);
    err.sqlstate = "FKR01";
    lost.results = {err};
    CHECK(pg::map_raise_floor(lost, req).retry);

    // The COMMIT's result arrived, then the backend was terminated (its FATAL comes against
    // the Sync): the floor was raised.
    pg::result_table ok;
    ok.st = pg::result_table::status::command_ok;
    pg::result_table row;
    row.st = pg::result_table::status::tuples_ok;
    for (auto n : {"applied", "floor_token", "raced", "rec_same", "rec_token", "floor_count"})
        row.columns.push_back({n, 25});
    row.rows.push_back({"5", std::nullopt, "f", std::nullopt, std::nullopt, "1"});
    err.sqlstate = "57P01";
    lost.t = pg::exec_outcome::transport::failed_after_send;
    lost.results = {ok, ok, ok, row, ok, err};
    const auto m = pg::map_raise_floor(lost, req);
    CHECK(m.result.error == errc::ok);
    CHECK(m.result.token == 5);
    // The same FATAL against the COMMIT itself: unknown.
    lost.results = {ok, ok, ok, row, err};
    CHECK(pg::map_raise_floor(lost, req).result.error == errc::outcome_unknown);
}

TEST_CASE("postgres floors: raise, refuse equal and lower, list bytewise, read_fence") {
    auto url = pg_url();
    if (!url)
        return;
    fixture fx(*url);
    pg_store st(*url, fx.schema);

    auto r = st.run(st->raise_floor(floor_req("jobs/", 10)));
    CHECK(r.error == errc::ok);
    CHECK(r.token == 10);
    auto eq = st.run(st->raise_floor(floor_req("jobs/", 10)));
    CHECK(eq.error == errc::stale_token);
    CHECK(eq.current_token == 10);
    auto lower = st.run(st->raise_floor(floor_req("jobs/", 3)));
    CHECK(lower.error == errc::stale_token);
    CHECK(lower.current_token == 10);
    CHECK(st.run(st->raise_floor(floor_req("jobs/", 12))).token == 12);

    for (const char* p : {"b", "a", "ab", "B", "\xc3\xa9", ""})
        CHECK(st.run(st->raise_floor(floor_req(p, 1))).error == errc::ok);
    auto l = st.run(st->list_floors());
    REQUIRE(l.error == errc::ok);
    std::vector<std::string> order;
    for (const auto& f : l.floors)
        order.push_back(f.prefix);
    CHECK(order == std::vector<std::string>{"", "B", "a", "ab", "b", "jobs/", "\xc3\xa9"});
    const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    for (const auto& f : l.floors)
        CHECK(std::abs(f.updated_at_ms - now_ms) < 60'000);
    CHECK(l.floors[5].token == 12);

    // read_fence: the effective fence, 200 with only a floor.
    auto only = st.run(st->read_fence("jobs/7"));
    CHECK(only.error == errc::ok);
    CHECK(only.fence.token == 12);
    CHECK(only.fence.floor == std::optional<std::string>("jobs/"));
    CHECK(only.fence.updated_at_ms == l.floors[5].updated_at_ms);
    CHECK(st.run(st->advance_fence(fence_req("jobs/8", 20))).error == errc::ok);
    auto own = st.run(st->read_fence("jobs/8"));
    CHECK(own.fence.token == 20);
    CHECK_FALSE(own.fence.floor);
    // The "" floor covers every lock.
    auto any = st.run(st->read_fence("zzz"));
    CHECK(any.error == errc::ok);
    CHECK(any.fence.floor == std::optional<std::string>(""));
    // list_fences lists own fences only.
    auto fences = st.run(st->list_fences(list_request{"", std::nullopt, 100}));
    REQUIRE(fences.fences.size() == 1);
    CHECK(fences.fences[0].lock == "jobs/8");
}

TEST_CASE("postgres floors: every write path below a floor is refused, at or above it applies") {
    auto url = pg_url();
    if (!url)
        return;
    for (std::size_t batch_max : {std::size_t(64), std::size_t(1)}) {
        CAPTURE(batch_max);
        fixture fx(*url);
        options o;
        o.batch_max = batch_max;
        pg_store st(*url, fx.schema, o);
        // Own fences before the floor: one below it, one above it.
        CHECK(st.run(st->advance_fence(fence_req("jobs/low", 5))).error == errc::ok);
        CHECK(st.run(st->advance_fence(fence_req("jobs/high", 20))).error == errc::ok);
        CHECK(st.run(st->raise_floor(floor_req("jobs/", 10))).error == errc::ok);

        every_path(st, "jobs/never", 9, 10, "jobs/");      // never fenced
        every_path(st, "jobs/low", 7, 10, "jobs/");        // fenced below the floor
        every_path(st, "jobs/high", 15, 20, std::nullopt); // own fence above: not the floor
        every_path(st, "jobs/never", 10, 0, std::nullopt); // at the floor: applies
        every_path(st, "jobs/low", 11, 0, std::nullopt);   // above it
        every_path(st, "jobs/", 10, 0, std::nullopt);      // the prefix itself is a lock under it
        every_path(st, "other", 1, 0, std::nullopt);       // not under the prefix
        every_path(st, "jobs", 1, 0, std::nullopt);

        // An accepted write set the own fence (own = max(own, token)); now equal to the
        // floor, the floor is no longer named.
        auto f = st.run(st->read_fence("jobs/never"));
        CHECK(f.fence.token == 10);
        CHECK_FALSE(f.fence.floor);
        every_path(st, "jobs/never", 9, 10, std::nullopt);
        CHECK(st.run(st->read_fence("jobs/low")).fence.token == 11);

        // Data below the floor was not written.
        CHECK(fx.admin.exec("SELECT count(*) FROM " + fx.table("resources") +
                            " WHERE token < 10 AND key LIKE 'jobs/%'") == "0");
    }
}

TEST_CASE("postgres floors: the fence cache keeps the effective fence of a rejection") {
    auto url = pg_url();
    if (!url)
        return;
    fixture fx(*url);
    options o;
    o.fence_cache_size = 1000;
    pg_store st(*url, fx.schema, o);
    CHECK(st.run(st->put(put_req("c/1", 1))).error == errc::ok);
    CHECK(st.run(st->raise_floor(floor_req("c/", 50))).error == errc::ok);
    // The cache holds fence 1 for c/1: it does not refuse token 2; the database does.
    check_stale(st.run(st->put(put_req("c/1", 2))), 50, "c/");
    // Now the cache knows 50: a rejection without a round trip (no floor named there).
    auto cached = st.run(st->put(put_req("c/1", 3)));
    CHECK(cached.error == errc::stale_token);
    CHECK(cached.current_token == 50);
    CHECK(st.run(st->put(put_req("c/1", 50))).error == errc::ok);
}

TEST_CASE("postgres floors: a batch of several locks refuses exactly the rows below a floor") {
    auto url = pg_url();
    if (!url)
        return;
    fixture fx(*url);
    options o;
    o.batch_concurrency = 1; // the writes below wait for the blocked one, then go together
    pg_store st(*url, fx.schema, o);
    CHECK(st.run(st->put(put_req("blocker", 1))).error == errc::ok);
    CHECK(st.run(st->advance_fence(fence_req("old/fenced", 3))).error == errc::ok);
    CHECK(st.run(st->advance_fence(fence_req("old/ahead", 40))).error == errc::ok);
    CHECK(st.run(st->raise_floor(floor_req("old/", 30))).error == errc::ok);

    // Hold the blocker's row, so that its write stays in the database while the others
    // queue behind it; they then go as one batch.
    session holder(*url);
    holder.exec("BEGIN");
    holder.exec("SELECT 1 FROM " + fx.table("resources") + " WHERE key = 'blocker' FOR UPDATE");
    auto blocked = st.spawn(st->put(put_req("blocker", 2)));
    std::this_thread::sleep_for(200ms);
    const auto before = st->batches()->read();
    struct row {
        std::string lock;
        token_t token;
        bool keyed;
        token_t current; // 0: applies
        std::optional<std::string> floor;
    };
    const std::vector<row> rows{
        {"old/a", 29, false, 30, "old/"},           {"new/a", 29, false, 0, std::nullopt},
        {"old/fenced", 20, true, 30, "old/"},       {"old/b", 30, true, 0, std::nullopt},
        {"old/ahead", 35, false, 40, std::nullopt}, {"new/b", 1, true, 0, std::nullopt},
        {"old/c", 31, false, 0, std::nullopt},      {"old/d", 0, true, 30, "old/"},
    };
    std::vector<std::future<write_result>> results;
    for (const auto& r : rows)
        results.push_back(
            st.spawn(st->put(put_req(r.lock, r.token, r.keyed ? fresh_key() : std::nullopt))));
    std::this_thread::sleep_for(200ms);
    CHECK(blocked.wait_for(0s) == std::future_status::timeout);
    holder.exec("COMMIT");
    REQUIRE(blocked.wait_for(20s) == std::future_status::ready);
    CHECK(blocked.get().error == errc::ok);
    for (std::size_t i = 0; i < rows.size(); ++i) {
        CAPTURE(rows[i].lock);
        REQUIRE(results[i].wait_for(20s) == std::future_status::ready);
        auto r = results[i].get();
        if (rows[i].current == 0)
            CHECK(r.error == errc::ok);
        else
            check_stale(r, rows[i].current, rows[i].floor);
    }
    // They went as one batch of 8 (the bucket up to 8).
    const auto after = st->batches()->read();
    CHECK(after.writes - before.writes == rows.size());
    CHECK(after.buckets[3] - before.buckets[3] == 1);
}

TEST_CASE("postgres floors: the SQL rule agrees with fence::floor_set") {
    auto url = pg_url();
    if (!url)
        return;
    fixture fx(*url);
    pg_store st(*url, fx.schema);
    struct floor_case {
        const char* prefix;
        token_t token;
    };
    const floor_case floors[] = {{"", 3},     {"a", 5},   {"ab", 5},       {"abc", 4},
                                 {"b", 9},    {"b/", 12}, {"\xc3\xa9", 7}, {"x/y", 2},
                                 {"x/y/", 2}, {"%", 8},   {"_", 8}};
    fk::fence::floor_set model;
    for (const auto& f : floors) {
        CHECK(st.run(st->raise_floor(floor_req(f.prefix, f.token))).error == errc::ok);
        model.raise(f.prefix, f.token, 0, max_floors);
    }
    struct own_case {
        const char* lock;
        token_t token;
    };
    const own_case owns[] = {{"abc", 6}, {"bz", 9}, {"c", 1}, {"b/1", 11}, {"x/y/z", 2}};
    std::map<std::string, token_t> own;
    for (const auto& o : owns) {
        // Raised before the floors would be refused now: write them directly.
        fx.admin.exec("INSERT INTO " + fx.table("fences") + " (lock, token) VALUES ('" + o.lock +
                      "', " + std::to_string(o.token) + ")");
        own[o.lock] = o.token;
    }
    const char* locks[] = {"a", "ab",        "abc", "abcd",  "abd",  "b",  "bz", "b/1", "b/2", "c",
                           "d", "\xc3\xa9t", "x/y", "x/y/z", "x/yz", "%x", "_x", "ax_", "A"};
    for (const char* lock : locks) {
        CAPTURE(lock);
        const auto it = own.find(lock);
        const auto own_token = it == own.end() ? std::nullopt : std::optional<token_t>(it->second);
        const auto want = model.effective(lock, own_token);
        REQUIRE(want.token); // the "" floor covers every lock
        const std::optional<std::string> want_floor =
            want.floor ? std::optional<std::string>(std::string(want.floor->prefix)) : std::nullopt;
        auto got = st.run(st->read_fence(lock));
        CHECK(got.error == errc::ok);
        CHECK(got.fence.token == *want.token);
        CHECK(got.fence.floor == want_floor);
        // Every write path refuses one below with the same answer.
        every_path(st, lock, *want.token - 1, *want.token, want_floor);
    }
}

TEST_CASE("postgres floors: at most max_floors; a new prefix beyond is invalid_request") {
    auto url = pg_url();
    if (!url)
        return;
    fixture fx(*url);
    pg_store st(*url, fx.schema);
    fx.admin.exec("INSERT INTO " + fx.table("floors") +
                  " (prefix, token) SELECT 'p' || g, 1 FROM generate_series(1, " +
                  std::to_string(max_floors - 1) + ") g");
    CHECK(st.run(st->raise_floor(floor_req("last", 1))).error == errc::ok);
    auto full = st.run(st->raise_floor(floor_req("one-too-many", 1)));
    CHECK(full.error == errc::invalid_request);
    CHECK(full.message.find(std::to_string(max_floors)) != std::string::npos);
    // An existing prefix may still go up.
    CHECK(st.run(st->raise_floor(floor_req("p1", 2))).error == errc::ok);
    CHECK(st.run(st->list_floors()).floors.size() == max_floors);
}

TEST_CASE("postgres floors: a keyed raise is recorded and replayed") {
    auto url = pg_url();
    if (!url)
        return;
    fixture fx(*url);
    pg_store st(*url, fx.schema);
    auto first = st.run(st->raise_floor(floor_req("k/", 10, key("raise-1"))));
    CHECK(first.error == errc::ok);
    CHECK_FALSE(first.replayed);
    CHECK(st.run(st->raise_floor(floor_req("k/", 20))).error == errc::ok);
    // The same request again: the recorded outcome, nothing applied (the floor is 20).
    auto again = st.run(st->raise_floor(floor_req("k/", 10, key("raise-1"))));
    CHECK(again.error == errc::ok);
    CHECK(again.replayed);
    CHECK(again.token == 10);
    CHECK(st.run(st->list_floors()).floors.front().token == 20);
    // Another request under the key.
    auto other = st.run(st->raise_floor(floor_req("k/", 30, key("raise-1", 'b'))));
    CHECK(other.error == errc::idempotency_key_reused);
    // A refused raise records nothing: a retry with the key then applies.
    auto refused = st.run(st->raise_floor(floor_req("k/", 5, key("raise-2"))));
    CHECK(refused.error == errc::stale_token);
    CHECK(refused.current_token == 20);
    CHECK(fx.admin.exec("SELECT count(*) FROM " + fx.table("idempotency")) == "1");
    // The key space is the one of the other writes (another request has another
    // fingerprint).
    auto advance = st.run(st->advance_fence(fence_req("k/x", 40, key("raise-1", 'c'))));
    CHECK(advance.error == errc::idempotency_key_reused);
    CHECK(st.run(st->read_fence("k/x")).fence.token == 20);
}

TEST_CASE("postgres floors: survive a new store instance") {
    auto url = pg_url();
    if (!url)
        return;
    fixture fx(*url);
    {
        pg_store st(*url, fx.schema);
        CHECK(st.run(st->raise_floor(floor_req("r/", 77))).error == errc::ok);
    }
    pg_store again(*url, fx.schema);
    auto l = again.run(again->list_floors());
    REQUIRE(l.floors.size() == 1);
    CHECK(l.floors[0].prefix == "r/");
    CHECK(l.floors[0].token == 77);
    check_stale(again.run(again->put(put_req("r/1", 76))), 77, "r/");
}

TEST_CASE("postgres floors: a schema-2 database is upgraded in place") {
    auto url = pg_url();
    if (!url)
        return;
    fixture fx(*url);
    { pg_store st(*url, fx.schema); }
    // Back to version 2 as it was: no floors table, the old fence step.
    fx.admin.exec("DROP TABLE " + fx.table("floors"));
    fx.admin.exec("DELETE FROM " + fx.table("schema_version") + " WHERE version >= 3");
    fx.admin.exec("DROP FUNCTION " + fx.table("fk_key_live"));
    fx.admin.exec(
        "CREATE OR REPLACE FUNCTION " + fx.table("fk_fence_step") +
        "(p_lock text, p_token bigint) RETURNS bigint LANGUAGE sql AS 'SELECT 0::bigint'");
    fx.admin.exec("INSERT INTO " + fx.table("fences") + " (lock, token) VALUES ('u/1', 4)");
    pg_store st(*url, fx.schema);
    CHECK(fx.admin.exec("SELECT max(version) FROM " + fx.table("schema_version")) ==
          std::to_string(sql::schema_version));
    CHECK(st.run(st->read_fence("u/1")).fence.token == 4);
    CHECK(st.run(st->raise_floor(floor_req("u/", 9))).error == errc::ok);
    check_stale(st.run(st->run_operation(op_req("touch", "u/1", 8))), 9, "u/");
    check_stale(st.run(st->run_operation(op_req("touch", "u/2", 3, key("up")))), 9, "u/");
}

TEST_CASE("postgres floors: a raise waits for writes in flight; they commit before it") {
    auto url = pg_url();
    if (!url)
        return;
    fixture fx(*url);
    pg_store st(*url, fx.schema);
    // A named operation holds its fence row (and its lock on fences) for 0.6 s.
    auto op = st.spawn(st->run_operation(op_req("slow", "f/1", 5)));
    std::this_thread::sleep_for(150ms);
    const auto t0 = std::chrono::steady_clock::now();
    auto raise = st.spawn(st->raise_floor(floor_req("f/", 10)));
    CHECK(raise.wait_for(200ms) == std::future_status::timeout);
    REQUIRE(op.wait_for(10s) == std::future_status::ready);
    CHECK(op.get().error == errc::ok);
    REQUIRE(raise.wait_for(10s) == std::future_status::ready);
    CHECK(raise.get().error == errc::ok);
    CHECK(std::chrono::steady_clock::now() - t0 >= 300ms);
    CHECK(fx.admin.exec("SELECT token FROM " + fx.table("fences") + " WHERE lock = 'f/1'") == "5");

    // The same with a write transaction another session holds open.
    session other(*url);
    other.exec("BEGIN");
    other.exec("INSERT INTO " + fx.table("fences") + " (lock, token) VALUES ('f/2', 3)");
    auto raise2 = st.spawn(st->raise_floor(floor_req("f/", 20)));
    CHECK(raise2.wait_for(300ms) == std::future_status::timeout);
    // Reads go on meanwhile.
    CHECK(st.run(st->read_fence("f/1")).fence.token == 10);
    other.exec("COMMIT");
    REQUIRE(raise2.wait_for(10s) == std::future_status::ready);
    CHECK(raise2.get().error == errc::ok);
    check_stale(st.run(st->put(put_req("f/2", 19))), 20, "f/");
}

TEST_CASE("postgres floors: a write that starts while a raise holds the lock sees the floor") {
    auto url = pg_url();
    if (!url)
        return;
    for (std::size_t batch_max : {std::size_t(64), std::size_t(1)}) {
        CAPTURE(batch_max);
        fixture fx(*url);
        options o;
        o.batch_max = batch_max;
        pg_store st(*url, fx.schema, o);
        CHECK(st.run(st->advance_fence(fence_req("s/own", 2))).error == errc::ok);
        // What raise_floor's transaction does, held open before its COMMIT.
        session raiser(*url);
        raiser.exec("BEGIN");
        raiser.exec("LOCK TABLE " + fx.table("floors") + " IN SHARE ROW EXCLUSIVE MODE");
        raiser.exec("LOCK TABLE " + fx.table("fences") + " IN SHARE MODE");
        raiser.exec("INSERT INTO " + fx.table("floors") + " (prefix, token) VALUES ('s/', 10)");
        std::vector<std::future<write_result>> writes;
        std::vector<std::future<operation_result>> ops;
        for (const char* lock : {"s/own", "s/new"}) {
            const std::string l = lock;
            writes.push_back(st.spawn(st->put(put_req(l + "/p", 7))));
            writes.push_back(st.spawn(st->put(put_req(l + "/k", 7, fresh_key()))));
            writes.push_back(st.spawn(st->advance_fence(fence_req(l, 7))));
            writes.push_back(st.spawn(st->advance_fence(fence_req(l + "/a", 7, fresh_key()))));
            auto d = del_req(l + "/d", 7);
            writes.push_back(st.spawn(st->remove(d)));
            ops.push_back(st.spawn(st->run_operation(op_req("touch", l + "/o", 7))));
            ops.push_back(st.spawn(st->run_operation(op_req("touch", l + "/q", 7, fresh_key()))));
        }
        std::this_thread::sleep_for(400ms);
        for (auto& w : writes)
            CHECK(w.wait_for(0s) == std::future_status::timeout);
        for (auto& w : ops)
            CHECK(w.wait_for(0s) == std::future_status::timeout);
        raiser.exec("COMMIT");
        for (auto& w : writes) {
            REQUIRE(w.wait_for(20s) == std::future_status::ready);
            check_stale(w.get(), 10, "s/");
        }
        for (auto& w : ops) {
            REQUIRE(w.wait_for(20s) == std::future_status::ready);
            check_stale(w.get(), 10, "s/");
        }
        CHECK(fx.admin.exec("SELECT count(*) FROM " + fx.table("fences") +
                            " WHERE lock LIKE 's/%' AND token < 10 AND lock <> 's/own'") == "0");
        CHECK(fx.admin.exec("SELECT token FROM " + fx.table("fences") + " WHERE lock = 's/own'") ==
              "2");
    }
}
