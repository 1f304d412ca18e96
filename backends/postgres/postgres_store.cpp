// The Postgres store's facade: turns store calls into pool, write batcher and operations
// calls, and keeps the fence cache (fence_cache.hpp) in step with what the database
// answered. It owns no connection and no strand: pool.hpp, write_batcher.hpp,
// operations.hpp, schema.hpp and round_trip.hpp own those roles. Its coroutines run on
// the caller's executor and never block.

#include "backends/postgres/postgres_store.hpp"

#include "backends/fence_cache.hpp"
#include "backends/floor_names.hpp"
#include "backends/log/logging.hpp"
#include "backends/postgres/floors.hpp"
#include "backends/postgres/idem_expiry.hpp"
#include "backends/postgres/operations.hpp"
#include "backends/postgres/pool.hpp"
#include "backends/postgres/result.hpp"
#include "backends/postgres/round_trip.hpp"
#include "backends/postgres/schema.hpp"
#include "backends/postgres/sql.hpp"
#include "backends/postgres/transactions.hpp"
#include "backends/postgres/write_batcher.hpp"
#include "backends/writes_in_flight.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>

#include <libpq-fe.h>

namespace fk::store {
namespace {

using pg::unavailable;

class postgres_store final : public store {
public:
    postgres_store(net::io_context& io, const config::settings& s)
        : cache_(s.postgres.fence_cache_size),
          ops_(std::make_shared<pg::operations>(s.operations, s.postgres.statement_timeout +
                                                                  pg::detail::millis(1000))),
          round_trip_(std::make_shared<pg::round_trip>(
              std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                  s.postgres.batch_overlap),
              std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                  s.postgres.far_round_trip))),
          pool_(std::make_shared<pg::pool>(
              io, s,
              std::make_shared<const pg::schema>(s.postgres.schema, s.postgres.connect_timeout,
                                                 s.postgres.statement_timeout),
              ops_, round_trip_)),
          batcher_(s.postgres.batch_max > 1
                       ? std::make_shared<pg::write_batcher>(pool_, round_trip_, s.postgres,
                                                             s.idempotency.retention)
                       : nullptr),
          retention_(s.idempotency.retention),
          expiry_(std::make_shared<pg::idem_expiry>(pool_, s.idempotency.retention)) {
        pool_->start();
        expiry_->start();
    }
    ~postgres_store() override { stop(); }

    net::awaitable<write_result> put(put_request req) override {
        if (auto s = co_await refused_from_cache(req.key, req.lock, req.token, req.idem, true))
            co_return std::move(*s);
        const auto writing = in_flight_.begin(req.lock);
        const pg::sql::batch_item item{req.key,  req.lock,         req.token, false,
                                       req.body, req.content_type, req.pre,   idem_of(req.idem)};
        write_result r;
        if (batcher_) {
            r = co_await batcher_->submit(item);
        } else if (req.idem) {
            r = co_await write_alone(item);
        } else {
            const auto params = pg::sql::put_params(req);
            r = co_await write(pg::sql::name::put, params, req.token, true, false);
        }
        observe(req.key, req.lock, r, true);
        co_return r;
    }

    net::awaitable<write_result> remove(delete_request req) override {
        if (auto s = co_await refused_from_cache(req.key, req.lock, req.token, req.idem, false))
            co_return std::move(*s);
        const auto writing = in_flight_.begin(req.lock);
        const pg::sql::batch_item item{req.key, req.lock, req.token, true,
                                       {},      {},       req.pre,   idem_of(req.idem)};
        write_result r;
        if (batcher_) {
            r = co_await batcher_->submit(item);
        } else if (req.idem) {
            r = co_await write_alone(item);
        } else {
            const auto params = pg::sql::delete_params(req);
            r = co_await write(pg::sql::name::remove, params, req.token, false, false);
        }
        observe(req.key, req.lock, r, false);
        co_return r;
    }

    net::awaitable<object_result> get(std::string key, bool with_body) override {
        const auto params = pg::sql::key_params(key);
        auto o = co_await pool_->run(with_body ? pg::sql::name::get_body : pg::sql::name::get_meta,
                                     params, true);
        auto r = pg::map_get(o, with_body);
        if (r.error == errc::ok)
            cache_.observe_key(key, r.lock);
        co_return r;
    }

    net::awaitable<write_result> advance_fence(fence_request req) override {
        const std::string lock = std::move(req.lock);
        const token_t token = req.token;
        // As for resource writes (refused_from_cache): advance_idem_sql looks for the
        // record itself; a separate look-up only when the cache would refuse.
        if (auto bound = settled_bound(lock, token)) {
            if (req.idem)
                if (auto answer = co_await answer_from_record(*req.idem, false))
                    co_return std::move(*answer);
            co_return stale<write_result>(lock, *bound);
        }
        const auto writing = in_flight_.begin(lock);
        const auto params = req.idem
                                ? pg::sql::advance_idem_params(lock, token, *req.idem, retention_)
                                : pg::sql::advance_params(lock, token);
        auto r = co_await write(req.idem ? pg::sql::name::advance_idem : pg::sql::name::advance,
                                params, token, false, true);
        if (r.replayed)
            co_return r;
        observe_fence_of(lock, r);
        co_return r;
    }

    // The effective fence (a floor's when it is higher): a valid rejection bound for the
    // cache either way, since floors only go up.
    net::awaitable<fence_result> read_fence(std::string lock) override {
        const auto params = pg::sql::lock_params(lock);
        auto o = co_await pool_->run(pg::sql::name::read_fence, params, false);
        auto r = pg::map_read_fence(o, lock);
        if (r.error == errc::ok)
            observe_effective(lock, r.fence.token, r.fence.floor);
        co_return r;
    }

    // The cache needs nothing from a raise: it only ever refuses below fences the
    // database reported, and a write the new floor refuses goes to the database, whose
    // answer (the effective fence) the cache then keeps.
    net::awaitable<write_result> raise_floor(floor_request req) override {
        const auto writing = in_flight_.begin_every_lock();
        for (int attempt = 1;; ++attempt) {
            auto a = co_await pool_->acquire();
            if (!a.conn)
                co_return unavailable<write_result>("database unavailable: " + a.why);
            auto m = co_await net::co_spawn(
                a.conn->strand(),
                pg::raise_floor_on(*a.conn, req, retention_, pool_->query_timeout()),
                net::use_awaitable);
            pool_->release(a.conn);
            if (!m.retry) {
                if (m.result.error == errc::ok)
                    floor_names_.learn(req.prefix, m.result.token);
                co_return std::move(m.result);
            }
            if (attempt == pg::max_write_attempts)
                co_return unavailable<write_result>(
                    "concurrent requests kept racing for the Idempotency-Key; nothing was "
                    "applied");
        }
    }

    net::awaitable<floors_result> list_floors() override {
        static const pg::sql::param_list none;
        auto o = co_await pool_->run(pg::sql::name::list_floors, none, false);
        auto r = pg::map_list_floors(o);
        for (const auto& f : r.floors)
            floor_names_.learn(f.prefix, f.token);
        co_return r;
    }

    net::awaitable<list_result> list_fences(list_request req) override {
        const auto q = pg::sql::list_params(req);
        auto o = co_await pool_->run(q.statement, q.params, false);
        co_return pg::map_list(o, req.limit);
    }

    // A transaction without operations or Idempotency-Key joins a group-commit batch
    // (write_batcher::submit_txn); one with them, or one the batch did not decide, is one
    // explicit database transaction on a pooled connection (transactions.hpp): it may run
    // operations' statements between its checks and its commit, and claims its record in
    // the commit's round trip (docs/postgres.md, "Transactions"). The fence cache refuses
    // nothing here: the first failing op in op order decides, and the cache cannot know
    // the ops before it.
    net::awaitable<txn_result> transact(txn_request req) override {
        std::vector<const pg::operations::entry*> entries(req.ops.size(), nullptr);
        bool has_operations = false;
        for (std::size_t i = 0; i < req.ops.size(); ++i) {
            if (req.ops[i].op != txn_op::kind::operation)
                continue;
            has_operations = true;
            entries[i] = ops_->find(req.ops[i].name);
            if (!entries[i]) {
                auto r = pg::failure<txn_result>(errc::invalid_request,
                                                 "no operation '" + req.ops[i].name + "'");
                r.op_index = i;
                co_return r;
            }
        }
        const auto writing = writes_of(req.ops);
        if (batcher_ && !has_operations && !req.idem) {
            auto b = co_await batcher_->submit_txn(req);
            if (!b.standalone) {
                observe_txn(req.ops, b.attempt);
                co_return std::move(b.attempt.result);
            }
        }
        for (int attempt = 1; attempt <= pg::max_write_attempts; ++attempt) {
            // Before anything else, and again after a re-run (a record under the key may
            // have committed meanwhile: it answers then).
            if (req.idem) {
                auto l = co_await txn_record(*req.idem);
                if (l.error != errc::ok)
                    co_return pg::failure<txn_result>(l.error, std::move(l.message));
                if (l.record)
                    co_return pg::replay_txn(*l.record, req.idem->fingerprint);
            }
            auto a = co_await pool_->acquire();
            if (!a.conn)
                co_return unavailable<txn_result>("database unavailable: " + a.why);
            auto t = co_await net::co_spawn(
                a.conn->strand(),
                pg::run_txn_on(*a.conn, *ops_, entries, req, retention_, pool_->query_timeout()),
                net::use_awaitable);
            pool_->release(a.conn);
            if (t.rerun)
                continue;
            observe_txn(req.ops, t);
            // A keyed transaction refused because a request under the same key committed
            // meanwhile (its operation inserted the same row first, say: the refusal comes
            // before our record's claim would have raised FKR01) is answered from that
            // record, as a claim that lost the race is.
            if (req.idem && t.result.error != errc::ok && t.result.error != errc::outcome_unknown) {
                auto l = co_await txn_record(*req.idem);
                if (l.error == errc::ok && l.record)
                    co_return pg::replay_txn(*l.record, req.idem->fingerprint);
            }
            co_return std::move(t.result);
        }
        co_return unavailable<txn_result>(
            "concurrent transactions or writes kept racing for the same keys, locks or "
            "Idempotency-Key; nothing was applied");
    }
    bool supports_operations() const noexcept override { return true; }

    std::optional<std::size_t> operation_param_count(const std::string& name) const override {
        return ops_->param_count(name);
    }
    bool has_operation(const std::string& name) const override {
        return ops_->find(name) != nullptr;
    }

    net::awaitable<operation_result> run_operation(operation_request req) override {
        const pg::operations::entry* op = ops_->find(req.name);
        if (!op)
            co_return pg::failure<operation_result>(errc::not_found,
                                                    "no operation '" + req.name + "'");
        if (req.idem)
            co_return co_await run_keyed_operation(*op, std::move(req));
        if (auto bound = settled_bound(req.lock, req.token))
            co_return stale<operation_result>(req.lock, *bound);
        const auto writing = in_flight_.begin(req.lock);
        const std::string lock = req.lock;
        const token_t token = req.token;
        auto a = co_await pool_->acquire();
        if (!a.conn)
            co_return unavailable<operation_result>("database unavailable: " + a.why);
        auto r = co_await net::co_spawn(
            a.conn->strand(), ops_->run_on(*a.conn, *op, std::move(req)), net::use_awaitable);
        pool_->release(a.conn);
        observe_operation(lock, token, r);
        co_return r;
    }

    net::awaitable<idem_usage_result> idempotency_usage() override {
        const pg::sql::param_list params{pg::sql::param::of(std::to_string(retention_.count()))};
        auto o = co_await pool_->run(pg::sql::name::idem_usage, params, false);
        co_return pg::map_idem_usage(o);
    }

    net::awaitable<idem_presence> has_idempotency_record(std::string scope,
                                                         std::string key) override {
        idempotency idem;
        idem.scope = std::move(scope);
        idem.key = std::move(key);
        auto l = co_await txn_record(idem);
        co_return idem_presence{l.error, l.error == errc::ok && l.record.has_value(),
                                std::move(l.message)};
    }

    bool ready() const noexcept override { return pool_->ready(); }
    const commit_stats* batches() const noexcept override {
        return batcher_ ? &batcher_->sizes() : &no_batches_;
    }
    void stop() override {
        if (batcher_)
            batcher_->stop();
        expiry_->stop();
        pool_->stop();
    }

private:
    // The fence that makes `token` stale for `lock`, from the cache, when it is the
    // effective fence at this moment as far as this process can tell (writes_in_flight.hpp):
    // no write of the lock (or floor raise) was in flight while the cache was read. The
    // effective fence is the higher of the lock's own and the highest floor over it this
    // process has learned.
    std::optional<token_t> settled_bound(const std::string& lock, token_t token) {
        const auto quiet = in_flight_.quiet(lock);
        if (!quiet)
            return std::nullopt;
        auto bound = cache_.stale_bound(lock, token);
        if (!bound || !in_flight_.still(lock, *quiet))
            return std::nullopt;
        if (auto floor = floor_names_.highest(lock); floor && *floor > *bound)
            bound = floor;
        return bound;
    }

    // The locks whose fences a transaction's ops may move, each in flight once.
    std::vector<writes_in_flight::guard> writes_of(const std::vector<txn_op>& ops) {
        std::vector<writes_in_flight::guard> out;
        std::vector<std::string_view> seen;
        for (const auto& op : ops) {
            if (op.op == txn_op::kind::check || op.op == txn_op::kind::check_version)
                continue;
            if (std::find(seen.begin(), seen.end(), op.lock) != seen.end())
                continue;
            seen.push_back(op.lock);
            out.push_back(in_flight_.begin(op.lock));
        }
        return out;
    }

    // A write whose outcome this process does not know may have moved the fence: the
    // cache forgets it, and the database answers the lock's next rejection.
    void forget_if_unknown(const std::string& lock, errc e) {
        if (e == errc::outcome_unknown || e == errc::internal)
            cache_.forget_fence(lock);
    }

    // A fence advance's answer.
    void observe_fence_of(const std::string& lock, const write_result& r) {
        if (r.replayed)
            return;
        if (r.error == errc::ok)
            cache_.observe_fence(lock, r.token);
        else if (r.error == errc::stale_token)
            observe_effective(lock, r.current_token, r.floor);
        forget_if_unknown(lock, r.error);
    }

    // A rejection from the fence cache. The proxy words the reply
    // (proxy/error_response.cpp): the store reports the fence, and the floor that set it
    // when this proxy has learned one with exactly that token (floor_names.hpp).
    template <class R> R stale(std::string_view lock, token_t fence) const {
        R r;
        r.error = errc::stale_token;
        r.current_token = fence;
        r.floor = floor_names_.name_for(lock, fence);
        return r;
    }

    // A fence the database reported for `lock` (a rejection's, or a read's: the effective
    // one), and the floor that set it, if one did.
    void observe_effective(const std::string& lock, token_t fence,
                           const std::optional<std::string>& floor) {
        cache_.observe_fence(lock, fence);
        if (floor)
            floor_names_.learn(*floor, fence);
    }

    // Answered from the cache only when the key is known to belong to `lock`: otherwise
    // the database must decide, since lock_mismatch comes before stale_token.
    std::optional<write_result> cached_stale(const std::string& key, const std::string& lock,
                                             token_t token) {
        if (auto bound = settled_bound(lock, token))
            if (cache_.key_known_under(key, lock))
                return stale<write_result>(lock, *bound);
        return std::nullopt;
    }

    // The answer to a resource write without a database write, if there is one: the
    // cache knows it is stale. A keyed write that the cache would refuse is answered from
    // its record first, if it has one (the replay tells what happened then, even though
    // the fence has moved on since). Every other keyed write goes to the batch, whose
    // statement looks for the record itself, in the write's transaction: a separate
    // look-up first would cost every keyed write a round trip (measured: keyed writes at
    // about half the rate of unkeyed ones with it).
    net::awaitable<std::optional<write_result>>
    refused_from_cache(const std::string& key, const std::string& lock, token_t token,
                       const std::optional<idempotency>& idem, bool is_put) {
        auto s = cached_stale(key, lock, token);
        if (!s || !idem)
            co_return s;
        if (auto answer = co_await answer_from_record(*idem, is_put))
            co_return answer;
        co_return s;
    }

    // One write as its own statement (batch_max 1, and fence advances), re-run when it
    // lost a create race.
    net::awaitable<write_result> write(const char* statement, const pg::sql::param_list& params,
                                       token_t token, bool is_put, bool is_advance) {
        for (int attempt = 1;; ++attempt) {
            auto o = co_await pool_->run(statement, params, false);
            auto m = pg::map_write(o, token, is_put, is_advance);
            if (!m.retry)
                co_return m.result;
            if (attempt == pg::max_write_attempts)
                co_return unavailable<write_result>(
                    "concurrent writers kept racing for the key; nothing was written");
        }
    }

    static const idempotency* idem_of(const std::optional<idempotency>& idem) {
        return idem ? &*idem : nullptr;
    }

    // The answer of `idem`'s unexpired record (replayed, or idempotency_key_reused), or
    // of a failed lookup; nullopt when there is no record and the write goes ahead. A
    // plain read on a pooled connection: no transaction, not through the batch queue.
    net::awaitable<std::optional<write_result>> answer_from_record(const idempotency& idem,
                                                                   bool is_put) {
        const auto params = pg::sql::idem_get_params(idem, retention_);
        auto o = co_await pool_->run(pg::sql::name::idem_get, params, true);
        auto l = pg::map_idem_get(o);
        if (l.error != errc::ok)
            co_return pg::failure<write_result>(l.error, std::move(l.message));
        if (!l.record)
            co_return std::nullopt;
        co_return pg::replay_write(*l.record, idem.fingerprint, is_put);
    }

    // A keyed put or delete with batch_max 1: as a batch of one (write_batch_sql holds
    // the record logic), re-run when it lost a race.
    net::awaitable<write_result> write_alone(const pg::sql::batch_item& item) {
        for (int attempt = 1;; ++attempt) {
            auto a = co_await pool_->acquire();
            if (!a.conn)
                co_return unavailable<write_result>("database unavailable: " + a.why);
            std::vector<pg::sql::batch_item> items{item};
            auto maps = co_await net::co_spawn(
                a.conn->strand(),
                pg::write_batcher::run_batch_on(a.conn, std::move(items), pool_->query_timeout(),
                                                retention_),
                net::use_awaitable);
            pool_->release(a.conn);
            auto& m = maps.front();
            if (!m.retry)
                co_return std::move(m.result);
            if (attempt == pg::max_write_attempts)
                co_return unavailable<write_result>(
                    "concurrent writers kept racing for the key; nothing was written");
        }
    }

    // A keyed named operation: its record answers first; else it runs with the record in
    // its transaction, and when another request under the key committed first, its
    // record answers after all.
    net::awaitable<operation_result> run_keyed_operation(const pg::operations::entry& op,
                                                         operation_request req) {
        for (int attempt = 1; attempt <= pg::max_write_attempts; ++attempt) {
            const auto params = pg::sql::idem_get_params(*req.idem, retention_);
            auto o = co_await pool_->run(pg::sql::name::idem_get, params, true);
            auto l = pg::map_idem_get(o);
            if (l.error != errc::ok)
                co_return pg::failure<operation_result>(l.error, std::move(l.message));
            if (l.record)
                co_return pg::replay_operation(*l.record, req.idem->fingerprint);
            if (auto bound = settled_bound(req.lock, req.token))
                co_return stale<operation_result>(req.lock, *bound);
            const auto writing = in_flight_.begin(req.lock);
            auto a = co_await pool_->acquire();
            if (!a.conn)
                co_return unavailable<operation_result>("database unavailable: " + a.why);
            auto r = co_await net::co_spawn(a.conn->strand(),
                                            ops_->run_keyed_on(*a.conn, op, req, retention_),
                                            net::use_awaitable);
            pool_->release(a.conn);
            if (r) {
                observe_operation(req.lock, req.token, *r);
                // Refused because a request under the same key committed meanwhile (its
                // statement inserted the same unique row first, say: the refusal comes
                // before our record's claim would have raised FKR01): answered from that
                // record, as a claim that lost the race is (as transact does).
                if (r->error != errc::ok && r->error != errc::outcome_unknown) {
                    auto again = co_await pool_->run(pg::sql::name::idem_get, params, true);
                    auto l2 = pg::map_idem_get(again);
                    if (l2.error == errc::ok && l2.record)
                        co_return pg::replay_operation(*l2.record, req.idem->fingerprint);
                }
                co_return std::move(*r);
            }
        }
        co_return unavailable<operation_result>(
            "concurrent requests kept racing for the Idempotency-Key; nothing was applied");
    }

    // The unexpired record under `idem`, if any: a plain read on a pooled connection.
    net::awaitable<pg::idem_lookup> txn_record(const idempotency& idem) {
        const auto params = pg::sql::idem_get_params(idem, retention_);
        auto o = co_await pool_->run(pg::sql::name::idem_get, params, true);
        co_return pg::map_idem_get(o);
    }

    // After a transaction's answer, as single writes do: its committed fences and key
    // bindings, or what refused it.
    void observe_txn(const std::vector<txn_op>& ops, const pg::txn_attempt& t) {
        const auto& r = t.result;
        if (r.error == errc::ok) {
            for (std::size_t i = 0; i < ops.size() && i < t.results.size(); ++i) {
                const auto& op = ops[i];
                switch (op.op) {
                case txn_op::kind::put:
                    cache_.observe_fence(op.lock, t.results[i].token);
                    cache_.observe_key(op.key, op.lock);
                    break;
                case txn_op::kind::remove:
                    cache_.observe_fence(op.lock, t.results[i].token);
                    cache_.forget_key(op.key);
                    break;
                case txn_op::kind::fence:
                case txn_op::kind::operation:
                    cache_.observe_fence(op.lock, t.results[i].token);
                    break;
                case txn_op::kind::check:
                case txn_op::kind::check_version:
                    break;
                }
            }
            return;
        }
        if (r.error == errc::outcome_unknown || r.error == errc::internal) {
            for (const auto& op : ops)
                if (!op.lock.empty())
                    cache_.forget_fence(op.lock);
            return;
        }
        if (!r.op_index || *r.op_index >= ops.size())
            return;
        const auto& op = ops[*r.op_index];
        if (r.error == errc::stale_token)
            observe_effective(op.lock, r.current_token, r.floor);
        else if (r.error == errc::lock_mismatch)
            cache_.observe_key(op.key, r.lock);
    }

    void observe_operation(const std::string& lock, token_t token, const operation_result& r) {
        if (r.error == errc::ok)
            cache_.observe_fence(lock, token);
        else if (r.error == errc::stale_token)
            observe_effective(lock, r.current_token, r.floor);
        forget_if_unknown(lock, r.error);
    }

    void observe(const std::string& key, const std::string& lock, const write_result& r,
                 bool is_put) {
        // A replay tells what happened then, not what holds now.
        if (r.replayed)
            return;
        switch (r.error) {
        case errc::ok:
            cache_.observe_fence(lock, r.token);
            if (is_put)
                cache_.observe_key(key, lock);
            else
                cache_.forget_key(key);
            break;
        case errc::stale_token:
            observe_effective(lock, r.current_token, r.floor);
            break;
        case errc::lock_mismatch:
            cache_.observe_key(key, r.lock);
            break;
        default:
            forget_if_unknown(lock, r.error);
            break;
        }
    }

    fence_cache cache_;
    floor_names floor_names_;    // names the floor in the cache's rejections
    writes_in_flight in_flight_; // when the cache's fence is the fence (settled_bound)
    std::shared_ptr<pg::operations> ops_;
    std::shared_ptr<pg::round_trip> round_trip_;
    std::shared_ptr<pg::pool> pool_;
    std::shared_ptr<pg::write_batcher> batcher_; // null with batch_max 1
    std::chrono::seconds retention_;             // idempotency.retention
    std::shared_ptr<pg::idem_expiry> expiry_;
    commit_stats no_batches_;
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
    return std::unique_ptr<store>(std::make_unique<postgres_store>(io, s));
}

} // namespace fk::store
