#pragma once
// The background removal of expired Idempotency-Key records (idempotency.retention_s): a
// loop on the pool strand that, every period, deletes expired records in steps of at most
// `step` rows (sql::idem_expire_sql, one short statement on a pooled connection each,
// released at once), repeating while a step comes back full, then idles. Records are
// treated as absent once expired whether or not they are removed yet, so the sweep only
// bounds the table's size; every proxy on a database sweeps (SKIP LOCKED keeps them out
// of each other's way). start() and stop() are safe from any thread; never blocks.

#include "backends/postgres/pool.hpp"

#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstddef>
#include <memory>

namespace fk::store::pg {

// How long the sweep idles between rounds: half the retention, 1 s to 60 s (a short
// retention, as tests use, is swept soon after it ends).
std::chrono::milliseconds expiry_period(std::chrono::seconds retention) noexcept;

inline constexpr std::size_t expiry_step = 1000;

class idem_expiry : public std::enable_shared_from_this<idem_expiry> {
public:
    idem_expiry(std::shared_ptr<pool> p, std::chrono::seconds retention);
    void start();
    void stop();

private:
    net::awaitable<void> loop();

    std::shared_ptr<pool> pool_;
    std::chrono::seconds retention_;
    net::steady_timer timer_; // pool strand
};

} // namespace fk::store::pg
