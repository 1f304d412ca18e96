#pragma once
// The database's round trip and the reconnect backoff: how far away the database is
// (which decides when a second group-commit batch may start, docs/postgres.md "A far
// database") and how long a failed connection attempt waits before the next.
// round_trip is safe from any thread (one atomic); it never does I/O itself: the pool
// measures the exchange (measure(), on the connection's strand) and reports it here.

#include "backends/postgres/detail/connection.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace fk::store::pg {

class round_trip {
public:
    using duration = std::chrono::steady_clock::duration;
    // `batch_overlap` and `far`: postgres.batch_overlap_ms and far_round_trip_ms.
    round_trip(duration batch_overlap, duration far) : batch_overlap_(batch_overlap), far_(far) {}

    // Keeps the fastest exchange seen (a slower one measured a busy moment, not the
    // network). True when this is worth a log line: the first measurement, or one that
    // turned the database from far to near or back.
    bool observe(duration took) noexcept;
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
    std::atomic<std::int64_t> ns_{0}; // fastest exchange; 0 = none yet
};

// The wait before connection attempt `failures` + 1: 100 ms doubling to 5 s, the upper
// half of it jittered by `random` so that proxies do not reconnect in step.
detail::millis reconnect_backoff(int failures, std::uint32_t random) noexcept;

} // namespace fk::store::pg
