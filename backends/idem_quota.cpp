#include "backends/idem_quota.hpp"

#include "backends/log/logging.hpp"

#include <nlohmann/json.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <atomic>

namespace fk::store {

namespace {

std::int64_t unix_ms_now() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::chrono::milliseconds period_for(std::chrono::seconds retention) {
    using ms = std::chrono::milliseconds;
    return std::clamp<ms>(std::chrono::duration_cast<ms>(retention) / 2, ms(1000), ms(10'000));
}

void add(idem_usage::counts& to, const idem_usage::counts& c) {
    to.records += c.records;
    to.bytes += c.bytes;
}

} // namespace

idem_usage::idem_usage(idem_limits limits)
    : limits_(limits), period_(period_for(limits.retention)) {}

bool idem_usage::counted_once() const {
    std::lock_guard lock(mutex_);
    return counted_once_;
}

bool idem_usage::begin_scan_if_due(clock::time_point now) {
    std::lock_guard lock(mutex_);
    if (scanning_ || (last_begin_ && now - *last_begin_ < period_))
        return false;
    scanning_ = true;
    last_begin_ = now;
    // What was recorded until now is in the scan's snapshot (it committed before the scan
    // began); what is recorded from now on may not be.
    for (auto& [scope, e] : scopes_) {
        add(e.before, e.since);
        e.since = {};
    }
    return true;
}

void idem_usage::end_scan(const idem_usage_result& r) {
    std::lock_guard lock(mutex_);
    scanning_ = false;
    if (r.error != errc::ok)
        return;
    counted_once_ = true;
    for (auto& [scope, e] : scopes_) {
        e.scanned = {};
        e.scanned_oldest_ms = 0;
        e.before = {};
        if (e.since.records == 0)
            e.first_recorded_ms = 0;
    }
    for (const auto& row : r.scopes) {
        auto& e = scopes_[row.scope];
        e.scanned = {row.records, row.bytes};
        e.scanned_oldest_ms = row.oldest_ms;
    }
}

void idem_usage::recorded(std::string_view scope, std::uint64_t bytes, std::int64_t committed_ms) {
    std::lock_guard lock(mutex_);
    auto it = scopes_.find(scope);
    if (it == scopes_.end())
        it = scopes_.emplace(std::string{scope}, entry{}).first;
    auto& e = it->second;
    e.since.records += 1;
    e.since.bytes += bytes;
    if (e.first_recorded_ms == 0 || committed_ms < e.first_recorded_ms)
        e.first_recorded_ms = committed_ms;
}

idem_usage::counts idem_usage::of(std::string_view scope) const {
    std::lock_guard lock(mutex_);
    auto it = scopes_.find(scope);
    if (it == scopes_.end())
        return {};
    counts c = it->second.scanned;
    add(c, it->second.before);
    add(c, it->second.since);
    return c;
}

std::optional<std::chrono::seconds> idem_usage::full(std::string_view scope,
                                                     std::int64_t now_ms) const {
    std::lock_guard lock(mutex_);
    auto it = scopes_.find(scope);
    if (it == scopes_.end())
        return std::nullopt;
    const auto& e = it->second;
    counts c = e.scanned;
    add(c, e.before);
    add(c, e.since);
    const bool over = (limits_.max_records != 0 && c.records >= limits_.max_records) ||
                      (limits_.max_bytes != 0 && c.bytes >= limits_.max_bytes);
    if (!over)
        return std::nullopt;
    std::int64_t oldest = e.scanned.records != 0 ? e.scanned_oldest_ms : 0;
    if (oldest == 0 || (e.first_recorded_ms != 0 && e.first_recorded_ms < oldest))
        oldest = e.first_recorded_ms;
    const std::int64_t retention_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(limits_.retention).count();
    const std::int64_t wait_ms = std::max<std::int64_t>(0, oldest + retention_ms - now_ms) +
                                 static_cast<std::int64_t>(period_.count());
    return std::chrono::seconds{std::max<std::int64_t>(1, (wait_ms + 999) / 1000)};
}

idem_quota::idem_quota(net::io_context& io, std::unique_ptr<store> inner, idem_limits limits)
    : io_(io), inner_(std::move(inner)), usage_(std::make_shared<idem_usage>(limits)),
      stopped_(std::make_shared<std::atomic<bool>>(false)) {
    maybe_scan(); // the first count, before the first keyed write needs it
}

void idem_quota::maybe_scan() {
    if (stopped_->load() || !usage_->begin_scan_if_due(idem_usage::clock::now()))
        return;
    // The store outlives the io_context's pending work (proxy/main.cpp destroys that
    // first); after stop() the inner store answers unavailable at once. A failed count
    // (the store is down, or not ready yet after a start) is retried every second until
    // one succeeds, so that a start learns the count without waiting for a keyed write.
    auto scan = [](store* inner, std::shared_ptr<idem_usage> usage,
                   std::shared_ptr<std::atomic<bool>> stopped) -> net::awaitable<void> {
        for (;;) {
            auto r = co_await inner->idempotency_usage();
            if (r.error == errc::ok || stopped->load() || usage->counted_once()) {
                const bool first = r.error == errc::ok && !usage->counted_once();
                usage->end_scan(r);
                if (first) {
                    std::uint64_t records = 0;
                    for (const auto& u : r.scopes)
                        records += u.records;
                    logging::write(logging::level::info, "idempotency records counted",
                                   {{"clients", r.scopes.size()}, {"records", records}});
                }
                co_return;
            }
            // Still the same scan, begun before this attempt: what was recorded since
            // may count twice until the next one, never not at all.
            net::steady_timer wait(co_await net::this_coro::executor, std::chrono::seconds(1));
            boost::system::error_code ec;
            co_await wait.async_wait(net::redirect_error(net::use_awaitable, ec));
        }
    };
    net::co_spawn(io_, scan(inner_.get(), usage_, stopped_), net::detached);
}

std::optional<std::chrono::seconds> idem_quota::idempotency_records_full(std::string_view scope) {
    maybe_scan();
    return usage_->full(scope, unix_ms_now());
}

void idem_quota::count(const std::optional<idempotency>& idem, errc error, bool replayed,
                       std::size_t results_bytes) {
    if (!idem || error != errc::ok || replayed)
        return;
    usage_->recorded(idem->scope,
                     idem_record_bytes(idem->scope.size(), idem->key.size(), results_bytes),
                     unix_ms_now());
}

namespace {

std::size_t results_bytes(const write_result&) {
    return 0;
}
std::size_t results_bytes(const txn_result& r) {
    return r.results_json.size();
}
std::size_t results_bytes(const operation_result& r) {
    return r.rows_json.size();
}

} // namespace

template <class R, class Req>
net::awaitable<R> idem_quota::counted(Req req, net::awaitable<R> (store::*call)(Req)) {
    auto idem = req.idem;
    auto r = co_await ((*inner_).*call)(std::move(req));
    count(idem, r.error, r.replayed, results_bytes(r));
    co_return r;
}

net::awaitable<write_result> idem_quota::put(put_request req) {
    return counted(std::move(req), &store::put);
}

net::awaitable<write_result> idem_quota::remove(delete_request req) {
    return counted(std::move(req), &store::remove);
}

net::awaitable<write_result> idem_quota::advance_fence(fence_request req) {
    return counted(std::move(req), &store::advance_fence);
}

net::awaitable<write_result> idem_quota::raise_floor(floor_request req) {
    return counted(std::move(req), &store::raise_floor);
}

net::awaitable<txn_result> idem_quota::transact(txn_request req) {
    // A transaction of guards only comes without its key (proxy/routes/transactions.cpp,
    // txn_idempotency_of): nothing recorded, nothing counted.
    return counted(std::move(req), &store::transact);
}

net::awaitable<operation_result> idem_quota::run_operation(operation_request req) {
    return counted(std::move(req), &store::run_operation);
}

void idem_quota::stop() {
    stopped_->store(true);
    inner_->stop();
}

} // namespace fk::store
