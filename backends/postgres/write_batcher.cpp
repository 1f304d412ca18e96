#include "backends/postgres/write_batcher.hpp"

#include "backends/postgres/round_trip.hpp"

#include <boost/asio/async_result.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>

namespace fk::store::pg {

batch_outcome after_batch(const write_mapping& m, int attempts, bool stopping) noexcept {
    if (!m.retry)
        return batch_outcome::answer;
    if (attempts >= max_write_attempts || stopping)
        return batch_outcome::give_up;
    return batch_outcome::retry;
}

bool keep_connection(bool stopping, bool reusable, std::size_t waiting,
                     bool runner_waiting) noexcept {
    const bool others_wait = waiting > (runner_waiting ? 1U : 0U);
    return !stopping && !others_wait && reusable;
}

std::chrono::milliseconds sweep_period(std::chrono::milliseconds statement_timeout) noexcept {
    using ms = std::chrono::milliseconds;
    return std::clamp(statement_timeout / 8, ms(10), ms(250));
}

namespace {

// Something queued for a batch whose caller waits for a `Result`. Pool strand only.
template <class Result> struct waiter {
    waiter() = default;
    virtual ~waiter() = default;
    waiter(const waiter&) = delete;
    waiter& operator=(const waiter&) = delete;

    // Resumes the caller with `r` on the caller's executor (never inline); once only.
    void answer(Result r) {
        if (!answered_) {
            answered_ = true;
            complete(std::move(r));
        }
    }

    // While queued: when it gives up waiting for a connection (the sweep refuses it). In
    // a batch, the batch's own deadline applies instead.
    std::chrono::steady_clock::time_point give_up;

private:
    virtual void complete(Result r) = 0;
    bool answered_ = false;
};

} // namespace

// `item` views the request, which lives in the suspended caller's frame until it has been
// answered.
struct write_batcher::job : waiter<write_result> {
    explicit job(const sql::batch_item& i) : item(i), key(i.key), lock(i.lock) {}

    sql::batch_item item;
    std::string_view key;
    std::string_view lock;
    bool alone = false;
    int attempts = 0;
};

// `req` lives in the suspended caller's frame until it has been answered.
struct write_batcher::txn_job : waiter<txn_answer> {
    explicit txn_job(const txn_request& r) : req(&r) {}

    const txn_request* req;
};

namespace {

// A job and the caller's completion handler in one allocation.
template <class Job, class Result, class Handler> struct with_handler final : Job {
    template <class Request>
    with_handler(const Request& r, Handler h, net::any_io_executor e)
        : Job(r), handler(std::move(h)), ex(std::move(e)) {}
    void complete(Result r) override {
        net::post(ex, [h = std::move(handler), r = std::move(r)]() mutable {
            std::move(h)(std::move(r));
        });
    }
    Handler handler;
    net::any_io_executor ex;
};

constexpr const char* stopping = "the store is stopping";

// A transaction's answers from the batcher: decided (`r`), or to be run on its own path.
write_batcher::txn_answer txn_failure(txn_result r) {
    write_batcher::txn_answer a;
    a.attempt.result = std::move(r);
    return a;
}

write_batcher::txn_answer standalone_txn() {
    write_batcher::txn_answer a;
    a.standalone = true;
    return a;
}

// Nothing was sent for it.
write_batcher::txn_answer refused_txn(std::string why) {
    return txn_failure(unavailable<txn_result>(std::move(why)));
}

} // namespace

write_batcher::write_batcher(std::shared_ptr<pool> p, std::shared_ptr<const round_trip> rt,
                             const config::postgres_settings& s,
                             std::chrono::seconds idem_retention)
    : pool_(std::move(p)), round_trip_(std::move(rt)), queue_limit_(s.queue_limit),
      max_runners_(s.batch_concurrency), idem_retention_(idem_retention), queue_(s.batch_max),
      overlap_timer_(pool_->strand()) {}

net::awaitable<write_result> write_batcher::submit(const sql::batch_item& item) {
    return net::async_initiate<decltype(net::use_awaitable), void(write_result)>(
        [self = shared_from_this(), item](auto handler) {
            using handler_type = decltype(handler);
            net::any_io_executor ex =
                net::get_associated_executor(handler, self->pool_->strand().get_inner_executor());
            job_ptr j = std::make_shared<with_handler<job, write_result, handler_type>>(
                item, std::move(handler), std::move(ex));
            net::dispatch(self->pool_->strand(), [self, j = std::move(j)]() mutable {
                self->submit_on_strand(std::move(j));
            });
        },
        net::use_awaitable);
}

net::awaitable<write_batcher::txn_answer> write_batcher::submit_txn(const txn_request& req) {
    return net::async_initiate<decltype(net::use_awaitable), void(txn_answer)>(
        [self = shared_from_this(), &req](auto handler) {
            using handler_type = decltype(handler);
            net::any_io_executor ex =
                net::get_associated_executor(handler, self->pool_->strand().get_inner_executor());
            txn_job_ptr t = std::make_shared<with_handler<txn_job, txn_answer, handler_type>>(
                req, std::move(handler), std::move(ex));
            net::dispatch(self->pool_->strand(), [self, t = std::move(t)]() mutable {
                self->submit_txn_on_strand(std::move(t));
            });
        },
        net::use_awaitable);
}

void write_batcher::stop() {
    net::post(pool_->strand(), [self = shared_from_this()] {
        self->refuse_queued(stopping);
        self->overlap_timer_.cancel(); // up to batch_overlap_ms away
    });
}

// Nothing was sent for anything queued.
void write_batcher::refuse_queued(const std::string& why) {
    for (auto& j : queue_.take_queued())
        j->answer(unavailable<write_result>(why));
    auto txns = std::move(txns_);
    txns_.clear();
    for (auto& t : txns)
        t->answer(refused_txn(why));
}

void write_batcher::submit_txn_on_strand(txn_job_ptr t) {
    if (pool_->stopped())
        return t->answer(refused_txn(stopping));
    if (!pool_->has_prospect())
        return t->answer(refused_txn("database unavailable: no database connection"));
    if (queue_.size() + txns_.size() >= queue_limit_)
        return t->answer(
            refused_txn("database unavailable: too many writes waiting for a database connection"));
    t->give_up = std::chrono::steady_clock::now() + pool_->statement_timeout();
    txns_.push_back(std::move(t));
    start_sweep();
    spawn_runner_if_needed();
}

// Every queued transaction, up to one per batch place.
std::vector<write_batcher::txn_job_ptr> write_batcher::take_txns() {
    std::vector<txn_job_ptr> out;
    while (!txns_.empty() && out.size() < queue_.max_batch()) {
        out.push_back(std::move(txns_.front()));
        txns_.pop_front();
    }
    return out;
}

void write_batcher::submit_on_strand(job_ptr j) {
    if (pool_->stopped())
        return j->answer(unavailable<write_result>(stopping));
    // With a connection attempt in progress the write waits for it (the batch runner
    // does), as any request does (pool_state::has_prospect).
    if (!pool_->has_prospect())
        return j->answer(unavailable<write_result>("database unavailable: no database connection"));
    if (queue_.size() >= queue_limit_)
        return j->answer(unavailable<write_result>(
            "database unavailable: too many writes waiting for a database connection"));
    enqueue(j, false);
    spawn_runner_if_needed();
}

void write_batcher::enqueue(const job_ptr& j, bool front) {
    j->give_up = std::chrono::steady_clock::now() + pool_->statement_timeout();
    if (front)
        queue_.push_front(j);
    else
        queue_.push(j);
    start_sweep();
}

void write_batcher::start_sweep() {
    if (!sweeping_) {
        sweeping_ = true;
        net::co_spawn(pool_->strand(), sweep(), net::detached);
    }
}

// While writes are queued: refuses those that waited statement_timeout for a connection
// (nothing was sent for them), like a pool waiter that gives up. One timer for the whole
// queue instead of one per write.
net::awaitable<void> write_batcher::sweep() {
    auto self = shared_from_this();
    const auto period = sweep_period(pool_->statement_timeout());
    net::steady_timer t(pool_->strand());
    while ((!queue_.empty() || !txns_.empty()) && !pool_->stopped()) {
        t.expires_after(period);
        boost::system::error_code ec;
        co_await t.async_wait(net::redirect_error(net::use_awaitable, ec));
        const auto now = std::chrono::steady_clock::now();
        const std::string why = pool_->stopped()
                                    ? stopping
                                    : "database unavailable: no database connection became "
                                      "free in time";
        for (auto& j : queue_.remove_if([now](const job_ptr& e) { return e->give_up <= now; }))
            j->answer(unavailable<write_result>(why));
        for (auto it = txns_.begin(); it != txns_.end();) {
            if ((*it)->give_up <= now) {
                (*it)->answer(refused_txn(why));
                it = txns_.erase(it);
            } else {
                ++it;
            }
        }
    }
    sweeping_ = false;
}

// At most one runner waits for a connection at a time, and at most batch_concurrency
// runners hold one: while they are busy, writes pile up for the next batch (that is what
// makes batches grow under load); a runner that holds a connection keeps taking batches
// from the queue while may_start_batch() allows. Fewer, larger batches cost the database
// less per write; a second one starts only beside a stuck one, so that a batch waiting
// for a row lock does not hold up every other write.
void write_batcher::spawn_runner_if_needed() {
    if (pool_->stopped() || runner_waiting_ || (!queue_.has_ready() && txns_.empty()) ||
        runners_ >= max_runners_)
        return;
    if (!may_start_batch()) {
        arm_overlap_timer();
        return;
    }
    runner_waiting_ = true;
    net::co_spawn(pool_->strand(), batch_runner(), net::detached);
}

bool write_batcher::may_start_batch() const {
    return detail::may_start_batch(in_flight_, max_runners_,
                                   std::chrono::steady_clock::now() - newest_start_,
                                   round_trip_->overlap_after());
}

// Re-checks when the newest batch in flight has run for overlap_after().
void write_batcher::arm_overlap_timer() {
    if (overlap_armed_ || in_flight_ == 0)
        return;
    overlap_armed_ = true;
    overlap_timer_.expires_at(newest_start_ + round_trip_->overlap_after());
    overlap_timer_.async_wait([self = shared_from_this()](boost::system::error_code) {
        self->overlap_armed_ = false;
        self->spawn_runner_if_needed();
    });
}

net::awaitable<void> write_batcher::batch_runner() {
    auto self = shared_from_this();
    auto a = co_await pool_->acquire();
    runner_waiting_ = false;
    if (!a.conn) {
        // Nothing was sent for any queued write: refuse them as the pool refused us.
        refuse_queued("database unavailable: " + a.why);
        co_return;
    }
    ++runners_;
    for (;;) {
        if (!may_start_batch()) {
            arm_overlap_timer(); // this runner's connection goes back to the pool
            break;
        }
        auto batch = queue_.take();
        auto txns = take_txns();
        if (batch.empty() && txns.empty())
            break;
        // Writes per batch (the metric's meaning since before transactions joined): a
        // batch of transactions only is not counted, so that bench T can tell the WAL
        // flushes they cost.
        if (!batch.empty())
            sizes_.observe(batch.size());
        ++in_flight_;
        newest_start_ = std::chrono::steady_clock::now();
        spawn_runner_if_needed();
        std::vector<sql::batch_item> items;
        items.reserve(batch.size());
        for (const auto& j : batch)
            items.push_back(j->item);
        std::vector<write_mapping> maps;
        if (txns.empty()) {
            maps = co_await net::co_spawn(
                a.conn->strand(),
                run_batch_on(a.conn, items, pool_->query_timeout(), idem_retention_),
                net::use_awaitable);
        } else {
            std::vector<const txn_request*> reqs;
            reqs.reserve(txns.size());
            for (const auto& t : txns)
                reqs.push_back(t->req);
            auto m = co_await net::co_spawn(a.conn->strand(),
                                            run_mixed_on(a.conn, std::move(items), std::move(reqs),
                                                         pool_->query_timeout(), idem_retention_),
                                            net::use_awaitable);
            maps = std::move(m.writes);
            for (std::size_t i = 0; i < txns.size(); ++i)
                txns[i]->answer(std::move(m.txns[i]));
        }
        queue_.done(batch);
        --in_flight_;
        // Retries go back to the front, in their order, ahead of later writes.
        for (std::size_t i = batch.size(); i-- > 0;) {
            auto& j = batch[i];
            auto& m = maps[i];
            switch (after_batch(m, ++j->attempts, pool_->stopped())) {
            case batch_outcome::answer:
                j->answer(std::move(m.result));
                break;
            case batch_outcome::give_up:
                j->answer(unavailable<write_result>(
                    "concurrent writers kept racing for the key; nothing was written"));
                break;
            case batch_outcome::retry:
                j->alone = m.alone;
                enqueue(j, true);
                break;
            }
        }
        if (!keep_connection(pool_->stopped(), a.conn->reusable(), pool_->waiting(),
                             runner_waiting_))
            break;
    }
    pool_->release_on_strand(std::move(a.conn));
    --runners_;
    spawn_runner_if_needed();
}

// On the connection's strand: one unkeyed write alone as the single-row statement (a third
// of the batch pipeline's database CPU for one row), several, or a keyed one, as [begin,
// batch, Sync] in one implicit transaction, the batch in the shape its rows need (keyed
// when any carries an Idempotency-Key: sql/params.hpp, write_batch_statement).
net::awaitable<std::vector<write_mapping>>
write_batcher::run_batch_on(pool::conn_ptr c, std::vector<sql::batch_item> items,
                            detail::millis timeout, std::chrono::seconds idem_retention) {
    if (items.size() == 1 && !items.front().idem) {
        const auto& it = items.front();
        const auto params = sql::single_write_params(it);
        auto o = co_await c->exec_prepared(it.is_delete ? sql::name::remove : sql::name::put,
                                           params, false, timeout);
        co_return std::vector<write_mapping>{map_write(o, it.token, !it.is_delete, false)};
    }
    std::vector<batch_row> rows;
    rows.reserve(items.size());
    for (const auto& it : items)
        rows.push_back({it.token, !it.is_delete});
    const auto stmt = sql::write_batch_statement(items, idem_retention);
    static const sql::param_list none;
    std::vector<detail::pipeline_step> steps{{sql::name::batch_begin, &none},
                                             {stmt.statement, &stmt.params}};
    auto o = co_await c->exec_pipeline(steps, timeout);
    co_return map_batch(o, rows, steps.size() - 1);
}

// The transactions' statements run after the batch statement (or after the first of
// them), so they may wait for a row lock out of the one lock order that keeps batches
// from deadlocking (sql/batch.cpp): lock_timeout bounds those waits, and one that runs
// out aborts the whole batch, which is then re-run item by item, each transaction in a
// transaction of its own. A transaction's statement is all-or-nothing by itself
// (sql/txn.cpp), so one refused commits nothing while the rest of the batch commits.
net::awaitable<write_batcher::mixed_outcome>
write_batcher::run_mixed_on(pool::conn_ptr c, std::vector<sql::batch_item> items,
                            std::vector<const txn_request*> txns, detail::millis timeout,
                            std::chrono::seconds idem_retention) {
    static const sql::param_list none;
    const auto stmt = sql::write_batch_statement(items, idem_retention);
    std::vector<sql::param_list> txn_params;
    txn_params.reserve(txns.size());
    for (const auto* t : txns)
        txn_params.push_back(sql::txn_params(t->ops));
    std::vector<detail::pipeline_step> steps{{sql::name::batch_begin, &none}};
    if (!items.empty())
        steps.push_back({stmt.statement, &stmt.params});
    const std::size_t batch_at = 1;
    std::vector<std::size_t> txn_at;
    bool bounded = false; // lock_timeout set
    for (std::size_t i = 0; i < txns.size(); ++i) {
        // Every statement after the first one that locks rows.
        if (!bounded && (i > 0 || !items.empty())) {
            steps.push_back({sql::name::batch_lock_timeout, &none});
            bounded = true;
        }
        txn_at.push_back(steps.size());
        steps.push_back({sql::name::txn, &txn_params[i]});
    }
    auto o = co_await c->exec_pipeline(steps, timeout);

    mixed_outcome out;
    out.txns.resize(txns.size());
    std::vector<batch_row> rows;
    rows.reserve(items.size());
    for (const auto& it : items)
        rows.push_back({it.token, !it.is_delete});
    // A server error anywhere aborted the one transaction: nothing committed. Every write
    // is re-run alone, every transaction in a transaction of its own.
    bool server_error = false;
    for (const auto& r : o.results)
        server_error = server_error || r.server_error();
    if (server_error) {
        write_mapping m;
        m.retry = m.alone = true;
        out.writes.assign(items.size(), m);
        for (auto& t : out.txns)
            t = standalone_txn();
        co_return out;
    }
    if (auto f = write_transport_failure(o)) {
        out.writes.assign(items.size(), write_mapping{false, false, std::move(*f)});
        const bool unsent = o.t == exec_outcome::transport::failed_unsent ||
                            o.t == exec_outcome::transport::timeout_unsent;
        for (auto& t : out.txns)
            t = txn_failure(
                unsent ? unavailable<txn_result>("database unavailable: " + o.error +
                                                 "; nothing was applied")
                       : failure<txn_result>(
                             errc::outcome_unknown,
                             "database connection lost after the transaction was sent; it may "
                             "or may not have been applied (a retry with the same "
                             "Idempotency-Key tells)"));
        co_return out;
    }
    bool shape_ok = o.results.size() == steps.size() + 1 &&
                    o.results.back().st == result_table::status::pipeline_sync;
    for (std::size_t i = 0; shape_ok && i < steps.size(); ++i)
        shape_ok = o.results[i].ok();
    if (!shape_ok) {
        write_mapping m;
        m.result = failure<write_result>(errc::internal, "unexpected batch result");
        out.writes.assign(items.size(), m);
        for (auto& t : out.txns)
            t = txn_failure(failure<txn_result>(errc::internal, "unexpected batch result"));
        co_return out;
    }
    // Committed at the Sync.
    if (!items.empty()) {
        exec_outcome batch;
        batch.results = {o.results[0], o.results[batch_at], o.results.back()};
        out.writes = map_batch(batch, rows, 1);
    }
    for (std::size_t i = 0; i < txns.size(); ++i) {
        auto checks = map_txn_checks(o.results[txn_at[i]], txns[i]->ops);
        switch (checks.what) {
        case txn_checks::outcome::passed: {
            txn_answer a;
            a.attempt.result.results_json = render_txn_results(txns[i]->ops, checks.results);
            a.attempt.results = std::move(checks.results);
            out.txns[i] = std::move(a);
            break;
        }
        case txn_checks::outcome::refused:
            out.txns[i] = txn_failure(std::move(checks.refusal));
            break;
        case txn_checks::outcome::rerun:
            out.txns[i] = standalone_txn();
            break;
        }
    }
    co_return out;
}

} // namespace fk::store::pg
