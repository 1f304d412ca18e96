#include "backends/postgres/postgres_store.hpp"

#include "backends/postgres/detail/batch_queue.hpp"
#include "backends/postgres/detail/connection.hpp"
#include "backends/postgres/detail/pool_state.hpp"
#include "backends/postgres/fence_cache.hpp"
#include "backends/postgres/result.hpp"
#include "backends/postgres/sql.hpp"
#include "config/logging.hpp"

#include <boost/asio/async_result.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <libpq-fe.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <random>
#include <set>

namespace fk::store {
namespace {

using pg::exec_outcome;
using pg::detail::connection;
using conn_ptr = std::shared_ptr<connection>;
using millis = std::chrono::milliseconds;

// A concurrent create can make the write statement ask to be re-run (see sql.cpp); a few
// attempts always suffice in practice, since each re-run sees the newer state.
constexpr int max_write_attempts = 5;

struct waiter {
    explicit waiter(const connection::strand_type& ex) : timer(ex) {}
    net::steady_timer timer;
    conn_ptr conn; // set when a connection is handed over
};
using waiter_ptr = std::shared_ptr<waiter>;

// One PUT or DELETE waiting for, or in, a group-commit batch. `item` views the request,
// which lives in the suspended caller's frame until it has been answered. Touched on the
// pool strand only.
struct write_job {
    explicit write_job(const pg::sql::batch_item& i) : item(i), key(i.key), lock(i.lock) {}
    virtual ~write_job() = default;
    write_job(const write_job&) = delete;
    write_job& operator=(const write_job&) = delete;

    // Resumes the caller with `r` on the caller's executor (never inline); once only.
    void answer(write_result r) {
        if (!answered_) {
            answered_ = true;
            complete(std::move(r));
        }
    }

    pg::sql::batch_item item;
    std::string_view key;
    std::string_view lock;
    bool alone = false;
    int attempts = 0;
    // While queued: when the write gives up waiting for a connection (the sweep refuses
    // it). In a batch, the batch's own deadline applies instead.
    std::chrono::steady_clock::time_point give_up;

private:
    virtual void complete(write_result r) = 0;
    bool answered_ = false;
};

// The job and the caller's completion handler in one allocation.
template <class Handler> struct write_job_for final : write_job {
    write_job_for(const pg::sql::batch_item& i, Handler h, net::any_io_executor e)
        : write_job(i), handler(std::move(h)), ex(std::move(e)) {}
    void complete(write_result r) override {
        net::post(ex, [h = std::move(handler), r = std::move(r)]() mutable {
            std::move(h)(std::move(r));
        });
    }
    Handler handler;
    net::any_io_executor ex;
};
using job_ptr = std::shared_ptr<write_job>;

struct op_entry {
    std::string name;
    std::string sql;
    std::string statement; // fk_op_<index>
    bool expose_errors = false;
    std::atomic<int> nparams{-1};
};

struct acquired {
    conn_ptr conn;
    std::string why; // when conn is null
};

template <class R> R unavailable(std::string message) {
    R r;
    r.error = errc::unavailable;
    r.message = std::move(message);
    return r;
}

// State shared by the store and its background coroutines (which may outlive the store
// object until the io_context lets go of them).
class pg_core : public std::enable_shared_from_this<pg_core> {
public:
    pg_core(net::io_context& io, const config::settings& s)
        : cache(s.postgres.fence_cache_size), io_(io), pool_strand_(net::make_strand(io)),
          state_(static_cast<std::size_t>(std::max(1, config::effective_pool_size(s))),
                 s.postgres.queue_limit),
          conninfo_(s.store), schema_(s.postgres.schema),
          connect_timeout_(s.postgres.connect_timeout),
          statement_timeout_(s.postgres.statement_timeout),
          // Our own deadline sits a little above the server's statement_timeout, so the
          // server normally cancels first (a definite error) and ours catches a dead
          // network or a stuck server.
          query_timeout_(s.postgres.statement_timeout + millis(1000)),
          statements_(pg::sql::prepared_statements(s.postgres.schema)),
          batches_(s.postgres.batch_max), queue_limit_(s.postgres.queue_limit),
          max_batch_runners_(s.postgres.batch_concurrency),
          batch_overlap_(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
              s.postgres.batch_overlap)),
          far_round_trip_(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
              s.postgres.far_round_trip)),
          overlap_timer_(pool_strand_) {
        std::size_t i = 0;
        for (const auto& [name, op] : s.operations) {
            auto e = std::make_unique<op_entry>();
            e->name = name;
            e->sql = op.sql;
            e->expose_errors = op.expose_errors;
            e->statement = pg::sql::op_statement_name(i++);
            ops_.push_back(std::move(e));
        }
    }

    void start() {
        net::post(pool_strand_, [self = shared_from_this()] {
            self->state_.connect_started();
            net::co_spawn(self->pool_strand_, self->slot(), net::detached);
        });
    }

    void stop() {
        if (stopped_.exchange(true))
            return;
        ready_ = false;
        net::post(pool_strand_, [self = shared_from_this()] {
            for (auto& w : self->state_.take_waiters())
                w->timer.cancel();
            for (auto& j : self->batches_.take_queued())
                self->finish(j, unavailable<write_result>("the store is stopping"));
            for (auto& c : self->state_.take_idle())
                net::post(c->strand(), [c] { c->abort(); });
            for (auto& t : self->backoff_timers_)
                t->cancel();
            self->overlap_timer_.cancel(); // up to batch_overlap_ms away
            for (auto& c : self->connecting_)
                net::post(c->strand(), [c] { c->abort(); });
        });
    }

    bool ready() const noexcept { return ready_.load(std::memory_order_acquire); }
    const commit_stats& commit_sizes() const noexcept { return commit_sizes_; }
    bool stopped() const noexcept { return stopped_.load(std::memory_order_acquire); }

    const op_entry* find_op(const std::string& name) const {
        auto it =
            std::find_if(ops_.begin(), ops_.end(), [&](const auto& e) { return e->name == name; });
        return it == ops_.end() ? nullptr : it->get();
    }
    std::size_t op_index(const op_entry* e) const {
        for (std::size_t i = 0; i < ops_.size(); ++i)
            if (ops_[i].get() == e)
                return i;
        return 0;
    }

    // From any executor: a connection for one exchange, or why there is none.
    net::awaitable<acquired> acquire() {
        co_return co_await net::co_spawn(pool_strand_, acquire_on_strand(), net::use_awaitable);
    }

    // From any thread, once the exchange is over.
    void release(conn_ptr c) {
        net::post(pool_strand_, [self = shared_from_this(), c = std::move(c)]() mutable {
            self->on_release(std::move(c));
        });
    }

    // One prepared statement on a pooled connection.
    net::awaitable<exec_outcome> run(const char* statement, const pg::sql::param_list& params,
                                     bool binary_results) {
        auto a = co_await acquire();
        if (!a.conn) {
            exec_outcome o;
            o.t = exec_outcome::transport::failed_unsent;
            o.error = a.why;
            co_return o;
        }
        auto o = co_await net::co_spawn(
            a.conn->strand(),
            a.conn->exec_prepared(statement, params, binary_results, query_timeout_),
            net::use_awaitable);
        release(a.conn);
        co_return o;
    }

    // A named operation: prepare it on this connection if needed, check the parameter
    // count, then [fence step, user statement, Sync] in one pipeline (one round trip, one
    // implicit transaction).
    net::awaitable<operation_result> run_operation(const op_entry& op, operation_request req) {
        auto a = co_await acquire();
        if (!a.conn)
            co_return unavailable<operation_result>("database unavailable: " + a.why);
        auto r = co_await net::co_spawn(a.conn->strand(), run_op_on(a.conn, op, std::move(req)),
                                        net::use_awaitable);
        release(a.conn);
        co_return r;
    }

    // Group commit (batch_max > 1): the write joins the queue and a batch runner sends it,
    // alone when a connection is free now, else with whatever accumulated meanwhile. One
    // hop to the pool strand and one back, no coroutine frame or timer per write: this is
    // the hot path of every PUT and DELETE.
    net::awaitable<write_result> submit_write(const pg::sql::batch_item& item) {
        return net::async_initiate<decltype(net::use_awaitable), void(write_result)>(
            [self = shared_from_this(), item](auto handler) {
                using handler_type = decltype(handler);
                net::any_io_executor ex =
                    net::get_associated_executor(handler, self->io_.get_executor());
                job_ptr job = std::make_shared<write_job_for<handler_type>>(
                    item, std::move(handler), std::move(ex));
                net::dispatch(self->pool_strand_, [self, job = std::move(job)]() mutable {
                    self->submit_on_strand(std::move(job));
                });
            },
            net::use_awaitable);
    }

    pg::fence_cache cache;

private:
    void submit_on_strand(job_ptr job) {
        if (stopped())
            return job->answer(unavailable<write_result>("the store is stopping"));
        // With a connection attempt in progress the write waits for it (the batch runner
        // does), as any request does (pool_state::has_prospect).
        if (!state_.has_prospect())
            return job->answer(
                unavailable<write_result>("database unavailable: no database connection"));
        if (batches_.size() >= queue_limit_)
            return job->answer(unavailable<write_result>(
                "database unavailable: too many writes waiting for a database connection"));
        enqueue(job, false);
        spawn_runner_if_needed();
    }

    void enqueue(const job_ptr& j, bool front) {
        j->give_up = std::chrono::steady_clock::now() + statement_timeout_;
        if (front)
            batches_.push_front(j);
        else
            batches_.push(j);
        if (!sweeping_) {
            sweeping_ = true;
            net::co_spawn(pool_strand_, sweep(), net::detached);
        }
    }

    // While writes are queued: refuses those that waited statement_timeout for a
    // connection (nothing was sent for them), like a pool waiter that gives up. One timer
    // for the whole queue instead of one per write; a write gives up at most one period
    // (statement_timeout / 8, 10 to 250 ms) late.
    net::awaitable<void> sweep() {
        auto self = shared_from_this();
        const auto period = std::clamp(statement_timeout_ / 8, millis(10), millis(250));
        net::steady_timer t(pool_strand_);
        while (!batches_.empty() && !stopped()) {
            t.expires_after(period);
            boost::system::error_code ec;
            co_await t.async_wait(net::redirect_error(net::use_awaitable, ec));
            const auto now = std::chrono::steady_clock::now();
            for (auto& j :
                 batches_.remove_if([now](const job_ptr& e) { return e->give_up <= now; }))
                finish(j, unavailable<write_result>(
                              stopped() ? "the store is stopping"
                                        : "database unavailable: no database connection became "
                                          "free in time"));
        }
        sweeping_ = false;
    }

    static void finish(const job_ptr& j, write_result r) { j->answer(std::move(r)); }

    // At most one runner waits for a connection at a time, and at most batch_concurrency
    // runners hold one: while they are busy, writes pile up for the next batch (that is
    // what makes batches grow under load); a runner that holds a connection keeps taking
    // batches from the queue while may_start_batch() allows. Fewer, larger batches cost
    // the database less per write; a second one starts only beside a stuck one, so that
    // a batch waiting for a row lock does not hold up every other write.
    void spawn_runner_if_needed() {
        if (stopped() || runner_waiting_ || !batches_.has_ready() ||
            batch_runners_ >= max_batch_runners_)
            return;
        if (!may_start_batch()) {
            arm_overlap_timer();
            return;
        }
        runner_waiting_ = true;
        net::co_spawn(pool_strand_, batch_runner(), net::detached);
    }

    // Another batch may start when none is in flight, or when the newest batch in flight
    // has run for batch_overlap_ms (stuck), or half a round trip to a far database: see
    // pg::detail::may_start_batch and overlap_after.
    bool may_start_batch() const {
        return pg::detail::may_start_batch(batches_in_flight_, max_batch_runners_,
                                           std::chrono::steady_clock::now() - newest_batch_start_,
                                           overlap_after());
    }

    std::chrono::steady_clock::duration overlap_after() const {
        return pg::detail::overlap_after(
            batch_overlap_, far_round_trip_,
            std::chrono::nanoseconds(round_trip_ns_.load(std::memory_order_relaxed)));
    }

    // From any connection's strand: keeps the fastest empty-query exchange seen as the
    // database's round trip (a slower one measured a busy moment, not the network), and
    // logs it the first time and whenever the database turns far or near.
    void note_round_trip(const connection& c, std::chrono::steady_clock::duration took) {
        const std::int64_t ns = std::max<std::int64_t>(
            1, std::chrono::duration_cast<std::chrono::nanoseconds>(took).count());
        std::int64_t old = round_trip_ns_.load(std::memory_order_relaxed);
        while ((old == 0 || ns < old) &&
               !round_trip_ns_.compare_exchange_weak(old, ns, std::memory_order_relaxed))
            ;
        if (old != 0 && ns >= old)
            return;
        const auto far = [this](std::int64_t v) {
            return pg::detail::is_far(far_round_trip_, std::chrono::nanoseconds(v));
        };
        if (old != 0 && far(old) == far(ns))
            return;
        const auto after = pg::detail::overlap_after(batch_overlap_, far_round_trip_,
                                                     std::chrono::nanoseconds(ns));
        logging::write(logging::level::info, "postgres round trip",
                       {{"endpoint", c.endpoint()},
                        {"round_trip_ms", static_cast<double>(ns) / 1e6},
                        {"far", far(ns)},
                        {"second_batch_after_ms",
                         static_cast<double>(
                             std::chrono::duration_cast<std::chrono::microseconds>(after).count()) /
                             1e3}});
    }

    // Re-checks when the newest batch in flight reaches batch_overlap_ms.
    void arm_overlap_timer() {
        if (overlap_armed_ || batches_in_flight_ == 0)
            return;
        overlap_armed_ = true;
        overlap_timer_.expires_at(newest_batch_start_ + overlap_after());
        overlap_timer_.async_wait([self = shared_from_this()](boost::system::error_code) {
            self->overlap_armed_ = false;
            self->spawn_runner_if_needed();
        });
    }

    // On the pool strand.
    net::awaitable<void> batch_runner() {
        auto self = shared_from_this();
        auto a = co_await acquire();
        runner_waiting_ = false;
        if (!a.conn) {
            // Nothing was sent for any queued write: refuse them as the pool refused us.
            for (auto& j : batches_.take_queued())
                finish(j, unavailable<write_result>("database unavailable: " + a.why));
            co_return;
        }
        ++batch_runners_;
        for (;;) {
            if (!may_start_batch()) {
                arm_overlap_timer(); // this runner's connection goes back to the pool
                break;
            }
            auto batch = batches_.take();
            if (batch.empty())
                break;
            commit_sizes_.observe(batch.size());
            ++batches_in_flight_;
            newest_batch_start_ = std::chrono::steady_clock::now();
            spawn_runner_if_needed();
            std::vector<pg::sql::batch_item> items;
            items.reserve(batch.size());
            for (const auto& j : batch)
                items.push_back(j->item);
            auto maps = co_await net::co_spawn(
                a.conn->strand(), run_batch_on(a.conn, items, query_timeout_), net::use_awaitable);
            batches_.done(batch);
            --batches_in_flight_;
            // Retries go back to the front, in their order, ahead of later writes.
            for (std::size_t i = batch.size(); i-- > 0;) {
                auto& j = batch[i];
                auto& m = maps[i];
                if (!m.retry) {
                    finish(j, std::move(m.result));
                } else if (++j->attempts >= max_write_attempts || stopped()) {
                    finish(j, unavailable<write_result>(
                                  "concurrent writers kept racing for the key; nothing was "
                                  "written"));
                } else {
                    j->alone = m.alone;
                    enqueue(j, true);
                }
            }
            // Reads and operations waiting for a connection get this one first; the one
            // batch runner that may be waiting does not count (this runner takes its work).
            const bool others_wait = state_.waiting() > (runner_waiting_ ? 1U : 0U);
            if (stopped() || others_wait || !a.conn->reusable())
                break;
        }
        on_release(std::move(a.conn));
        --batch_runners_;
        spawn_runner_if_needed();
    }

    // On the connection's strand: one write alone as the single-row statement, several as
    // [begin, batch, Sync] in one implicit transaction.
    static net::awaitable<std::vector<pg::write_mapping>>
    run_batch_on(conn_ptr c, std::vector<pg::sql::batch_item> items, millis timeout) {
        if (items.size() == 1) {
            const auto& it = items.front();
            const auto params = pg::sql::single_write_params(it);
            auto o = co_await c->exec_prepared(
                it.is_delete ? pg::sql::name::remove : pg::sql::name::put, params, false, timeout);
            co_return std::vector<pg::write_mapping>{
                pg::map_write(o, it.token, !it.is_delete, false)};
        }
        std::vector<pg::batch_row> rows;
        rows.reserve(items.size());
        for (const auto& it : items)
            rows.push_back({it.token, !it.is_delete});
        const auto params = pg::sql::write_batch_params(items);
        static const pg::sql::param_list none;
        std::vector<pg::detail::pipeline_step> steps{{pg::sql::name::batch_begin, &none},
                                                     {pg::sql::name::write_batch, &params}};
        auto o = co_await c->exec_pipeline(steps, timeout);
        co_return pg::map_batch(o, rows, steps.size() - 1);
    }

    net::awaitable<acquired> acquire_on_strand() {
        for (;;) {
            if (stopped())
                co_return acquired{nullptr, "the store is stopping"};
            auto w = std::make_shared<waiter>(pool_strand_);
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

    void on_release(conn_ptr c) {
        const bool healthy = !stopped() && c->reusable();
        if (!healthy && !stopped())
            log_lost(*c);
        if (auto h = state_.release(std::move(c), healthy)) {
            h->first->conn = std::move(h->second);
            h->first->timer.cancel();
        }
        if (!healthy)
            after_loss();
    }

    // Replacements start first, so that waiters wait for them rather than being refused.
    void after_loss() {
        top_up();
        refuse(state_.stranded_waiters());
        update_ready();
    }

    static void refuse(const std::vector<waiter_ptr>& waiters) {
        for (const auto& w : waiters)
            w->timer.cancel();
    }

    void update_ready() {
        ready_.store(migrated_ && !stopped() && state_.live() > 0, std::memory_order_release);
    }

    void top_up() {
        if (!migrated_ || stopped())
            return;
        for (std::size_t n = state_.missing(); n > 0; --n) {
            state_.connect_started();
            net::co_spawn(pool_strand_, slot(), net::detached);
        }
    }

    // One pool slot (pool_state): connects (with backoff) until it has a connection to hand
    // over. Its first attempt was counted by connect_started(). The first slot also creates
    // or migrates the schema.
    net::awaitable<void> slot() {
        auto self = shared_from_this();
        int failures = 0;
        bool attempting = true;
        while (!stopped()) {
            if (!attempting) {
                state_.attempt_started();
                attempting = true;
            }
            auto c = std::make_shared<connection>(io_);
            const bool migrate = !migrated_;
            connecting_.insert(c);
            std::string err =
                co_await net::co_spawn(c->strand(), setup(c, migrate), net::use_awaitable);
            connecting_.erase(c);
            if (stopped())
                break;
            if (err.empty()) {
                if (migrate && !migrated_) {
                    migrated_ = true;
                    logging::write(logging::level::info, "postgres store ready",
                                   {{"endpoint", c->endpoint()},
                                    {"schema", schema_},
                                    {"schema_version", pg::sql::schema_version},
                                    {"pool_size", state_.capacity()}});
                } else if (failures > 0) {
                    logging::write(logging::level::info, "postgres connection restored",
                                   {{"endpoint", c->endpoint()}});
                }
                if (auto h = state_.connected(std::move(c))) {
                    h->first->conn = std::move(h->second);
                    h->first->timer.cancel();
                }
                update_ready();
                top_up();
                co_return;
            }
            ++failures;
            // The first failure and then every tenth: a database that is down for long
            // must not flood the log.
            if (failures == 1 || failures % 10 == 0)
                logging::write(
                    logging::level::warn, "postgres connect failed",
                    {{"endpoint", c->endpoint()}, {"error", err}, {"attempt", failures}});
            attempting = false;
            refuse(state_.attempt_failed());
            auto t = std::make_shared<net::steady_timer>(pool_strand_);
            t->expires_after(backoff(failures));
            backoff_timers_.insert(t);
            boost::system::error_code ec;
            co_await t->async_wait(net::redirect_error(net::use_awaitable, ec));
            backoff_timers_.erase(t);
        }
        if (attempting)
            refuse(state_.attempt_failed()); // none: stop() took the waiters
        state_.slot_ended();
    }

    static millis backoff(int failures) {
        // 100 ms doubling to 5 s, with jitter so that proxies do not reconnect in step.
        const int shift = std::min(failures - 1, 6);
        const auto base = std::min<long long>(100LL << shift, 5000);
        thread_local std::minstd_rand rng{std::random_device{}()};
        return millis(base / 2 +
                      static_cast<long long>(rng() % static_cast<unsigned>(base / 2 + 1)));
    }

    // On the connection's strand: connect, session settings, schema, statements.
    net::awaitable<std::string> setup(conn_ptr c, bool migrate) {
        std::string err = co_await c->connect(conninfo_, connect_timeout_);
        if (!err.empty())
            co_return err;
        auto check = [](const exec_outcome& o, const char* what) -> std::string {
            if (o.t != exec_outcome::transport::ok)
                return std::string(what) + ": " + (o.error.empty() ? "connection lost" : o.error);
            for (const auto& r : o.results)
                if (!r.ok())
                    return std::string(what) + ": " + (r.sqlstate.empty() ? "" : r.sqlstate + " ") +
                           r.message;
            return {};
        };
        err = check(
            co_await c->exec_simple(pg::sql::session_setup(statement_timeout_), connect_timeout_),
            "session setup");
        if (!err.empty())
            co_return err;
        if (migrate) {
            // Waiting for the advisory lock of another starting proxy is part of it.
            err = check(co_await c->exec_simple(pg::sql::migration_script(schema_),
                                                connect_timeout_ + statement_timeout_),
                        "schema migration");
            if (!err.empty())
                co_return err;
        }
        for (const auto& st : statements_) {
            err = check(co_await c->prepare(st.name, st.text, connect_timeout_), "prepare");
            if (!err.empty())
                co_return err;
        }
        // An empty query, once the session is warm: the database answers it without
        // parsing anything, so its time is the round trip over the network, which decides
        // when a second batch starts (overlap_after).
        const auto ping_start = std::chrono::steady_clock::now();
        auto ping = co_await c->exec_simple(std::string(), connect_timeout_);
        if (ping.t != exec_outcome::transport::ok)
            co_return "round trip: " +
                (ping.error.empty() ? std::string("connection lost") : ping.error);
        note_round_trip(*c, std::chrono::steady_clock::now() - ping_start);
        c->op_prepared.assign(ops_.size(), false);
        for (std::size_t i = 0; i < ops_.size(); ++i) {
            auto failure = co_await prepare_op(c, *ops_[i], i);
            if (failure.t != exec_outcome::transport::ok)
                co_return "prepare operation: " + failure.error;
            // A user statement that does not prepare (a table not created yet) is not
            // fatal: it is retried when the operation is called, and its error is
            // reported to that caller.
            if (!failure.results.empty() && !failure.results.front().ok() && migrate)
                logging::write(logging::level::warn, "operation does not prepare",
                               {{"operation", ops_[i]->name},
                                {"sqlstate", failure.results.front().sqlstate},
                                {"error", failure.results.front().message}});
        }
        co_return std::string();
    }

    // Prepares one user operation on `c` (and learns its parameter count once).
    net::awaitable<exec_outcome> prepare_op(conn_ptr c, op_entry& op, std::size_t index) {
        auto o = co_await c->prepare(op.statement.c_str(), op.sql, query_timeout_);
        if (o.t != exec_outcome::transport::ok || o.results.empty() || !o.results.front().ok())
            co_return o;
        if (op.nparams.load() < 0) {
            auto d = co_await c->describe(op.statement.c_str(), query_timeout_);
            if (d.t != exec_outcome::transport::ok)
                co_return d;
            if (!d.results.empty() && d.results.front().ok())
                op.nparams.store(
                    static_cast<int>(pg::parse_int(d.results.front().cmd_tuples).value_or(-1)));
        }
        c->op_prepared[index] = true;
        co_return o;
    }

    net::awaitable<operation_result> run_op_on(conn_ptr c, const op_entry& op,
                                               operation_request req) {
        const std::size_t index = op_index(&op);
        if (!c->op_prepared[index]) {
            auto o = co_await prepare_op(c, const_cast<op_entry&>(op), index);
            if (o.t != exec_outcome::transport::ok)
                co_return unavailable<operation_result>("database unavailable: " + o.error);
            if (!o.results.empty() && !o.results.front().ok())
                co_return pg::map_prepare_failure(o.results.front(), op.name, op.expose_errors);
        }
        const int n = op.nparams.load();
        if (n >= 0 && static_cast<std::size_t>(n) != req.params.size()) {
            operation_result f;
            f.error = errc::invalid_request;
            f.message = "operation '" + op.name + "' takes " + std::to_string(n) +
                        " parameters, got " + std::to_string(req.params.size());
            co_return f;
        }
        const auto fence_params = pg::sql::op_fence_params(req.lock, req.token);
        const auto user_params = pg::sql::op_params(req.params);
        const std::vector<pg::detail::pipeline_step> steps{{pg::sql::name::op_fence, &fence_params},
                                                           {op.statement.c_str(), &user_params}};
        auto o = co_await c->exec_pipeline(steps, query_timeout_);
        co_return pg::map_operation(o, req.token, op.expose_errors);
    }

    void log_lost(const connection& c) {
        logging::write(logging::level::warn, "postgres connection dropped",
                       {{"endpoint", c.endpoint()}});
    }

    net::io_context& io_;
    connection::strand_type pool_strand_;
    pg::detail::pool_state<conn_ptr, waiter_ptr> state_; // pool strand only
    std::string conninfo_;
    std::string schema_;
    millis connect_timeout_;
    millis statement_timeout_;
    millis query_timeout_;
    std::vector<pg::sql::statement> statements_;
    std::vector<std::unique_ptr<op_entry>> ops_;
    std::atomic<bool> ready_{false};
    std::atomic<bool> stopped_{false};
    bool migrated_ = false;                                       // pool strand only
    std::set<std::shared_ptr<net::steady_timer>> backoff_timers_; // pool strand only
    std::set<conn_ptr> connecting_;                               // pool strand only
    pg::detail::batch_queue<job_ptr> batches_;                    // pool strand only
    std::size_t queue_limit_;
    bool runner_waiting_ = false;                              // pool strand only
    std::size_t batch_runners_ = 0;                            // pool strand only
    commit_stats commit_sizes_;                                // writes per batch (metrics)
    std::size_t max_batch_runners_;                            // postgres.batch_concurrency
    std::chrono::steady_clock::duration batch_overlap_;        // postgres.batch_overlap_ms
    std::chrono::steady_clock::duration far_round_trip_;       // postgres.far_round_trip_ms
    std::atomic<std::int64_t> round_trip_ns_{0};               // fastest empty query; 0 = none yet
    std::size_t batches_in_flight_ = 0;                        // pool strand only
    std::chrono::steady_clock::time_point newest_batch_start_; // pool strand only
    net::steady_timer overlap_timer_;                          // pool strand only
    bool overlap_armed_ = false;                               // pool strand only
    bool sweeping_ = false;                                    // pool strand only
};

class postgres_store final : public store {
public:
    postgres_store(std::shared_ptr<pg_core> core, std::size_t batch_max)
        : core_(std::move(core)), batching_(batch_max > 1) {}
    ~postgres_store() override { core_->stop(); }

    net::awaitable<write_result> put(put_request req) override {
        if (auto s = cached_stale(req.key, req.lock, req.token))
            co_return *s;
        write_result r;
        if (batching_) {
            r = co_await core_->submit_write(
                {req.key, req.lock, req.token, false, req.body, req.content_type, req.pre});
        } else {
            const auto params = pg::sql::put_params(req);
            r = co_await write(pg::sql::name::put, params, req.token, true, false);
        }
        observe(req.key, req.lock, r, true);
        co_return r;
    }

    net::awaitable<write_result> remove(delete_request req) override {
        if (auto s = cached_stale(req.key, req.lock, req.token))
            co_return *s;
        write_result r;
        if (batching_) {
            r = co_await core_->submit_write({req.key, req.lock, req.token, true, {}, {}, req.pre});
        } else {
            const auto params = pg::sql::delete_params(req);
            r = co_await write(pg::sql::name::remove, params, req.token, false, false);
        }
        observe(req.key, req.lock, r, false);
        co_return r;
    }

    net::awaitable<object_result> get(std::string key, bool with_body) override {
        const auto params = pg::sql::key_params(key);
        auto o = co_await core_->run(with_body ? pg::sql::name::get_body : pg::sql::name::get_meta,
                                     params, true);
        auto r = pg::map_get(o, with_body);
        if (r.error == errc::ok)
            core_->cache.observe_key(key, r.lock);
        co_return r;
    }

    net::awaitable<write_result> advance_fence(std::string lock, token_t token) override {
        if (auto bound = core_->cache.stale_bound(lock, token))
            co_return stale(token, *bound);
        const auto params = pg::sql::advance_params(lock, token);
        auto r = co_await write(pg::sql::name::advance, params, token, false, true);
        if (r.error == errc::ok)
            core_->cache.observe_fence(lock, r.token);
        else if (r.error == errc::stale_token)
            core_->cache.observe_fence(lock, r.current_token);
        co_return r;
    }

    net::awaitable<fence_result> read_fence(std::string lock) override {
        const auto params = pg::sql::lock_params(lock);
        auto o = co_await core_->run(pg::sql::name::read_fence, params, false);
        auto r = pg::map_read_fence(o, lock);
        if (r.error == errc::ok)
            core_->cache.observe_fence(lock, r.fence.token);
        co_return r;
    }

    net::awaitable<list_result> list_fences(list_request req) override {
        const auto q = pg::sql::list_params(req);
        auto o = co_await core_->run(q.statement, q.params, false);
        co_return pg::map_list(o, req.limit);
    }

    bool supports_operations() const noexcept override { return true; }

    std::optional<std::size_t> operation_param_count(const std::string& name) const override {
        const op_entry* op = core_->find_op(name);
        const int n = op ? op->nparams.load() : -1;
        return n < 0 ? std::nullopt : std::optional<std::size_t>(static_cast<std::size_t>(n));
    }

    net::awaitable<operation_result> run_operation(operation_request req) override {
        const op_entry* op = core_->find_op(req.name);
        if (!op) {
            operation_result r;
            r.error = errc::not_found;
            r.message = "no operation '" + req.name + "'";
            co_return r;
        }
        if (auto bound = core_->cache.stale_bound(req.lock, req.token)) {
            operation_result r;
            r.error = errc::stale_token;
            r.current_token = *bound;
            r.message = "fencing token " + std::to_string(req.token) + " is below the fence " +
                        std::to_string(*bound);
            co_return r;
        }
        const std::string lock = req.lock;
        const token_t token = req.token;
        auto r = co_await core_->run_operation(*op, std::move(req));
        if (r.error == errc::ok)
            core_->cache.observe_fence(lock, token);
        else if (r.error == errc::stale_token)
            core_->cache.observe_fence(lock, r.current_token);
        co_return r;
    }

    bool ready() const noexcept override { return core_->ready(); }
    const commit_stats* batches() const noexcept override { return &core_->commit_sizes(); }
    void stop() override { core_->stop(); }

private:
    static write_result stale(token_t token, token_t fence) {
        write_result r;
        r.error = errc::stale_token;
        r.current_token = fence;
        r.message = "fencing token " + std::to_string(token) + " is below the fence " +
                    std::to_string(fence);
        return r;
    }

    // Answered from the cache only when the key is known to belong to `lock`: otherwise
    // the database must decide, since lock_mismatch comes before stale_token.
    std::optional<write_result> cached_stale(const std::string& key, const std::string& lock,
                                             token_t token) {
        if (auto bound = core_->cache.stale_bound(lock, token))
            if (core_->cache.key_known_under(key, lock))
                return stale(token, *bound);
        return std::nullopt;
    }

    net::awaitable<write_result> write(const char* statement, const pg::sql::param_list& params,
                                       token_t token, bool is_put, bool is_advance) {
        for (int attempt = 1;; ++attempt) {
            auto o = co_await core_->run(statement, params, false);
            auto m = pg::map_write(o, token, is_put, is_advance);
            if (!m.retry)
                co_return m.result;
            if (attempt == max_write_attempts)
                co_return unavailable<write_result>(
                    "concurrent writers kept racing for the key; nothing was written");
        }
    }

    void observe(const std::string& key, const std::string& lock, const write_result& r,
                 bool is_put) {
        switch (r.error) {
        case errc::ok:
            core_->cache.observe_fence(lock, r.token);
            if (is_put)
                core_->cache.observe_key(key, lock);
            else
                core_->cache.forget_key(key);
            break;
        case errc::stale_token:
            core_->cache.observe_fence(lock, r.current_token);
            break;
        case errc::lock_mismatch:
            core_->cache.observe_key(key, r.lock);
            break;
        default:
            break;
        }
    }

    std::shared_ptr<pg_core> core_;
    bool batching_;
};

} // namespace

std::variant<std::unique_ptr<store>, open_error> open_postgres_store(net::io_context& io,
                                                                     const config::settings& s) {
    if (!pg::sql::valid_schema_name(s.postgres.schema))
        return open_error{"postgres.schema: '" + s.postgres.schema +
                          "' is not a usable schema name (1 to 63 bytes, no '$')"};
    char* err = nullptr;
    PQconninfoOption* opts = PQconninfoParse(s.store.c_str(), &err);
    if (!opts) {
        std::string message = err ? err : "out of memory";
        PQfreemem(err);
        while (!message.empty() && message.back() == '\n')
            message.pop_back();
        return open_error{"store: not a valid postgresql:// URI: " + message};
    }
    PQconninfoFree(opts);
    auto core = std::make_shared<pg_core>(io, s);
    core->start();
    return std::unique_ptr<store>(
        std::make_unique<postgres_store>(std::move(core), s.postgres.batch_max));
}

} // namespace fk::store
