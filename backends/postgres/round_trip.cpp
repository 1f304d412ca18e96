#include "backends/postgres/round_trip.hpp"

#include "backends/log/logging.hpp"
#include "backends/postgres/detail/batch_queue.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace fk::store::pg {

bool round_trip::observe(std::string_view server, duration took) {
    const std::int64_t ns = std::max<std::int64_t>(
        1, std::chrono::duration_cast<std::chrono::nanoseconds>(took).count());
    const std::lock_guard lock(mutex_);
    const std::int64_t old = ns_.load(std::memory_order_relaxed);
    if (old == 0 || server != server_) {
        // First measurement, or the pool now talks to another server: what was measured
        // before says nothing about this one.
        server_.assign(server);
        ns_.store(ns, std::memory_order_relaxed);
        return true;
    }
    if (ns >= old)
        return false;
    ns_.store(ns, std::memory_order_relaxed);
    return detail::is_far(far_, std::chrono::nanoseconds(old)) !=
           detail::is_far(far_, std::chrono::nanoseconds(ns));
}

round_trip::duration round_trip::fastest() const noexcept {
    return std::chrono::nanoseconds(ns_.load(std::memory_order_relaxed));
}

bool round_trip::far() const noexcept {
    return detail::is_far(far_, fastest());
}

round_trip::duration round_trip::overlap_after() const noexcept {
    return detail::overlap_after(batch_overlap_, far_, fastest());
}

net::awaitable<std::string> round_trip::measure(detail::connection& c, detail::millis timeout) {
    const auto start = std::chrono::steady_clock::now();
    auto ping = co_await c.exec_simple(std::string(), timeout);
    if (ping.t != exec_outcome::transport::ok)
        co_return "round trip: " +
            (ping.error.empty() ? std::string("connection lost") : ping.error);
    if (!observe(c.server(), std::chrono::steady_clock::now() - start))
        co_return std::string();
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(fastest()).count();
    const auto after = std::chrono::duration_cast<std::chrono::microseconds>(overlap_after());
    logging::write(logging::level::info, "postgres round trip",
                   {{"endpoint", c.endpoint()},
                    {"server", c.server()},
                    {"round_trip_ms", static_cast<double>(ns) / 1e6},
                    {"far", far()},
                    {"second_batch_after_ms", static_cast<double>(after.count()) / 1e3}});
    co_return std::string();
}

detail::millis reconnect_backoff(int failures, std::uint32_t random) noexcept {
    const int shift = std::clamp(failures - 1, 0, 6);
    const auto base = std::min<long long>(100LL << shift, 5000);
    return detail::millis(base / 2 + static_cast<long long>(random % (base / 2 + 1)));
}

} // namespace fk::store::pg
