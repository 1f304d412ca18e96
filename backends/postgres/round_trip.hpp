#pragma once
// The database's round trip and the reconnect backoff: how far away the database is
// (which decides when a second group-commit batch may start, docs/postgres.md "A far
// database") and how long a failed connection attempt waits before the next.
// round_trip is safe from any thread (reads: one atomic; observe: a mutex); it never does
// I/O itself: the pool measures the exchange (measure(), on the connection's strand) and
// reports it here. The estimate belongs to one server: a connection that reached another
// one (a failover through a multi-host URI) starts it over, so a failover to a far server
// turns the far rule on without a restart.

#include "backends/postgres/detail/connection.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

namespace fk::store::pg {

class round_trip {
public:
    using duration = std::chrono::steady_clock::duration;
    // `batch_overlap` and `far`: postgres.batch_overlap_ms and far_round_trip_ms.
    round_trip(duration batch_overlap, duration far) : batch_overlap_(batch_overlap), far_(far) {}

    // An exchange with `server` (host:port of the connection) took `took`. Keeps the
    // fastest exchange seen with the same server (a slower one measured a busy moment, not
    // the network); a measurement from another server than the last one replaces the
    // estimate. True when this is worth a log line: the first measurement, one from a new
    // server, or one that turned the database from far to near or back.
    bool observe(std::string_view server, duration took);
    // The fastest exchange seen; zero while none.
    duration fastest() const noexcept;
    bool far() const noexcept;
    // How long the newest batch in flight must have run before another may start
    // (detail::overlap_after with the measured round trip).
    duration overlap_after() const noexcept;

    // On `c`'s strand, once the session is warm: one empty query, which the database
    // answers without parsing anything, so its time is the network's round trip. Reports
    // it (and logs it when observe() says so). Empty on success, else what failed.
    net::awaitable<std::string> measure(detail::connection& c, detail::millis timeout);

private:
    duration batch_overlap_;
    duration far_;
    std::atomic<std::int64_t> ns_{0}; // fastest exchange with server_; 0 = none yet
    std::mutex mutex_;                // observe(): server_ and ns_ change together
    std::string server_;              // guarded by mutex_
};

// The wait before connection attempt `failures` + 1: 100 ms doubling to 5 s, the upper
// half of it jittered by `random` so that proxies do not reconnect in step.
detail::millis reconnect_backoff(int failures, std::uint32_t random) noexcept;

} // namespace fk::store::pg
