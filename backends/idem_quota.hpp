#pragma once
// The bound on the Idempotency-Key records each caller holds (idempotency.
// max_records_per_client, max_bytes_per_client; docs/api.md, "Records per client").
// A record lives for the retention; without a bound, a client could make the store keep
// records without end (a keyed write of any kind records its outcome). The HTTP side asks
// idempotency_records_full(scope) before a keyed write; when the caller is full and has no
// record under the key (a retry of a recorded request is always answered), it refuses
// with 429 and Retry-After. Nothing is written then.
//
// How a scope's usage is known, without a counter row every keyed write would update:
// the usage is the last scan of the store's records (store::idempotency_usage, one pass,
// at most every scan_period, started by a check that finds it due) plus the records this
// process committed since that scan began. One proxy therefore never undercounts (a
// record committed while a scan runs may count twice until the next one); proxies that
// share a Postgres database each see the others' records at their next scan, so together
// they may exceed the bound by what the others record within one scan period.

#include "backends/store.hpp"

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace fk::store {

struct idem_limits {
    std::uint64_t max_records = 0; // per scope; 0: no bound
    std::uint64_t max_bytes = 0;   // per scope, as idem_record_bytes counts; 0: no bound
    std::chrono::seconds retention{86'400};
    bool any() const noexcept { return max_records != 0 || max_bytes != 0; }
};

// The accounting alone: no I/O, any thread.
class idem_usage {
public:
    using clock = std::chrono::steady_clock;
    explicit idem_usage(idem_limits limits);

    // How often a scan runs at most: 10 s, or half the retention when that is shorter (at
    // least 1 s), so that expired records leave the count soon after they expire.
    std::chrono::milliseconds scan_period() const noexcept { return period_; }
    // A scan is due (none running, none began within scan_period): true, and it counts as
    // begun from now. Every begun scan must end with end_scan.
    bool begin_scan_if_due(clock::time_point now);
    // A scan's result: on ok it replaces the scanned part of every scope; on a failure the
    // counts stay as they were and the next scan is due after scan_period.
    void end_scan(const idem_usage_result& r);
    // A scan has succeeded since the start.
    bool counted_once() const;
    // This process committed a record of `bytes` for `scope`, at Unix ms `committed_ms`.
    void recorded(std::string_view scope, std::uint64_t bytes, std::int64_t committed_ms);
    // Full: about how long until `scope` may record again (the oldest record's expiry,
    // plus a scan period for the count to learn it; at least 1 s); nullopt: not full.
    std::optional<std::chrono::seconds> full(std::string_view scope, std::int64_t now_ms) const;

    struct counts {
        std::uint64_t records = 0;
        std::uint64_t bytes = 0;
    };
    counts of(std::string_view scope) const;

private:
    struct entry {
        counts scanned; // the last scan
        std::int64_t scanned_oldest_ms = 0;
        counts before;                      // recorded before the running scan began
        counts since;                       // recorded since it began (or since the last one)
        std::int64_t first_recorded_ms = 0; // the oldest of before and since
    };

    idem_limits limits_;
    std::chrono::milliseconds period_;
    mutable std::mutex mutex_;
    std::map<std::string, entry, std::less<>> scopes_; // client names, or ""
    bool scanning_ = false;
    bool counted_once_ = false;
    std::optional<clock::time_point> last_begin_;
};

// A store that bounds its callers' records: every call goes to `inner`; the keyed writes
// that applied are counted, and scans are started on `io`.
class idem_quota final : public store {
public:
    idem_quota(net::io_context& io, std::unique_ptr<store> inner, idem_limits limits);

    net::awaitable<write_result> put(put_request req) override;
    net::awaitable<write_result> remove(delete_request req) override;
    net::awaitable<object_result> get(std::string key, bool with_body) override {
        return inner_->get(std::move(key), with_body);
    }
    net::awaitable<write_result> advance_fence(fence_request req) override;
    net::awaitable<fence_result> read_fence(std::string lock) override {
        return inner_->read_fence(std::move(lock));
    }
    net::awaitable<list_result> list_fences(list_request req) override {
        return inner_->list_fences(std::move(req));
    }
    net::awaitable<write_result> raise_floor(floor_request req) override;
    net::awaitable<floors_result> list_floors() override { return inner_->list_floors(); }
    net::awaitable<txn_result> transact(txn_request req) override;
    bool supports_operations() const noexcept override { return inner_->supports_operations(); }
    net::awaitable<operation_result> run_operation(operation_request req) override;
    std::optional<std::size_t> operation_param_count(const std::string& name) const override {
        return inner_->operation_param_count(name);
    }
    bool has_operation(const std::string& name) const override {
        return inner_->has_operation(name);
    }
    net::awaitable<idem_usage_result> idempotency_usage() override {
        return inner_->idempotency_usage();
    }
    net::awaitable<idem_presence> has_idempotency_record(std::string scope,
                                                         std::string key) override {
        return inner_->has_idempotency_record(std::move(scope), std::move(key));
    }
    std::optional<std::chrono::seconds> idempotency_records_full(std::string_view scope) override;
    bool ready() const noexcept override { return inner_->ready(); }
    const commit_stats* batches() const noexcept override { return inner_->batches(); }
    const file_store_health* file_health() const noexcept override { return inner_->file_health(); }
    void stop() override;

private:
    // `call` on the inner store, then count its record when it applied under a key.
    template <class R, class Req>
    net::awaitable<R> counted(Req req, net::awaitable<R> (store::*call)(Req));
    // Starts a scan when one is due.
    void maybe_scan();
    // After a write's answer: a record was committed when it applied under a key.
    void count(const std::optional<idempotency>& idem, errc error, bool replayed,
               std::size_t results_bytes);

    net::io_context& io_;
    std::unique_ptr<store> inner_;
    std::shared_ptr<idem_usage> usage_;
    std::shared_ptr<std::atomic<bool>> stopped_;
};

} // namespace fk::store
