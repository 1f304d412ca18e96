#pragma once
// The connection pool: idle connections, requests waiting for one, the slots that make
// missing connections (connect, set up, back off and retry), which connection migrates
// the schema, and ready(). The bookkeeping itself is detail::pool_state (pure); this type
// adds the I/O around it.
//
// Threads: everything it owns lives on strand() (the pool strand). acquire(), release(),
// run(), start(), stop(), ready() and stopped() are safe from any thread; the members
// marked "pool strand" must be called on strand(). It never blocks: a request waits on a
// timer (statement_timeout at most), and a connection's I/O runs on its own strand.

#include "backends/postgres/detail/connection.hpp"
#include "backends/postgres/detail/pool_state.hpp"
#include "config/settings.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <memory>
#include <set>
#include <string>

namespace fk::store::pg {

class schema;
class operations;
class round_trip;

class pool : public std::enable_shared_from_this<pool> {
public:
    using conn_ptr = std::shared_ptr<detail::connection>;
    using strand_type = detail::connection::strand_type;

    // A connection for one exchange, or why there is none.
    struct acquired {
        conn_ptr conn;
        std::string why; // when conn is null
    };

    // A new connection is usable once `sch` has set it up, `rt` has measured the round
    // trip on it and `ops` has prepared the operations on it.
    pool(net::io_context& io, const config::settings& s, std::shared_ptr<const schema> sch,
         std::shared_ptr<operations> ops, std::shared_ptr<round_trip> rt);

    void start();
    // Refuses every waiter, closes idle and connecting connections, ends the slots.
    void stop();

    bool ready() const noexcept { return ready_.load(std::memory_order_acquire); }
    bool stopped() const noexcept { return stopped_.load(std::memory_order_acquire); }
    const strand_type& strand() const noexcept { return strand_; }

    // From any executor: an idle connection, or one that becomes free or is made within
    // statement_timeout. Refused at once when too many wait or no connection is alive and
    // none is being made.
    net::awaitable<acquired> acquire();
    // From any thread, once the exchange is over.
    void release(conn_ptr c);
    // One prepared statement on a pooled connection, from any executor.
    net::awaitable<exec_outcome> run(const char* statement, const sql::param_list& params,
                                     bool binary_results);

    // Pool strand: release() without the hop.
    void release_on_strand(conn_ptr c);
    // Pool strand: a connection is alive or an attempt is in progress (pool_state).
    bool has_prospect() const noexcept { return state_.has_prospect(); }
    // Pool strand: requests waiting for a connection.
    std::size_t waiting() const noexcept { return state_.waiting(); }

    // The deadline of one exchange: statement_timeout + 1 s, so that the server normally
    // cancels first (a definite error) and ours catches a dead network or a stuck server.
    detail::millis query_timeout() const noexcept { return query_timeout_; }
    detail::millis statement_timeout() const noexcept { return statement_timeout_; }

private:
    struct waiter {
        explicit waiter(const strand_type& ex) : timer(ex) {}
        net::steady_timer timer;
        conn_ptr conn; // set when a connection is handed over
    };
    using waiter_ptr = std::shared_ptr<waiter>;

    net::awaitable<acquired> acquire_on_strand();
    static void hand_over(const detail::pool_state<conn_ptr, waiter_ptr>::handoff& h);
    // Replacements start first, so that waiters wait for them rather than being refused.
    void after_loss();
    static void refuse(const std::vector<waiter_ptr>& waiters);
    void update_ready();
    void top_up();
    // One slot (pool_state): connects, with backoff, until it has a connection to hand
    // over. The first slot also creates or migrates the schema.
    net::awaitable<void> slot();
    // On the connection's strand: connect, then set it up. Empty on success.
    net::awaitable<std::string> set_up(conn_ptr c, bool migrate);
    void log_lost(const detail::connection& c);

    net::io_context& io_;
    strand_type strand_;
    std::shared_ptr<const schema> schema_;
    std::shared_ptr<operations> ops_;
    std::shared_ptr<round_trip> round_trip_;
    std::string conninfo_;
    detail::millis connect_timeout_;
    detail::millis statement_timeout_;
    detail::millis query_timeout_;
    std::atomic<bool> ready_{false};
    std::atomic<bool> stopped_{false};
    detail::pool_state<conn_ptr, waiter_ptr> state_;              // pool strand
    bool migrated_ = false;                                       // pool strand
    std::set<std::shared_ptr<net::steady_timer>> backoff_timers_; // pool strand
    std::set<conn_ptr> connecting_;                               // pool strand
};

} // namespace fk::store::pg
