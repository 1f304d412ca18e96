#pragma once
// For unit tests that run the Postgres store against a real database (FK_TEST_PG_URL; a
// case skips without it, and fails without it under FK_REQUIRE_SERVICES=1, as
// scripts/test.sh sets): a plain libpq session beside the store, a store on its own
// io_context thread, and a schema of its own per case, dropped at the end.

#include "backends/postgres/postgres_store.hpp"

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
#include <optional>
#include <string>
#include <thread>
#include <unistd.h>

namespace fk_test_pg {

namespace net = boost::asio;
using namespace std::chrono_literals;

inline std::optional<std::string> pg_url() {
    const char* u = std::getenv("FK_TEST_PG_URL");
    if (u && *u)
        return std::string(u);
    const char* req = std::getenv("FK_REQUIRE_SERVICES");
    if (req && std::string(req) == "1")
        FAIL("FK_REQUIRE_SERVICES=1 but FK_TEST_PG_URL is not set");
    MESSAGE("skipped: FK_TEST_PG_URL is not set");
    return std::nullopt;
}

// A plain blocking libpq session: sets up, inspects.
class session {
public:
    explicit session(const std::string& url) : c_(PQconnectdb(url.c_str())) {
        REQUIRE(PQstatus(c_) == CONNECTION_OK);
    }
    ~session() { PQfinish(c_); }
    session(const session&) = delete;
    session& operator=(const session&) = delete;

    // Runs `sql` (simple protocol); returns the first column of the first row, if any.
    std::optional<std::string> exec(const std::string& sql) {
        PGresult* r = PQexec(c_, sql.c_str());
        const auto st = PQresultStatus(r);
        INFO(sql);
        INFO(PQresultErrorMessage(r));
        CHECK((st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK));
        std::optional<std::string> v;
        if (st == PGRES_TUPLES_OK && PQntuples(r) > 0 && !PQgetisnull(r, 0, 0))
            v = PQgetvalue(r, 0, 0);
        PQclear(r);
        return v;
    }
    // Every row's columns joined by '|', rows by '\n'.
    std::string rows(const std::string& sql) {
        PGresult* r = PQexec(c_, sql.c_str());
        INFO(sql);
        INFO(PQresultErrorMessage(r));
        CHECK(PQresultStatus(r) == PGRES_TUPLES_OK);
        std::string out;
        for (int i = 0; i < PQntuples(r); ++i) {
            for (int j = 0; j < PQnfields(r); ++j)
                out += (j ? "|" : "") + std::string(PQgetvalue(r, i, j));
            out += '\n';
        }
        PQclear(r);
        return out;
    }

private:
    PGconn* c_;
};

struct options {
    std::size_t batch_max = 64;
    std::size_t fence_cache_size = 0; // off: every answer comes from the database
    std::size_t pool_size = 6;
    std::map<std::string, fk::config::operation> operations;
    // Unset: the settings' defaults.
    std::optional<std::size_t> batch_concurrency;
    std::optional<std::chrono::milliseconds> batch_overlap;
};

// A Postgres store on its own io_context thread, in `schema`.
class pg_store {
public:
    pg_store(const std::string& url, const std::string& schema, options o = {}) {
        fk::config::settings s;
        s.store = url;
        s.postgres.schema = schema;
        s.postgres.pool_size = static_cast<int>(o.pool_size);
        s.postgres.batch_max = o.batch_max;
        s.postgres.fence_cache_size = o.fence_cache_size;
        if (o.batch_concurrency)
            s.postgres.batch_concurrency = *o.batch_concurrency;
        if (o.batch_overlap)
            s.postgres.batch_overlap = *o.batch_overlap;
        s.postgres.statement_timeout = 10s;
        s.operations = o.operations;
        auto r = fk::store::open_postgres_store(io_, s);
        REQUIRE(std::holds_alternative<std::unique_ptr<fk::store::store>>(r));
        store_ = std::move(std::get<std::unique_ptr<fk::store::store>>(r));
        thread_ = std::thread([this] { io_.run(); });
        const auto deadline = std::chrono::steady_clock::now() + 20s;
        while (!store_->ready() && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(10ms);
        REQUIRE(store_->ready());
    }
    ~pg_store() {
        store_->stop();
        std::this_thread::sleep_for(100ms);
        work_.reset();
        io_.stop();
        thread_.join();
        store_.reset();
    }
    pg_store(const pg_store&) = delete;
    pg_store& operator=(const pg_store&) = delete;

    fk::store::store& operator*() { return *store_; }
    fk::store::store* operator->() { return store_.get(); }

    template <class T> std::future<T> spawn(net::awaitable<T> a) {
        auto p = std::make_shared<std::promise<T>>();
        auto f = p->get_future();
        net::co_spawn(io_, std::move(a), [p](std::exception_ptr e, T v) {
            if (e)
                p->set_exception(e);
            else
                p->set_value(std::move(v));
        });
        return f;
    }
    template <class T> T run(net::awaitable<T> a) {
        auto f = spawn(std::move(a));
        REQUIRE(f.wait_for(60s) == std::future_status::ready);
        return f.get();
    }

private:
    net::io_context io_;
    net::executor_work_guard<net::io_context::executor_type> work_{io_.get_executor()};
    std::unique_ptr<fk::store::store> store_;
    std::thread thread_;
};

// Returns once some backend waits for a lock (a store's statement behind a row a test's
// own session holds).
inline void wait_for_lock_wait(session& admin) {
    for (int i = 0; i < 500; ++i) {
        if (admin.exec("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'") !=
            "0")
            return;
        std::this_thread::sleep_for(10ms);
    }
    FAIL("no backend ever waited for the held row");
}

// A schema of its own (named after `what`), dropped at the end.
struct fixture {
    std::string url;
    std::string schema;
    session admin;
    fixture(std::string u, std::string_view what)
        : url(std::move(u)), schema(fresh_name(what)), admin(url) {}
    ~fixture() { admin.exec("DROP SCHEMA IF EXISTS \"" + schema + "\" CASCADE"); }
    std::string table(const std::string& t) const { return "\"" + schema + "\"." + t; }

private:
    static std::string fresh_name(std::string_view what) {
        static std::atomic<int> n{0};
        return "fk_" + std::string(what) + "_" + std::to_string(::getpid()) + "_" +
               std::to_string(++n);
    }
};

} // namespace fk_test_pg
