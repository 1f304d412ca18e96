// The Postgres store's roles (pool, write_batcher, operations, schema, round_trip) and the
// decisions each makes, without a database: pure functions by value, and the pool and
// batcher against an address where nothing listens.
#include "backends/postgres/operations.hpp"
#include "backends/postgres/pool.hpp"
#include "backends/postgres/round_trip.hpp"
#include "backends/postgres/schema.hpp"
#include "backends/postgres/uri_check.hpp"
#include "backends/postgres/write_batcher.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <doctest/doctest.h>

using namespace fk::store;
using namespace std::chrono_literals;
using fk::errc;
using pg::batch_outcome;
using ms = std::chrono::milliseconds;

TEST_CASE("round_trip keeps the fastest exchange and says when to log") {
    pg::round_trip rt(50ms, 1ms);
    const std::string a = "10.0.0.1:5432";
    CHECK(rt.fastest() == std::chrono::steady_clock::duration::zero());
    CHECK(rt.overlap_after() == 50ms); // unknown: batch_overlap_ms
    CHECK(rt.observe(a, 5ms));         // first: logged
    CHECK(rt.far());
    CHECK(rt.overlap_after() == 2500us); // far: half a round trip
    CHECK_FALSE(rt.observe(a, 8ms));     // slower: a busy moment, ignored
    CHECK(rt.fastest() == 5ms);
    CHECK_FALSE(rt.observe(a, 3ms)); // faster, still far: kept, not logged
    CHECK(rt.fastest() == 3ms);
    CHECK(rt.observe(a, 500us)); // turned near: logged
    CHECK_FALSE(rt.far());
    CHECK(rt.overlap_after() == 50ms);

    pg::round_trip off(50ms, 0ms); // far_round_trip_ms 0 turns "far" off
    CHECK(off.observe(a, 200ms));
    CHECK_FALSE(off.far());
    CHECK(off.overlap_after() == 50ms);
}

TEST_CASE("round_trip starts over when a new connection reached another server") {
    // A failover through a multi-host URI: the pool's connections now reach the promoted
    // standby. Its round trip replaces the old server's, even when it is slower.
    pg::round_trip rt(50ms, 1ms);
    CHECK(rt.observe("10.0.0.1:5432", 200us)); // near primary
    CHECK_FALSE(rt.far());
    CHECK(rt.observe("10.0.9.9:5432", 20ms)); // the failover landed on a far server: logged
    CHECK(rt.far());
    CHECK(rt.fastest() == 20ms);
    CHECK(rt.overlap_after() == 10ms);
    CHECK_FALSE(rt.observe("10.0.9.9:5432", 30ms)); // same server, busier: ignored
    CHECK(rt.fastest() == 20ms);
    CHECK(rt.observe("10.0.0.1:5432", 300us)); // and back to a near one
    CHECK_FALSE(rt.far());
    CHECK(rt.fastest() == 300us);
    // The same address on another port is another server.
    CHECK(rt.observe("10.0.0.1:5433", 400us));
    CHECK(rt.fastest() == 400us);
}

TEST_CASE("multi-host URIs for a primary and its standbys pass the store URL check") {
    // docs/postgres.md "High availability": libpq tries the hosts in order and, with
    // target_session_attrs=read-write (or primary), keeps the one that takes writes.
    CHECK_FALSE(pg::check_conninfo("postgresql://app@10.0.0.1:5432,10.0.0.2:5432/appdb"
                                   "?target_session_attrs=read-write"));
    CHECK_FALSE(pg::check_conninfo("postgresql://app@db1,db2,db3/appdb?target_session_attrs=primary"
                                   "&connect_timeout=2"));
    CHECK_FALSE(pg::check_conninfo("host=db1,db2 port=5432,5433 dbname=appdb "
                                   "target_session_attrs=read-write"));
    CHECK(pg::check_conninfo("postgresql://app@db1,db2/appdb?no_such_option=1"));
}

TEST_CASE("reconnect backoff doubles from 100 ms to 5 s, jittered in its upper half") {
    CHECK(pg::reconnect_backoff(1, 0) == ms(50));
    CHECK(pg::reconnect_backoff(1, 50) == ms(100));
    CHECK(pg::reconnect_backoff(1, 51) == ms(50)); // random is taken modulo the spread
    CHECK(pg::reconnect_backoff(2, 0) == ms(100));
    CHECK(pg::reconnect_backoff(6, 0) == ms(1600));
    CHECK(pg::reconnect_backoff(7, 0) == ms(2500));
    CHECK(pg::reconnect_backoff(100, 0) == ms(2500));
    CHECK(pg::reconnect_backoff(100, 2500) == ms(5000));
    for (std::uint32_t r : {0U, 1U, 12345U, 0xFFFFFFFFU})
        for (int f = 1; f < 12; ++f) {
            CHECK(pg::reconnect_backoff(f, r) >= ms(50));
            CHECK(pg::reconnect_backoff(f, r) <= ms(5000));
        }
}

TEST_CASE("a finished batch's write is answered, re-run or given up") {
    pg::write_mapping done;
    CHECK(pg::after_batch(done, 1, false) == batch_outcome::answer);
    CHECK(pg::after_batch(done, 1, true) == batch_outcome::answer);
    pg::write_mapping raced;
    raced.retry = true;
    CHECK(pg::after_batch(raced, 1, false) == batch_outcome::retry);
    CHECK(pg::after_batch(raced, pg::max_write_attempts - 1, false) == batch_outcome::retry);
    CHECK(pg::after_batch(raced, pg::max_write_attempts, false) == batch_outcome::give_up);
    CHECK(pg::after_batch(raced, 1, true) == batch_outcome::give_up); // stopping
}

TEST_CASE("a batch runner keeps its connection only while nobody else waits for one") {
    CHECK(pg::keep_connection(false, true, 0, false));
    CHECK(pg::keep_connection(false, true, 1, true)); // the waiter is the other runner
    CHECK_FALSE(pg::keep_connection(false, true, 1, false));
    CHECK_FALSE(pg::keep_connection(false, true, 2, true));
    CHECK_FALSE(pg::keep_connection(true, true, 0, false));
    CHECK_FALSE(pg::keep_connection(false, false, 0, false));
}

TEST_CASE("the queue sweep runs every eighth of statement_timeout, 10 to 250 ms") {
    CHECK(pg::sweep_period(ms(5000)) == ms(250));
    CHECK(pg::sweep_period(ms(800)) == ms(100));
    CHECK(pg::sweep_period(ms(40)) == ms(10));
}

TEST_CASE("operations: named by position, found by name, parameter count checked once known") {
    std::map<std::string, fk::config::operation> cfg;
    cfg["transfer"].sql = "SELECT $1::int";
    cfg["credit"].sql = "SELECT 1";
    cfg["credit"].expose_errors = true;
    pg::operations ops(cfg, ms(1000));
    CHECK(ops.size() == 2);
    const auto* credit = ops.find("credit");
    const auto* transfer = ops.find("transfer");
    REQUIRE(credit);
    REQUIRE(transfer);
    CHECK(ops.find("debit") == nullptr);
    CHECK(credit->statement == "fk_op_0"); // the config's sorted order
    CHECK(transfer->statement == "fk_op_1");
    CHECK(credit->expose_errors);
    CHECK_FALSE(transfer->expose_errors);
    // Unknown until a connection has described the statement: not checked.
    CHECK_FALSE(ops.param_count("transfer").has_value());
    CHECK_FALSE(pg::operations::check_param_count(*transfer, 3).has_value());
    transfer->nparams.store(1);
    CHECK(ops.param_count("transfer") == 1U);
    CHECK_FALSE(pg::operations::check_param_count(*transfer, 1).has_value());
    auto wrong = pg::operations::check_param_count(*transfer, 2);
    REQUIRE(wrong.has_value());
    CHECK(wrong->error == errc::invalid_request);
    CHECK(wrong->message == "operation 'transfer' takes 1 parameters, got 2");
}

TEST_CASE("schema set-up reports the first failure of an exchange") {
    pg::exec_outcome ok;
    ok.results.resize(2);
    ok.results[0].st = pg::result_table::status::command_ok;
    ok.results[1].st = pg::result_table::status::tuples_ok;
    CHECK(pg::schema::first_error(ok, "prepare").empty());
    auto failed = ok;
    failed.results[1].st = pg::result_table::status::error;
    failed.results[1].sqlstate = "FKV01";
    failed.results[1].message = "schema version 9 is newer";
    CHECK(pg::schema::first_error(failed, "schema migration") ==
          "schema migration: FKV01 schema version 9 is newer");
    pg::exec_outcome lost;
    lost.t = pg::exec_outcome::transport::failed_after_send;
    CHECK(pg::schema::first_error(lost, "session setup") == "session setup: connection lost");
}

namespace {

// A database address where nothing listens: every connection attempt is refused.
fk::config::settings unreachable() {
    fk::config::settings s;
    s.store = "postgresql://127.0.0.1:1/none";
    s.postgres.pool_size = 1;
    s.postgres.connect_timeout = ms(2000);
    s.postgres.statement_timeout = ms(2000);
    return s;
}

struct parts {
    explicit parts(boost::asio::io_context& io, const fk::config::settings& s)
        : ops(std::make_shared<pg::operations>(s.operations, ms(1000))),
          rt(std::make_shared<pg::round_trip>(50ms, 1ms)),
          pool(std::make_shared<pg::pool>(
              io, s,
              std::make_shared<const pg::schema>("fk", s.postgres.connect_timeout,
                                                 s.postgres.statement_timeout),
              ops, rt)) {}
    std::shared_ptr<pg::operations> ops;
    std::shared_ptr<pg::round_trip> rt;
    std::shared_ptr<pg::pool> pool;
};

} // namespace

TEST_CASE("pool: a request waits for the attempt in progress, then is refused with it") {
    boost::asio::io_context io;
    const auto s = unreachable();
    parts p(io, s);
    p.pool->start();
    std::vector<std::string> why;
    bool stopped_answer = false;
    boost::asio::co_spawn(
        io,
        [&]() -> boost::asio::awaitable<void> {
            // Sent while the first attempt is in progress: it waits for that attempt.
            auto a = co_await p.pool->acquire();
            why.push_back(a.conn ? "connected" : a.why);
            // The attempt failed and its slot backs off: refused at once.
            a = co_await p.pool->acquire();
            why.push_back(a.conn ? "connected" : a.why);
            p.pool->stop();
            a = co_await p.pool->acquire();
            stopped_answer = !a.conn && a.why == "the store is stopping";
        },
        boost::asio::detached);
    io.run();
    CHECK(why == std::vector<std::string>{"no database connection", "no database connection"});
    CHECK(stopped_answer);
    CHECK_FALSE(p.pool->ready());
}

TEST_CASE("write_batcher: a write is refused when no connection can come, and at stop") {
    boost::asio::io_context io;
    auto s = unreachable();
    parts p(io, s);
    auto batcher =
        std::make_shared<pg::write_batcher>(p.pool, p.rt, s.postgres, s.idempotency.retention);
    p.pool->start();
    std::vector<write_result> results;
    boost::asio::co_spawn(
        io,
        [&]() -> boost::asio::awaitable<void> {
            // Queued behind the first attempt; refused with it (nothing was sent).
            results.push_back(co_await batcher->submit({"k", "L", 1, false, "b", "t", {}}));
            // No connection alive, none being made: refused at once.
            results.push_back(co_await batcher->submit({"k", "L", 2, true, {}, {}, {}}));
            batcher->stop();
            p.pool->stop();
            results.push_back(co_await batcher->submit({"k", "L", 3, true, {}, {}, {}}));
        },
        boost::asio::detached);
    io.run();
    REQUIRE(results.size() == 3);
    for (const auto& r : results)
        CHECK(r.error == errc::unavailable);
    CHECK(results[0].message.rfind("database unavailable: ", 0) == 0);
    CHECK(results[1].message == "database unavailable: no database connection");
    CHECK(results[2].message == "the store is stopping");
    CHECK(batcher->sizes().read().writes == 0);
}
