#pragma once
// Group commit (postgres.batch_max > 1): which PUTs, DELETEs and transactions (those
// without operations or Idempotency-Key) go to the database together, and when. A write
// joins the queue (detail::batch_queue decides what goes in the next batch); a batch
// runner with a pooled connection sends it, alone when nothing else waits, else with
// whatever accumulated while the previous batch ran (detail::may_start_batch decides
// when a second batch may run beside the first). The statements and the mapping of their
// results are sql/ and result.hpp; the argument for why batches cannot deadlock is in
// sql/batch.cpp.
//
// Threads: submit() and stop() are safe from any thread; everything else, the queue, the
// runners and the timers, lives on the pool's strand. It never blocks and never sends
// anything itself: each batch is one exchange on the connection's strand.

#include "backends/commit_stats.hpp"
#include "backends/postgres/detail/batch_queue.hpp"
#include "backends/postgres/pool.hpp"
#include "backends/postgres/result.hpp"
#include "backends/postgres/sql.hpp"
#include "backends/postgres/transactions.hpp"

#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <deque>
#include <memory>
#include <vector>

namespace fk::store::pg {

class round_trip;

// A concurrent create can make a write statement ask to be re-run (sql/statements.cpp);
// a few attempts always suffice in practice, since each re-run sees the newer state.
inline constexpr int max_write_attempts = 5;

// What becomes of one write of a finished batch, given its mapping, how many attempts it
// has had (this one included) and whether the store is stopping.
enum class batch_outcome { answer, give_up, retry };
batch_outcome after_batch(const write_mapping& m, int attempts, bool stopping) noexcept;

// Whether a runner keeps its connection for another batch: not when the store stops, the
// connection is not reusable, or other requests wait for a connection (reads and
// operations get it first; the one batch runner that may itself be waiting does not
// count, since this runner takes its work).
bool keep_connection(bool stopping, bool reusable, std::size_t waiting,
                     bool runner_waiting) noexcept;

// How often the queue is swept for writes that waited statement_timeout for a
// connection: an eighth of it, 10 to 250 ms (a write gives up at most that late).
std::chrono::milliseconds sweep_period(std::chrono::milliseconds statement_timeout) noexcept;

class write_batcher : public std::enable_shared_from_this<write_batcher> {
public:
    // `idem_retention`: idempotency.retention, for keyed writes.
    write_batcher(std::shared_ptr<pool> p, std::shared_ptr<const round_trip> rt,
                  const config::postgres_settings& s, std::chrono::seconds idem_retention);

    // The write joins the queue; resumes the caller on its own executor with the result.
    // One hop to the pool strand and one back, no coroutine frame or timer per write:
    // this is the hot path of every PUT and DELETE. `item` views the request, which must
    // outlive the call.
    net::awaitable<write_result> submit(const sql::batch_item& item);

    // A transaction without operations or Idempotency-Key joins the next batch: its
    // statement (sql::txn_sql, all-or-nothing by itself) runs in the batch's database
    // transaction after the batch statement and shares its commit (docs/postgres.md,
    // "Transactions share group commit"). `standalone`: the batch did not decide it
    // (aborted by any statement's error, or the answer asks for a re-run); nothing of it
    // was applied, and the caller runs it in a transaction of its own. `req` must outlive
    // the call.
    struct txn_answer {
        bool standalone = false;
        txn_attempt attempt;
    };
    net::awaitable<txn_answer> submit_txn(const txn_request& req);

    // Refuses every queued write and transaction; batches in flight finish.
    void stop();

    // Writes per batch (metrics).
    const commit_stats& sizes() const noexcept { return sizes_; }

    struct job;     // one write waiting for, or in, a batch
    struct txn_job; // one transaction waiting for, or in, a batch

    // On `c`'s strand: one unkeyed write alone as the single-row statement, anything else
    // (several writes, or a keyed one) as [begin, batch, Sync]. Also the store's path for
    // a keyed write with batch_max 1.
    static net::awaitable<std::vector<write_mapping>>
    run_batch_on(pool::conn_ptr c, std::vector<sql::batch_item> items, detail::millis timeout,
                 std::chrono::seconds idem_retention);

    // On `c`'s strand: single writes and transactions (at least one) in one implicit
    // transaction, [begin, batch (with items), lock timeout, txn per transaction, Sync].
    struct mixed_outcome {
        std::vector<write_mapping> writes; // as run_batch_on's
        std::vector<txn_answer> txns;
    };
    static net::awaitable<mixed_outcome> run_mixed_on(pool::conn_ptr c,
                                                      std::vector<sql::batch_item> items,
                                                      std::vector<const txn_request*> txns,
                                                      detail::millis timeout,
                                                      std::chrono::seconds idem_retention);

private:
    using job_ptr = std::shared_ptr<job>;
    using txn_job_ptr = std::shared_ptr<txn_job>;
    void submit_on_strand(job_ptr j);
    void submit_txn_on_strand(txn_job_ptr t);
    void start_sweep();
    std::vector<txn_job_ptr> take_txns();
    void refuse_queued(const std::string& why);
    void enqueue(const job_ptr& j, bool front);
    net::awaitable<void> sweep();
    void spawn_runner_if_needed();
    bool may_start_batch() const;
    void arm_overlap_timer();
    net::awaitable<void> batch_runner();
    std::shared_ptr<pool> pool_;
    std::shared_ptr<const round_trip> round_trip_;
    std::size_t queue_limit_;
    std::size_t max_runners_; // postgres.batch_concurrency
    std::chrono::seconds idem_retention_;
    commit_stats sizes_;
    // All below: pool strand only.
    detail::batch_queue<job_ptr> queue_;
    std::deque<txn_job_ptr> txns_; // first come, first served; each takes one batch place
    bool runner_waiting_ = false;
    std::size_t runners_ = 0;
    std::size_t in_flight_ = 0; // batches in the database
    std::chrono::steady_clock::time_point newest_start_;
    net::steady_timer overlap_timer_;
    bool overlap_armed_ = false;
    bool sweeping_ = false;
};

} // namespace fk::store::pg
