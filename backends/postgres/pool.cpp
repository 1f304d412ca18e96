#include "backends/postgres/pool.hpp"

#include "backends/log/logging.hpp"
#include "backends/postgres/operations.hpp"
#include "backends/postgres/round_trip.hpp"
#include "backends/postgres/schema.hpp"

#include <nlohmann/json.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <random>

namespace fk::store::pg {

pool::pool(net::io_context& io, const config::settings& s, std::shared_ptr<const schema> sch,
           std::shared_ptr<operations> ops, std::shared_ptr<round_trip> rt)
    : io_(io), strand_(net::make_strand(io)), schema_(std::move(sch)), ops_(std::move(ops)),
      round_trip_(std::move(rt)), conninfo_(s.store), connect_timeout_(s.postgres.connect_timeout),
      statement_timeout_(s.postgres.statement_timeout),
      query_timeout_(s.postgres.statement_timeout + detail::millis(1000)),
      state_(static_cast<std::size_t>(std::max(1, config::effective_pool_size(s))),
             s.postgres.queue_limit) {}

void pool::start() {
    net::post(strand_, [self = shared_from_this()] {
        self->state_.connect_started();
        net::co_spawn(self->strand_, self->slot(), net::detached);
    });
}

void pool::stop() {
    if (stopped_.exchange(true))
        return;
    ready_ = false;
    net::post(strand_, [self = shared_from_this()] {
        for (auto& w : self->state_.take_waiters())
            w->timer.cancel();
        for (auto& c : self->state_.take_idle())
            net::post(c->strand(), [c] { c->abort(); });
        for (auto& t : self->backoff_timers_)
            t->cancel();
        for (auto& c : self->connecting_)
            net::post(c->strand(), [c] { c->abort(); });
    });
}

net::awaitable<pool::acquired> pool::acquire() {
    co_return co_await net::co_spawn(strand_, acquire_on_strand(), net::use_awaitable);
}

void pool::release(conn_ptr c) {
    net::post(strand_, [self = shared_from_this(), c = std::move(c)]() mutable {
        self->release_on_strand(std::move(c));
    });
}

net::awaitable<exec_outcome> pool::run(const char* statement, const sql::param_list& params,
                                       bool binary_results) {
    auto a = co_await acquire();
    if (!a.conn) {
        exec_outcome o;
        o.t = exec_outcome::transport::failed_unsent;
        o.error = a.why;
        co_return o;
    }
    auto o = co_await net::co_spawn(
        a.conn->strand(), a.conn->exec_prepared(statement, params, binary_results, query_timeout_),
        net::use_awaitable);
    release(a.conn);
    co_return o;
}

net::awaitable<pool::acquired> pool::acquire_on_strand() {
    for (;;) {
        if (stopped())
            co_return acquired{nullptr, "the store is stopping"};
        auto w = std::make_shared<waiter>(strand_);
        auto a = state_.acquire(w);
        using decision = decltype(a.d);
        if (a.d == decision::take) {
            conn_ptr c = std::move(*a.conn);
            if (c->check_idle())
                co_return acquired{std::move(c), {}};
            // Died while idle (server restart, idle timeout): replace it, try the next.
            log_lost(*c);
            state_.drop();
            after_loss();
            continue;
        }
        if (a.d == decision::reject)
            co_return acquired{nullptr, !state_.has_prospect()
                                            ? "no database connection"
                                            : "too many requests waiting for a database "
                                              "connection"};
        // Woken early (the timer cancelled) with a connection, or refused: the store
        // stops, or the pool's last connection attempt failed (stranded_waiters).
        boost::system::error_code ec;
        w->timer.expires_after(statement_timeout_);
        co_await w->timer.async_wait(net::redirect_error(net::use_awaitable, ec));
        if (w->conn)
            co_return acquired{std::move(w->conn), {}};
        state_.cancel(w);
        co_return acquired{nullptr, stopped() ? "the store is stopping"
                                    : ec == net::error::operation_aborted
                                        ? "no database connection"
                                        : "no database connection became free in time"};
    }
}

void pool::hand_over(const detail::pool_state<conn_ptr, waiter_ptr>::handoff& h) {
    if (h) {
        h->first->conn = h->second;
        h->first->timer.cancel();
    }
}

void pool::release_on_strand(conn_ptr c) {
    const bool healthy = !stopped() && c->reusable();
    if (!healthy && !stopped())
        log_lost(*c);
    hand_over(state_.release(std::move(c), healthy));
    if (!healthy)
        after_loss();
}

void pool::after_loss() {
    top_up();
    refuse(state_.stranded_waiters());
    update_ready();
}

void pool::refuse(const std::vector<waiter_ptr>& waiters) {
    for (const auto& w : waiters)
        w->timer.cancel();
}

void pool::update_ready() {
    ready_.store(migrated_ && !stopped() && state_.live() > 0, std::memory_order_release);
}

void pool::top_up() {
    if (!migrated_ || stopped())
        return;
    for (std::size_t n = state_.missing(); n > 0; --n) {
        state_.connect_started();
        net::co_spawn(strand_, slot(), net::detached);
    }
}

// Its first attempt was counted by connect_started().
net::awaitable<void> pool::slot() {
    auto self = shared_from_this();
    std::minstd_rand rng{std::random_device{}()};
    int failures = 0;
    bool attempting = true;
    while (!stopped()) {
        if (!attempting) {
            state_.attempt_started();
            attempting = true;
        }
        auto c = std::make_shared<detail::connection>(io_);
        const bool migrate = !migrated_;
        connecting_.insert(c);
        std::string err =
            co_await net::co_spawn(c->strand(), set_up(c, migrate), net::use_awaitable);
        connecting_.erase(c);
        if (stopped())
            break;
        if (err.empty()) {
            if (migrate && !migrated_) {
                migrated_ = true;
                logging::write(logging::level::info, "postgres store ready",
                               {{"endpoint", c->endpoint()},
                                {"schema", schema_->name()},
                                {"schema_version", sql::schema_version},
                                {"pool_size", state_.capacity()}});
            } else if (failures > 0) {
                logging::write(logging::level::info, "postgres connection restored",
                               {{"endpoint", c->endpoint()}});
            }
            hand_over(state_.connected(std::move(c)));
            update_ready();
            top_up();
            co_return;
        }
        ++failures;
        // The first failure and then every tenth: a database that is down for long must
        // not flood the log.
        if (failures == 1 || failures % 10 == 0)
            logging::write(logging::level::warn, "postgres connect failed",
                           {{"endpoint", c->endpoint()}, {"error", err}, {"attempt", failures}});
        attempting = false;
        refuse(state_.attempt_failed());
        auto t = std::make_shared<net::steady_timer>(strand_);
        t->expires_after(reconnect_backoff(failures, static_cast<std::uint32_t>(rng())));
        backoff_timers_.insert(t);
        boost::system::error_code ec;
        co_await t->async_wait(net::redirect_error(net::use_awaitable, ec));
        backoff_timers_.erase(t);
    }
    if (attempting)
        refuse(state_.attempt_failed()); // none: stop() took the waiters
    state_.slot_ended();
}

net::awaitable<std::string> pool::set_up(conn_ptr c, bool migrate) {
    std::string err = co_await c->connect(conninfo_, connect_timeout_);
    if (err.empty())
        err = co_await schema_->set_up(*c, migrate);
    if (err.empty())
        err = co_await round_trip_->measure(*c, connect_timeout_);
    if (err.empty())
        err = co_await ops_->prepare_all(*c, migrate);
    co_return err;
}

void pool::log_lost(const detail::connection& c) {
    logging::write(logging::level::warn, "postgres connection dropped",
                   {{"endpoint", c.endpoint()}});
}

} // namespace fk::store::pg
