// Transactions in the Postgres store (store::transact): the statement's text and
// parameters without a database, the mapping of its answer, and then against a real
// Postgres (postgres_live.hpp): all or nothing, the per-op checks in op order, floors,
// named operations inside, Idempotency-Key replay and reuse, and concurrent transactions
// and single writes over overlapping keys and locks without a deadlock reaching a caller.
#include "backends/postgres/transactions.hpp"

#include "backends/postgres/sql.hpp"
#include "postgres_live.hpp"
#include "store_requests.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <barrier>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

using namespace fk::store;
using namespace fk_test_pg;
using namespace fk_test_store;
using fk::errc;
namespace sql = fk::store::pg::sql;
namespace pg = fk::store::pg;

namespace {

std::size_t pos(const std::string& s, std::string_view what) {
    const auto p = s.find(what);
    INFO(what);
    CHECK(p != std::string::npos);
    return p;
}

txn_op put(std::string key, token_t token, std::string body = "b", std::string lock = {}) {
    txn_op o;
    o.op = txn_op::kind::put;
    o.lock = lock.empty() ? key : std::move(lock);
    o.key = std::move(key);
    o.token = token;
    o.body = std::move(body);
    o.content_type = "text/plain";
    return o;
}

txn_op lock_op(txn_op::kind k, std::string lock, token_t token) {
    txn_op o;
    o.op = k;
    o.lock = std::move(lock);
    o.token = token;
    return o;
}

txn_op fence_op(std::string lock, token_t token) {
    return lock_op(txn_op::kind::fence, std::move(lock), token);
}

txn_op check_op(std::string lock, token_t token) {
    return lock_op(txn_op::kind::check, std::move(lock), token);
}

txn_op check_version(std::string key, std::optional<std::int64_t> version) {
    txn_op o;
    o.op = txn_op::kind::check_version;
    o.key = std::move(key);
    o.version = version;
    return o;
}

txn_op operation(std::string name, std::string lock, token_t token, text_params params = {}) {
    auto o = lock_op(txn_op::kind::operation, std::move(lock), token);
    o.name = std::move(name);
    o.params = std::move(params);
    return o;
}

txn_request txn(std::vector<txn_op> ops, std::optional<idempotency> idem = {}) {
    return txn_request{std::move(ops), std::move(idem)};
}

void check_ok(const txn_result& r) {
    INFO(r.message);
    INFO(r.server_message);
    REQUIRE(r.error == errc::ok);
}

void check_refused(const txn_result& r, errc e, std::size_t op_index) {
    INFO(r.message);
    CHECK(r.error == e);
    CHECK(r.op_index == op_index);
}

// ---- without a database ----

TEST_CASE("txn statement: keys, then fences, then new keys, each sorted, like the batch") {
    const auto s = sql::txn_sql("fk");
    const auto k = pos(s, "ORDER BY r.key COLLATE \"C\" FOR UPDATE");
    const auto f = pos(s, "INSERT INTO \"fk\".fences");
    const auto f_order = pos(s, "ORDER BY l.lock COLLATE \"C\"");
    const auto v = pos(s, "INSERT INTO \"fk\".resources");
    const auto v_order = pos(s, "ORDER BY u.key COLLATE \"C\"");
    CHECK(k < f);
    CHECK(f < f_order);
    CHECK(f_order < v);
    CHECK(v < v_order);
    // F starts only once K is over.
    CHECK(pos(s, "(SELECT count(*) FROM k) >= 0") < f_order);
    // A check-only lock is proposed with the sentinel, and only when its row exists.
    pos(s, "'-infinity'::timestamptz");
    pos(s, "(l.writes OR l.own IS NOT NULL)");
    pos(s, "WHERE fe.token <= EXCLUDED.token");
    // Data only when every op passed; a create race raises.
    pos(s, "WHERE ok.all_ok");
    pos(s, "ON CONFLICT (key) DO NOTHING");
    pos(s, "\"fk\".fk_raise('FKR01'");
    CHECK(s.find("@S") == std::string::npos);
}

TEST_CASE("txn statements are prepared on every connection") {
    const auto all = sql::prepared_statements("fk");
    bool txn = false, restore = false;
    for (const auto& st : all) {
        if (std::string_view(st.name) == sql::name::txn) {
            txn = true;
            CHECK(st.nparams == 10);
        }
        if (std::string_view(st.name) == sql::name::txn_restore_settings)
            restore = true;
    }
    CHECK(txn);
    CHECK(restore);
    pos(sql::txn_restore_settings_sql(), "reset_val, true");
}

TEST_CASE("txn params: ten binary arrays, one element per op, NULL where an op has no field") {
    auto p = put("a", 7, "body");
    p.pre.if_match = 3;
    std::vector<txn_op> ops{p, fence_op("L", 9), check_version("k", std::nullopt),
                            check_version("m", 4)};
    const auto params = sql::txn_params(ops);
    REQUIRE(params.size() == 10);
    for (const auto& q : params)
        CHECK(q.is_binary);
    // Arrays of 4: header 20 bytes, then each element's length and bytes.
    const auto& kinds = params[0].binary_value();
    CHECK(kinds.find("put") != std::string_view::npos);
    CHECK(kinds.find("fence") != std::string_view::npos);
    CHECK(kinds.find("check_version") != std::string_view::npos);
    // key[]: the fence op's key is NULL, so the has-nulls flag is set.
    CHECK(params[1].binary_value()[7] == 1);
    // lock[]: the check_version ops have none.
    CHECK(params[2].binary_value()[7] == 1);
    // token[] has no NULL.
    CHECK(params[3].binary_value()[7] == 0);
    CHECK(params[4].binary_value().find("body") != std::string_view::npos);
}

pg::result_table checks_table(std::vector<std::vector<std::optional<std::string>>> rows) {
    pg::result_table t;
    t.st = pg::result_table::status::tuples_ok;
    for (const char* c : {"n", "mismatch", "key_lock", "stale", "current_token", "floor",
                          "pre_failed", "token", "version", "created", "unwritten"})
        t.columns.push_back({c, 0});
    t.rows = std::move(rows);
    return t;
}

using cell = std::optional<std::string>;
const cell null;

TEST_CASE("map_txn_checks: the first failing op in op order decides") {
    const std::vector<txn_op> ops{put("a", 5), fence_op("L", 5), put("b", 5)};
    SUBCASE("every op passed") {
        auto c = pg::map_txn_checks(
            checks_table({{"1", "f", null, "f", null, null, "f", "5", "2", "f", null},
                          {"2", "f", null, "f", null, null, "f", "5", null, "f", null},
                          {"3", "f", null, "f", null, null, "f", "5", "1", "t", null}}),
            ops);
        REQUIRE(c.what == pg::txn_checks::outcome::passed);
        CHECK(c.results[0].version == 2);
        CHECK(!c.results[0].created);
        CHECK(c.results[2].created);
        CHECK(c.results[1].token == 5);
    }
    SUBCASE("stale before a precondition, the op's effective fence and floor") {
        auto c = pg::map_txn_checks(
            checks_table({{"1", "f", null, "f", null, null, "f", "5", null, "f", null},
                          {"2", "f", null, "t", "9", "L", "f", null, null, "f", null},
                          {"3", "f", null, "f", null, null, "t", null, null, "f", null}}),
            ops);
        REQUIRE(c.what == pg::txn_checks::outcome::refused);
        CHECK(c.refusal.error == errc::stale_token);
        CHECK(c.refusal.op_index == 1);
        CHECK(c.refusal.current_token == 9);
        CHECK(c.refusal.floor == "L");
    }
    SUBCASE("lock_mismatch names the key's lock") {
        auto c = pg::map_txn_checks(
            checks_table({{"1", "t", "other", "t", "9", null, "t", null, null, "f", null},
                          {"2", "f", null, "f", null, null, "f", null, null, "f", null},
                          {"3", "f", null, "f", null, null, "f", null, null, "f", null}}),
            ops);
        REQUIRE(c.what == pg::txn_checks::outcome::refused);
        CHECK(c.refusal.error == errc::lock_mismatch);
        CHECK(c.refusal.op_index == 0);
        CHECK(c.refusal.lock == "other");
    }
    SUBCASE("refused by a fence newer than the snapshot: re-run") {
        auto c = pg::map_txn_checks(
            checks_table({{"1", "f", null, "t", "5", null, "f", null, null, "f", null},
                          {"2", "f", null, "f", null, null, "f", null, null, "f", null},
                          {"3", "f", null, "f", null, null, "f", null, null, "f", null}}),
            ops);
        CHECK(c.what == pg::txn_checks::outcome::rerun);
    }
    SUBCASE("a malformed answer is never a success") {
        auto c = pg::map_txn_checks(
            checks_table({{"2", "f", null, "f", null, null, "f", "5", "1", "f", null},
                          {"1", "f", null, "f", null, null, "f", "5", null, "f", null},
                          {"3", "f", null, "f", null, null, "f", "5", "1", "t", null}}),
            ops);
        CHECK(c.what == pg::txn_checks::outcome::refused);
        CHECK(c.refusal.error == errc::internal);
        auto short_answer = pg::map_txn_checks(checks_table({}), ops);
        CHECK(short_answer.refusal.error == errc::internal);
    }
}

TEST_CASE("replay_txn: the recorded text, or idempotency_key_reused") {
    pg::idem_record rec;
    rec.fingerprint = std::string(32, 'a');
    rec.rows_json = R"([{"op":"fence","lock":"L","token":3}])";
    auto r = pg::replay_txn(rec, std::string(32, 'a'));
    CHECK(r.error == errc::ok);
    CHECK(r.replayed);
    CHECK(r.results_json == rec.rows_json);
    CHECK(pg::replay_txn(rec, std::string(32, 'b')).error == errc::idempotency_key_reused);
}

// ---- against a real Postgres ----

struct live {
    fixture fx;
    std::unique_ptr<pg_store> st;
    live(const std::string& url, options o = {}) : fx(url, "txn") {
        fx.admin.exec("CREATE SCHEMA \"" + fx.schema + "\"");
        fx.admin.exec("CREATE TABLE " + fx.table("ledger") +
                      " (id bigint PRIMARY KEY, amount bigint NOT NULL)");
        o.operations["ledger"] = fk::config::operation{
            "INSERT INTO " + fx.table("ledger") +
                " (id, amount) VALUES ($1::bigint, $2::bigint) RETURNING id, amount",
            false};
        o.operations["sum"] = fk::config::operation{
            "SELECT coalesce(sum(amount), 0)::bigint AS total FROM " + fx.table("ledger"), false};
        o.operations["boom"] = fk::config::operation{"SELECT 1 / 0 AS x", true};
        st = std::make_unique<pg_store>(url, fx.schema, o);
    }
    txn_result run(txn_request r) { return st->run((*st)->transact(std::move(r))); }
    write_result put1(std::string key, token_t token, std::string body = "b") {
        return st->run((*st)->put(put_req(std::move(key), token, std::move(body))));
    }
    write_result fence1(std::string lock, token_t token) {
        return st->run((*st)->advance_fence(fence_request{std::move(lock), token, {}}));
    }
    // Every key's row and every fence, for "nothing changed" comparisons.
    std::string state() {
        return fx.admin.rows("SELECT key, lock, version, token, deleted, coalesce(body, '') FROM " +
                             fx.table("resources") + " ORDER BY key") +
               "--\n" +
               fx.admin.rows("SELECT lock, token, updated_at FROM " + fx.table("fences") +
                             " ORDER BY lock") +
               "--\n" +
               fx.admin.rows("SELECT id, amount FROM " + fx.table("ledger") + " ORDER BY id");
    }
};

TEST_CASE("postgres txn: commits every op, results in op order") {
    auto url = pg_url();
    if (!url)
        return;
    live t(*url);
    REQUIRE(t.put1("old", 3).error == errc::ok);
    REQUIRE(t.put1("seen", 3).error == errc::ok);
    REQUIRE(t.fence1("G", 4).error == errc::ok);
    auto r = t.run(txn({put("new", 5, "hello"), put("old", 5, "v2"), fence_op("L", 6),
                        check_op("G", 4), check_version("seen", 1), txn_del("gone", 7),
                        check_version("nothing", std::nullopt), check_op("never", 1)}));
    check_ok(r);
    CHECK(!r.replayed);
    CHECK(r.results_json ==
          R"([{"op":"put","key":"new","lock":"new","token":5,"version":1,"created":true},)"
          R"({"op":"put","key":"old","lock":"old","token":5,"version":2,"created":false},)"
          R"({"op":"fence","lock":"L","token":6},)"
          R"({"op":"check","lock":"G","token":4},)"
          R"({"op":"check_version","key":"seen","version":1},)"
          R"({"op":"delete","key":"gone","lock":"gone","token":7,"version":0},)"
          R"({"op":"check_version","key":"nothing","version":0},)"
          R"({"op":"check","lock":"never","token":0}])");
    auto g = t.st->run((*t.st)->get("new", true));
    CHECK(g.body == "hello");
    CHECK(g.version == 1);
    CHECK(t.st->run((*t.st)->get("old", true)).body == "v2");
    // Fences advanced once each; a check changes nothing and creates no fence row.
    CHECK(t.fx.admin.rows("SELECT lock, token FROM " + t.fx.table("fences") + " ORDER BY lock") ==
          "G|4\nL|6\ngone|7\nnew|5\nold|5\nseen|3\n");
    // A check after a write of its lock sees the transaction's token; before it, the
    // fence the transaction found.
    auto r2 = t.run(txn({check_op("old", 9), put("old", 9, "v3"), check_op("old", 9)}));
    check_ok(r2);
    CHECK(r2.results_json ==
          R"([{"op":"check","lock":"old","token":5},)"
          R"({"op":"put","key":"old","lock":"old","token":9,"version":3,"created":false},)"
          R"({"op":"check","lock":"old","token":9}])");
}

TEST_CASE("postgres txn: one stale op in the middle changes nothing, and names the op") {
    auto url = pg_url();
    if (!url)
        return;
    live t(*url);
    REQUIRE(t.put1("a", 5).error == errc::ok);
    REQUIRE(t.put1("b", 5).error == errc::ok);
    REQUIRE(t.fence1("L", 10).error == errc::ok);
    const auto before = t.state();
    auto r = t.run(txn({put("a", 6, "x"), put("c", 6, "x"), fence_op("L", 9), put("b", 6, "x"),
                        txn_del("a2", 6)}));
    check_refused(r, errc::stale_token, 2);
    CHECK(r.current_token == 10);
    CHECK(!r.floor);
    CHECK(t.state() == before);
    // The same with the stale op last and first.
    check_refused(t.run(txn({put("a", 6), fence_op("L", 2)})), errc::stale_token, 1);
    check_refused(t.run(txn({put("a", 4), fence_op("L", 20)})), errc::stale_token, 0);
    CHECK(t.state() == before);
}

TEST_CASE("postgres txn: lock_mismatch, preconditions and check_version, each by op index") {
    auto url = pg_url();
    if (!url)
        return;
    live t(*url);
    REQUIRE(t.put1("a", 5).error == errc::ok);
    const auto before = t.state();
    // The key belongs to lock "a": checked before the fence (its token is stale too).
    auto m = t.run(txn({fence_op("M", 1), put("a", 1, "x", "M")}));
    check_refused(m, errc::lock_mismatch, 1);
    CHECK(m.lock == "a");
    auto p = put("a", 6);
    p.pre.if_match = 7;
    check_refused(t.run(txn({put("z", 6), p})), errc::precondition_failed, 1);
    auto n = put("a", 6);
    n.pre.if_none_match_any = true;
    check_refused(t.run(txn({n})), errc::precondition_failed, 0);
    auto d = txn_del("a", 6);
    d.pre.if_match = 2;
    check_refused(t.run(txn({d})), errc::precondition_failed, 0);
    // Stale is decided before the precondition of the same op.
    auto sp = put("a", 4);
    sp.pre.if_match = 7;
    check_refused(t.run(txn({sp})), errc::stale_token, 0);
    check_refused(t.run(txn({put("q", 1), check_version("a", std::nullopt)})),
                  errc::precondition_failed, 1);
    check_refused(t.run(txn({check_version("a", 2)})), errc::precondition_failed, 0);
    check_refused(t.run(txn({check_version("absent", 1)})), errc::precondition_failed, 0);
    CHECK(t.state() == before);
    auto ok = put("a", 6, "y");
    ok.pre.if_match = 1;
    check_ok(t.run(txn({check_version("q", std::nullopt), ok})));
    check_ok(t.run(txn({check_version("a", 2)})));
    // A deleted key is absent for check_version.
    check_ok(t.run(txn({txn_del("a", 7)})));
    check_ok(t.run(txn({check_version("a", std::nullopt)})));
}

TEST_CASE("postgres txn: check against the newest fence, without changing it") {
    auto url = pg_url();
    if (!url)
        return;
    live t(*url);
    REQUIRE(t.fence1("G", 10).error == errc::ok);
    const auto g_row =
        "SELECT token, updated_at FROM " + t.fx.table("fences") + " WHERE lock = 'G'";
    const auto g_before = t.fx.admin.rows(g_row);
    auto s = t.run(txn({check_op("G", 9)}));
    check_refused(s, errc::stale_token, 0);
    CHECK(s.current_token == 10);
    auto ok = t.run(txn({check_op("G", 12), put("k", 1)}));
    check_ok(ok);
    CHECK(ok.results_json.find(R"({"op":"check","lock":"G","token":10})") != std::string::npos);
    // G's token and updated_at are as before.
    CHECK(t.fx.admin.rows(g_row) == g_before);
    CHECK(g_before.starts_with("10|"));
}

TEST_CASE("postgres txn: a floor is the effective fence of every op under it") {
    auto url = pg_url();
    if (!url)
        return;
    live t(*url);
    REQUIRE(t.st->run((*t.st)->raise_floor(floor_request{"f/", 20, {}})).error == errc::ok);
    REQUIRE(t.fence1("f/own", 30).error == errc::ok);
    const auto before = t.state();
    auto p = t.run(txn({put("x", 1), put("f/x", 15)}));
    check_refused(p, errc::stale_token, 1);
    CHECK(p.current_token == 20);
    CHECK(p.floor == "f/");
    auto c = t.run(txn({check_op("f/y", 15)}));
    check_refused(c, errc::stale_token, 0);
    CHECK(c.floor == "f/");
    // The own fence above the floor: that one, and no floor named.
    auto o = t.run(txn({fence_op("f/own", 25)}));
    check_refused(o, errc::stale_token, 0);
    CHECK(o.current_token == 30);
    CHECK(!o.floor);
    CHECK(t.state() == before);
    auto ok = t.run(txn({check_op("f/y", 20), fence_op("f/z", 21)}));
    check_ok(ok);
    CHECK(ok.results_json ==
          R"([{"op":"check","lock":"f/y","token":20},{"op":"fence","lock":"f/z","token":21}])");
}

TEST_CASE("postgres txn: named operations run inside, after every check, or roll it all back") {
    auto url = pg_url();
    if (!url)
        return;
    live t(*url);
    auto ok = t.run(txn({operation("ledger", "acct", 3, {"1", "100"}), put("receipt/1", 3, "r1")}));
    check_ok(ok);
    CHECK(ok.results_json ==
          R"([{"op":"operation","name":"ledger","lock":"acct","token":3,"rows_affected":1,)"
          R"("rows":[{"id":1,"amount":100}]},)"
          R"({"op":"put","key":"receipt/1","lock":"receipt/1","token":3,"version":1,)"
          R"("created":true}])");
    const auto before = t.state();
    // The statement fails (duplicate id): 422 with its SQLSTATE, the put rolled back.
    auto dup = t.run(txn({put("receipt/2", 4, "r2"), fence_op("other", 9),
                          operation("ledger", "acct", 4, {"1", "5"})}));
    check_refused(dup, errc::operation_failed, 2);
    CHECK(dup.sqlstate == "23505");
    CHECK(!dup.server_message.empty());
    CHECK(t.state() == before);
    auto boom = t.run(txn({operation("sum", "acct", 5), operation("boom", "acct", 5)}));
    check_refused(boom, errc::operation_failed, 1);
    CHECK(boom.sqlstate == "22012");
    CHECK(t.state() == before);
    // The operation's fence step is an op like the others, checked in op order.
    auto stale = t.run(txn({put("receipt/3", 4), operation("ledger", "acct", 2, {"3", "1"})}));
    check_refused(stale, errc::stale_token, 1);
    CHECK(stale.current_token == 3);
    // A put that fails is named before an operation (operations run after every check).
    auto first = put("receipt/1", 6);
    first.pre.if_none_match_any = true;
    check_refused(t.run(txn({operation("boom", "acct", 6), first})), errc::precondition_failed, 1);
    check_refused(t.run(txn({put("u", 1), operation("nope", "acct", 6)})), errc::invalid_request,
                  1);
    check_refused(t.run(txn({operation("ledger", "acct", 6, {"1"})})), errc::invalid_request, 0);
    CHECK(t.state() == before);
    auto two =
        t.run(txn({operation("ledger", "acct", 7, {"2", "-40"}), operation("sum", "acct", 7)}));
    check_ok(two);
    CHECK(two.results_json.find(R"("rows":[{"total":60}])") != std::string::npos);
}

TEST_CASE("postgres txn: an Idempotency-Key replays the recorded text, refuses another request") {
    auto url = pg_url();
    if (!url)
        return;
    live t(*url);
    const idempotency key{"", "txn-1", std::string(32, 'a')};
    auto first = t.run(txn({put("a", 1, "one"), operation("ledger", "L", 1, {"1", "7"})}, key));
    check_ok(first);
    const auto after = t.state();
    auto again = t.run(txn({put("a", 1, "one"), operation("ledger", "L", 1, {"1", "7"})}, key));
    check_ok(again);
    CHECK(again.replayed);
    CHECK(again.results_json == first.results_json);
    CHECK(t.state() == after);
    auto other_key = key;
    other_key.fingerprint = std::string(32, 'b');
    auto reused = t.run(txn({put("a", 2, "two")}, other_key));
    CHECK(reused.error == errc::idempotency_key_reused);
    CHECK(t.state() == after);
    // A refused transaction records nothing: the key is free for the next request.
    const idempotency key2{"", "txn-2", std::string(32, 'c')};
    check_refused(t.run(txn({put("a", 0, "stale")}, key2)), errc::stale_token, 0);
    auto fixed_key = key2;
    fixed_key.fingerprint = std::string(32, 'd');
    check_ok(t.run(txn({put("a", 2, "two")}, fixed_key)));
    CHECK(t.fx.admin.exec("SELECT count(*) FROM " + t.fx.table("idempotency")) == "2");
}

TEST_CASE("postgres txn: concurrent transactions in opposite orders, and single writes, never "
          "fail") {
    auto url = pg_url();
    if (!url)
        return;
    options o;
    o.pool_size = 8;
    live t(*url, o);
    const std::vector<std::string> keys{"k0", "k1", "k2", "k3", "k4"};
    constexpr int workers = 6, rounds = 40;
    std::mutex mutex; // doctest's macros are not for other threads
    std::vector<std::string> errors;
    REQUIRE(t.fence1("checked", 1).error == errc::ok);
    std::vector<std::thread> threads;
    for (int w = 0; w < workers; ++w)
        threads.emplace_back([&, w] {
            for (int i = 0; i < rounds; ++i) {
                std::vector<txn_op> ops;
                const std::string body = std::to_string(w) + ":" + std::to_string(i);
                for (const auto& k : keys)
                    ops.push_back(put(k, 1, body));
                ops.push_back(fence_op("shared", 1));
                ops.push_back(check_op("checked", 1));
                if (w % 2)
                    std::reverse(ops.begin(), ops.end());
                if (w == 0)
                    ops.push_back(operation("sum", "shared", 1));
                auto r = t.run(txn(std::move(ops)));
                if (r.error != errc::ok) {
                    const std::lock_guard l(mutex);
                    errors.push_back(std::string(fk::to_string(r.error)) + ": " + r.message);
                }
            }
        });
    // Single writes to the same keys and lock beside them, through the batch.
    threads.emplace_back([&] {
        for (int i = 0; i < rounds; ++i) {
            const auto& k = keys[static_cast<std::size_t>(i) % keys.size()];
            auto r = t.put1(k, 1, "single");
            auto f = t.fence1("shared", 1);
            if (r.error != errc::ok || f.error != errc::ok) {
                const std::lock_guard l(mutex);
                errors.push_back("single write: " + r.message + f.message);
            }
        }
    });
    for (auto& th : threads)
        th.join();
    for (const auto& e : errors)
        MESSAGE(e);
    CHECK(errors.empty());
    // Each transaction wrote every key with one body: the keys that no single write
    // touched after the last transaction agree, and every key's version counts all writes.
    const auto versions = t.fx.admin.exec("SELECT sum(version) FROM " + t.fx.table("resources") +
                                          " WHERE key LIKE 'k%'");
    CHECK(versions == std::to_string(workers * rounds * keys.size() + rounds));
}

TEST_CASE("postgres txn: random transactions that create and delete overlapping keys all commit") {
    auto url = pg_url();
    if (!url)
        return;
    options o;
    o.pool_size = 8;
    live t(*url, o);
    constexpr int workers = 6, rounds = 60, nkeys = 8;
    std::mutex mutex;
    std::vector<std::string> errors;
    std::atomic<long> puts{0};
    std::vector<std::thread> threads;
    for (int w = 0; w < workers; ++w)
        threads.emplace_back([&, w] {
            std::mt19937 rng(static_cast<unsigned>(w) * 7919u + 1u);
            for (int i = 0; i < rounds; ++i) {
                std::vector<int> ks(nkeys);
                std::iota(ks.begin(), ks.end(), 0);
                std::shuffle(ks.begin(), ks.end(), rng);
                std::vector<txn_op> ops;
                long n = 0;
                const auto count = 2 + rng() % 4;
                for (std::size_t j = 0; j < count; ++j) {
                    const auto k = "k" + std::to_string(ks[j]);
                    if (rng() % 3 == 0) {
                        ops.push_back(txn_del(k, 1));
                    } else {
                        ops.push_back(put(k, 1, std::to_string(w)));
                        ++n;
                    }
                }
                ops.push_back(fence_op("s" + std::to_string(rng() % 3), 1));
                ops.push_back(check_op("c" + std::to_string(rng() % 2), 1));
                std::shuffle(ops.begin(), ops.end(), rng);
                auto r = t.run(txn(std::move(ops)));
                if (r.error == errc::ok) {
                    puts += n;
                } else {
                    const std::lock_guard l(mutex);
                    errors.push_back(std::string(fk::to_string(r.error)) + ": " + r.message);
                }
            }
        });
    REQUIRE(t.fence1("c0", 1).error == errc::ok);
    for (auto& th : threads)
        th.join();
    for (const auto& e : errors)
        MESSAGE(e);
    CHECK(errors.empty());
    // A put adds one to its key's version, a delete keeps it: the versions count every
    // committed put, once.
    CHECK(t.fx.admin.exec("SELECT coalesce(sum(version), 0) FROM " + t.fx.table("resources")) ==
          std::to_string(puts.load()));
}

TEST_CASE("postgres txn: transactions racing to create the same keys are re-run, not failed") {
    auto url = pg_url();
    if (!url)
        return;
    options o;
    o.pool_size = 8;
    live t(*url, o);
    constexpr int workers = 6, rounds = 25;
    std::barrier start(workers);
    std::mutex mutex;
    std::vector<std::string> errors;
    std::vector<std::thread> threads;
    for (int w = 0; w < workers; ++w)
        threads.emplace_back([&, w] {
            for (int i = 0; i < rounds; ++i) {
                const auto a = "new" + std::to_string(i) + "a", b = "new" + std::to_string(i) + "b";
                std::vector<txn_op> ops{put(a, 1), put(b, 1)};
                if (w % 2)
                    std::swap(ops[0], ops[1]);
                start.arrive_and_wait();
                auto r = t.run(txn(std::move(ops)));
                if (r.error != errc::ok) {
                    const std::lock_guard l(mutex);
                    errors.push_back(std::string(fk::to_string(r.error)) + ": " + r.message);
                }
            }
        });
    for (auto& th : threads)
        th.join();
    for (const auto& e : errors)
        MESSAGE(e);
    CHECK(errors.empty());
    CHECK(t.fx.admin.exec("SELECT sum(version) FROM " + t.fx.table("resources")) ==
          std::to_string(workers * rounds * 2));
}

TEST_CASE("postgres txn: one Idempotency-Key sent concurrently applies once") {
    auto url = pg_url();
    if (!url)
        return;
    options o;
    o.pool_size = 8;
    live t(*url, o);
    constexpr int senders = 4, rounds = 15;
    std::barrier start(senders);
    std::mutex mutex;
    std::vector<std::string> errors;
    std::vector<int> fresh(rounds, 0);
    std::vector<std::thread> threads;
    for (int w = 0; w < senders; ++w)
        threads.emplace_back([&] {
            for (int i = 0; i < rounds; ++i) {
                const idempotency key{"", "same-" + std::to_string(i), std::string(32, 'a')};
                start.arrive_and_wait();
                auto r = t.run(txn({put("x" + std::to_string(i), 1), fence_op("L", 1),
                                    operation("ledger", "L", 1, {std::to_string(i), "1"})},
                                   key));
                const std::lock_guard l(mutex);
                if (r.error != errc::ok)
                    errors.push_back(std::string(fk::to_string(r.error)) + ": " + r.message);
                else if (!r.replayed)
                    ++fresh[static_cast<std::size_t>(i)];
            }
        });
    for (auto& th : threads)
        th.join();
    for (const auto& e : errors)
        MESSAGE(e);
    CHECK(errors.empty());
    for (int f : fresh)
        CHECK(f == 1);
    CHECK(t.fx.admin.exec("SELECT count(*) FROM " + t.fx.table("ledger")) ==
          std::to_string(rounds));
}

TEST_CASE("postgres txn: the backend killed before COMMIT is 503, and nothing is applied") {
    auto url = pg_url();
    if (!url)
        return;
    options o;
    o.operations["slow"] = fk::config::operation{"SELECT 1 AS one FROM pg_sleep(0.8)", false};
    live t(*url, o);
    const auto before = t.state();
    auto f = t.st->spawn(
        (*t.st)->transact(txn({put("kk", 1, "x"), fence_op("L", 3), operation("slow", "L", 3)})));
    std::this_thread::sleep_for(300ms);
    CHECK(t.fx.admin.exec("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                          "WHERE query LIKE '%pg_sleep(0.8)%' AND pid <> pg_backend_pid()") == "1");
    REQUIRE(f.wait_for(30s) == std::future_status::ready);
    auto r = f.get();
    INFO(r.message);
    CHECK(r.error == errc::unavailable);
    CHECK(t.state() == before);
    // The store goes on with a new connection.
    check_ok(t.run(txn({put("kk", 1, "x")})));
}

// ---- transactions in group-commit batches ----

// Waits until the server shows a backend waiting for a lock (the stuck batch).
// A batch held in the database: a session of its own holds the row of "blocker" FOR
// UPDATE while the store's write to it waits, so that with batch_concurrency 1 everything
// submitted until release() forms the store's next batch.
struct held_batch {
    session s;
    std::future<write_result> stuck;
    held_batch(live& t, const std::string& url) : s(url) {
        REQUIRE(t.put1("blocker", 1).error == errc::ok);
        s.exec("BEGIN");
        s.exec("SELECT 1 FROM " + t.fx.table("resources") + " WHERE key = 'blocker' FOR UPDATE");
        stuck = t.st->spawn((*t.st)->put(put_req("blocker", 2)));
        wait_for_lock_wait(t.fx.admin);
    }
    // Lets the held batch finish, once what was submitted meanwhile has had time to queue.
    void release() {
        std::this_thread::sleep_for(300ms);
        s.exec("COMMIT");
        REQUIRE(stuck.wait_for(10s) == std::future_status::ready);
        CHECK(stuck.get().error == errc::ok);
    }
};

TEST_CASE("postgres txn: transactions share a batch with single writes; a refused one "
          "commits nothing in it") {
    auto url = pg_url();
    if (!url)
        return;
    options o;
    o.batch_concurrency = 1;
    live t(*url, o);
    REQUIRE(t.fence1("Z", 10).error == errc::ok);
    held_batch held(t, *url);
    const auto before = (*t.st)->batches()->read();
    REQUIRE(before.writes > 0);

    auto p1 = t.st->spawn((*t.st)->put(put_req("p1", 1)));
    auto good_req = txn({put("t1", 5, "one"), put("t2", 5, "two"), fence_op("F", 3)});
    // A zombie: its put is fine by itself, its fence op is below Z's fence. Alone it would
    // be rolled back; in the batch its statement must write nothing, not even z1's fence.
    auto zombie_req = txn({put("z1", 5, "zombie"), fence_op("Z", 9)});
    auto good = t.st->spawn((*t.st)->transact(good_req));
    auto zombie = t.st->spawn((*t.st)->transact(zombie_req));
    auto p2 = t.st->spawn((*t.st)->put(put_req("p2", 1)));
    held.release();
    for (auto* f : {&p1, &p2}) {
        REQUIRE(f->wait_for(10s) == std::future_status::ready);
        CHECK(f->get().error == errc::ok);
    }
    REQUIRE(good.wait_for(10s) == std::future_status::ready);
    auto g = good.get();
    check_ok(g);
    CHECK(g.results_json ==
          R"([{"op":"put","key":"t1","lock":"t1","token":5,"version":1,"created":true},)"
          R"({"op":"put","key":"t2","lock":"t2","token":5,"version":1,"created":true},)"
          R"({"op":"fence","lock":"F","token":3}])");
    REQUIRE(zombie.wait_for(10s) == std::future_status::ready);
    auto z = zombie.get();
    check_refused(z, errc::stale_token, 1);
    CHECK(z.current_token == 10);

    // One batch: two writes and two transactions, one database transaction (one xmin),
    // one commit. The batch-size histogram counts its writes only.
    const auto after = (*t.st)->batches()->read();
    CHECK(after.buckets[1] == before.buckets[1] + 1); // size 2
    CHECK(after.writes == before.writes + 2);
    CHECK(t.fx.admin.rows("SELECT count(DISTINCT xmin::text) FROM " + t.fx.table("resources") +
                          " WHERE key IN ('p1', 'p2', 't1', 't2')") == "1\n");
    CHECK(t.fx.admin.rows("SELECT count(DISTINCT xmin::text) FROM " + t.fx.table("resources") +
                          " WHERE key IN ('p1', 'blocker')") == "2\n");
    CHECK(t.fx.admin.rows("SELECT key, version, convert_from(body, 'UTF8') FROM " +
                          t.fx.table("resources") + " ORDER BY key") ==
          "blocker|2|b\np1|1|b\np2|1|b\nt1|1|one\nt2|1|two\n");
    CHECK(t.fx.admin.rows("SELECT lock, token FROM " + t.fx.table("fences") + " ORDER BY lock") ==
          "F|3\nZ|10\nblocker|2\np1|1\np2|1\nt1|5\nt2|5\n");
}

TEST_CASE("postgres txn: a transaction waiting out of lock order in a batch gives way, "
          "and everything commits") {
    auto url = pg_url();
    if (!url)
        return;
    options o;
    o.batch_concurrency = 1;
    // The store's sessions would detect the deadlock only after 10 s, and the other
    // session gives up its wait after 5 s: only the batch's own bound breaks the cycle.
    const std::string slow_detect = *url + (url->find('?') == std::string::npos ? "?" : "&") +
                                    "options=-c%20deadlock_timeout%3D10s";
    live t(slow_detect, o);
    REQUIRE(t.put1("k2", 1).error == errc::ok);
    REQUIRE(t.put1("p3", 1).error == errc::ok);
    held_batch held(t, *url);
    // Another session holds k2, which the transaction needs after the batch statement has
    // locked p3; that session then asks for p3: a wait-for cycle, unless the transaction's
    // wait is bounded (lock_timeout) and the batch gives way and re-runs.
    session other(*url);
    other.exec("BEGIN");
    other.exec("SET LOCAL deadlock_timeout = '10s'"); // the cycle is not broken from here
    other.exec("SET LOCAL lock_timeout = '5s'");
    other.exec("SELECT 1 FROM " + t.fx.table("resources") + " WHERE key = 'k2' FOR UPDATE");
    auto p3 = t.st->spawn((*t.st)->put(put_req("p3", 2)));
    auto tx_req = txn({put("k2", 2, "from txn"), put("k9", 2)});
    auto tx = t.st->spawn((*t.st)->transact(tx_req));
    held.release();
    // The batch [p3, txn] now holds p3 and waits for k2; this waits for p3.
    wait_for_lock_wait(t.fx.admin);
    other.exec("SELECT 1 FROM " + t.fx.table("resources") + " WHERE key = 'p3' FOR UPDATE");
    other.exec("COMMIT");
    REQUIRE(p3.wait_for(20s) == std::future_status::ready);
    CHECK(p3.get().error == errc::ok);
    REQUIRE(tx.wait_for(20s) == std::future_status::ready);
    check_ok(tx.get());
    CHECK(t.fx.admin.rows("SELECT key, version FROM " + t.fx.table("resources") +
                          " ORDER BY key") == "blocker|2\nk2|2\nk9|1\np3|2\n");
}

} // namespace
