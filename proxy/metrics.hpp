#pragma once
// Prometheus metrics (docs/operations.md, "Metrics reference"): a fixed set of counters, gauges and
// histograms whose labels come from small enums, so no label ever names a key or a lock
// and the set of series is bounded at compile time.
//
// Hot path: every observation is a handful of relaxed atomic adds on one of
// `shard_count` cache-line-aligned shards, picked by a per-thread slot; nothing locks
// and nothing allocates. render() sums the shards on scrape. A scrape that races with
// observations may see a histogram's _sum a few observations ahead of or behind its
// buckets; _count always equals the +Inf bucket because both come from the same adds.
//
// Cheap to include: no Boost, no router.hpp (the route enum is declared opaquely here
// and defined in proxy/router.hpp).

#include "backends/commit_stats.hpp"
#include "backends/file_store_health.hpp"
#include "fence/error.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace fk::proxy {

enum class route; // proxy/router.hpp

// writes_total{result}. Every write, delete, fence advance, operation and transaction (one
// write, whatever its op count) that reached the store counts exactly once. Requests rejected
// before the store (bad token or name, 401, 413, 428, shed) are not writes; they show in
// requests_total.
enum class write_outcome : std::uint8_t {
    applied,             // 2xx
    stale,               // 409 stale_token
    precondition_failed, // 412
    error,               // anything else the store answered: lock_mismatch,
                         // operation_failed, unavailable, outcome_unknown, internal,
                         // idempotency_key_reused
    replayed,            // 2xx answered from an Idempotency-Key record: nothing applied
};

// store_duration_seconds{op}
enum class store_op : std::uint8_t {
    put,
    del, // label "delete"
    get, // GET and HEAD of a resource
    fence_advance,
    fence_read,
    fence_list,
    operation,
    floor_raise, // PUT /v1/floors
    floor_list,  // GET /v1/floors
    transaction, // POST /v1/transactions
};

// store_errors_total{kind}
enum class store_error : std::uint8_t { unavailable, outcome_unknown, internal };

// tls_handshake_failures_total{reason}: why a TLS handshake did not complete.
enum class tls_failure : std::uint8_t {
    timeout,     // limits.handshake_timeout_ms passed (a slow or silent client)
    closed,      // the client closed or reset the connection, or a drain ended it
    certificate, // no client certificate, or one (theirs or ours) that did not verify
    protocol,    // anything else: not TLS at all (plain HTTP), no common version or cipher
};

std::string_view to_string(write_outcome r) noexcept;
std::string_view to_string(tls_failure f) noexcept;
std::string_view to_string(store_op op) noexcept;
std::string_view to_string(store_error e) noexcept;

// The write result for a store call's errc: ok → applied, stale_token → stale,
// precondition_failed → precondition_failed, anything else → error.
write_outcome classify_write(errc e) noexcept;

class metrics {
public:
    static constexpr std::size_t shard_count = 16;

    // `version` is exported as fencekeeper_build_info{version="..."} 1.
    explicit metrics(std::string version = "unknown");
    ~metrics();
    metrics(const metrics&) = delete;
    metrics& operator=(const metrics&) = delete;

    // One finished request: requests_total{route,code} and
    // request_duration_seconds{route}. Call once per response sent (including errors,
    // 401 and 503 sheds), with the time from the first byte of the head to the response
    // being handed to the socket.
    void count_request(route r, unsigned status, std::chrono::nanoseconds duration) noexcept;

    // One write that reached the store (see write_outcome).
    void count_write(write_outcome r) noexcept;
    // Convenience for a store call's result: count_write(classify_write(e)), plus
    // lock_mismatch_total when e == lock_mismatch.
    void count_write(errc e) noexcept;
    // stale_token_gap: fence − token of a stale write (fence > token; a smaller fence is
    // recorded as gap 0). Call together with count_write(write_outcome::stale).
    void observe_stale_gap(std::int64_t fence, std::int64_t token) noexcept;
    // Counted by count_write(errc::lock_mismatch); exposed for callers that classify
    // themselves.
    void count_lock_mismatch() noexcept;
    // stale_floor_total: a stale write whose effective fence was set by a fence floor
    // (write_result::floor). Call together with count_write(write_outcome::stale).
    void count_stale_floor() noexcept;

    // store_duration_seconds{op}.
    void observe_store(store_op op, std::chrono::nanoseconds duration) noexcept;
    // store_errors_total{kind}.
    void count_store_error(store_error kind) noexcept;
    // Both of the above from one store call: the duration, and a store error when `e` is
    // unavailable, outcome_unknown or internal (client-caused errors are not store
    // errors).
    void observe_store(store_op op, std::chrono::nanoseconds duration, errc e) noexcept;

    // open_connections gauge; every opened must be matched by one closed.
    void connection_opened() noexcept;
    void connection_closed() noexcept;
    // connections_rejected_total: accepted sockets closed at once by the connection limit.
    void count_connection_rejected() noexcept;

    // tls_handshakes_total: handshakes completed; tls_handshake_failures_total{reason}.
    void count_tls_handshake() noexcept;
    void count_tls_failure(tls_failure reason) noexcept;

    // inflight_requests gauge: from a complete request head to its response sent.
    void request_started() noexcept;
    void request_finished() noexcept;
    // shed_requests_total: requests answered 503 by the in-flight limit.
    void count_shed() noexcept;

    // store_ready gauge (0/1), asked at every render(). Set once before serving; without
    // a probe the gauge is not exported. The probe must be cheap and thread-safe.
    void set_store_ready_probe(std::function<bool()> probe);
    // store_batch_size histogram, read at every render(). Set once before serving; null
    // (the default) leaves the family out. Must outlive this object's renders.
    void set_batch_stats(const store::commit_stats* stats) noexcept;
    // The file store's flush backlog and checkpoints (fencekeeper_file_*); null: not shown.
    void set_file_health(const store::file_store_health* health) noexcept;

    // The Prometheus text exposition format 0.0.4
    // (Content-Type: text/plain; version=0.0.4; charset=utf-8).
    // requests_total exports only the (route, code) pairs seen at least once; every other
    // family exports all of its label values from the start, so rate() and alerts on
    // them work before the first event.
    std::string render() const;

    // Scope guards for the two gauges; movable so they can live in a coroutine frame.
    class [[nodiscard]] gauge_guard {
    public:
        gauge_guard() = default;
        gauge_guard(gauge_guard&& o) noexcept : m_(std::exchange(o.m_, nullptr)), g_(o.g_) {}
        gauge_guard& operator=(gauge_guard&& o) noexcept;
        ~gauge_guard() { reset(); }
        void reset() noexcept;

    private:
        friend class metrics;
        enum class which : std::uint8_t { connections, inflight };
        gauge_guard(metrics* m, which g) noexcept : m_(m), g_(g) {}
        metrics* m_ = nullptr;
        which g_ = which::connections;
    };
    gauge_guard track_connection() noexcept; // connection_opened() now, closed on destruction
    gauge_guard track_request() noexcept;    // request_started() now, finished on destruction

private:
    struct shard;
    shard& local() noexcept;

    std::unique_ptr<shard[]> shards_;
    std::string version_;
    std::function<bool()> store_ready_;
    const store::commit_stats* batch_stats_ = nullptr;
    const store::file_store_health* file_health_ = nullptr;
};

} // namespace fk::proxy
