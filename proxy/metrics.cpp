// The whole exporter in one file, about 670 lines: the label tables, the bucket bounds, the
// per-thread shards and the text rendering all serve one fixed set of series, and read
// best together. docs/operations.md ("Why the exporter is hand-written") says why this is
// not prometheus-cpp.
#include "proxy/metrics.hpp"

#include "proxy/router.hpp"

#include <algorithm>
#include <charconv>
#include <initializer_list>

namespace fk::proxy {

namespace {

using counter = std::atomic<std::uint64_t>;
constexpr auto relaxed = std::memory_order_relaxed;

// ---- label sets -------------------------------------------------------------------

// Label values of the route label: router.hpp's to_string(route), indexed by the enum.
std::size_t route_index(route r) noexcept {
    const auto i = static_cast<std::size_t>(r);
    return i < route_count ? i : static_cast<std::size_t>(route::not_found);
}

constexpr std::array<std::string_view, 5> write_outcome_names = {
    "applied", "stale", "precondition_failed", "error", "replayed"};
constexpr std::array<std::string_view, 10> store_op_names = {
    "put",        "delete",    "get",         "fence_advance", "fence_read",
    "fence_list", "operation", "floor_raise", "floor_list",    "transaction"};
constexpr std::array<std::string_view, 4> tls_failure_names = {"timeout", "closed", "certificate",
                                                               "protocol"};
constexpr std::array<std::string_view, 3> store_error_names = {"unavailable", "outcome_unknown",
                                                               "internal"};

// Every status fencekeeper or Beast may answer with gets its own slot; anything else is
// counted under its class ("1xx" … "5xx") so that the series stay bounded.
constexpr std::array<unsigned, 30> known_codes = {200, 201, 204, 206, 304, 400, 401, 403, 404, 405,
                                                  408, 409, 411, 412, 413, 414, 415, 416, 417, 422,
                                                  426, 428, 429, 431, 500, 501, 502, 503, 504, 505};
constexpr std::array<std::string_view, 5> class_names = {"1xx", "2xx", "3xx", "4xx", "5xx"};
constexpr std::size_t code_slots = known_codes.size() + class_names.size();

constexpr std::array<std::uint8_t, 600> make_code_table() {
    std::array<std::uint8_t, 600> t{};
    for (unsigned s = 0; s < t.size(); ++s) {
        const unsigned cls = s < 200 ? 0 : s / 100 - 1;
        t[s] = static_cast<std::uint8_t>(known_codes.size() + cls);
    }
    for (std::size_t i = 0; i < known_codes.size(); ++i) {
        t[known_codes[i]] = static_cast<std::uint8_t>(i);
    }
    return t;
}
constexpr auto code_table = make_code_table();

std::size_t code_slot(unsigned status) noexcept {
    return status < code_table.size() ? code_table[status] : code_slots - 1;
}

// ---- buckets ------------------------------------------------------------------------

struct bucket_bound {
    std::uint64_t upper; // inclusive, in the histogram's integer unit
    std::string_view le;
};

// Durations in nanoseconds, 0.5 ms … 10 s.
constexpr std::array<bucket_bound, 14> duration_buckets = {{
    {500'000, "0.0005"},
    {1'000'000, "0.001"},
    {2'500'000, "0.0025"},
    {5'000'000, "0.005"},
    {10'000'000, "0.01"},
    {25'000'000, "0.025"},
    {50'000'000, "0.05"},
    {100'000'000, "0.1"},
    {250'000'000, "0.25"},
    {500'000'000, "0.5"},
    {1'000'000'000, "1"},
    {2'500'000'000, "2.5"},
    {5'000'000'000, "5"},
    {10'000'000'000, "10"},
}};

// Token gaps: 1 is the common "one lease behind"; the tail shows clocks or counters gone
// wrong.
constexpr std::array<bucket_bound, 8> gap_buckets = {{
    {1, "1"},
    {2, "2"},
    {5, "5"},
    {10, "10"},
    {100, "100"},
    {1'000, "1000"},
    {10'000, "10000"},
    {1'000'000, "1000000"},
}};

// Writes per group commit; the bounds are store::commit_stats::bounds.
constexpr std::array<bucket_bound, 11> batch_buckets = {{
    {1, "1"},
    {2, "2"},
    {4, "4"},
    {8, "8"},
    {16, "16"},
    {32, "32"},
    {64, "64"},
    {128, "128"},
    {256, "256"},
    {512, "512"},
    {1024, "1024"},
}};
static_assert([] {
    if (batch_buckets.size() != store::commit_stats::bounds.size())
        return false;
    for (std::size_t i = 0; i < batch_buckets.size(); ++i)
        if (batch_buckets[i].upper != store::commit_stats::bounds[i])
            return false;
    return true;
}());

template <std::size_t N>
std::size_t bucket_of(const std::array<bucket_bound, N>& bounds, std::uint64_t v) noexcept {
    std::size_t i = 0;
    while (i < N && v > bounds[i].upper) {
        ++i;
    }
    return i; // N is the +Inf bucket
}

// Non-cumulative bucket counts (the last one is +Inf); cumulated on render. _count is the
// sum of the buckets, so it always equals the +Inf bucket.
template <std::size_t N, typename Sum> struct histogram {
    std::array<counter, N + 1> buckets{};
    std::atomic<Sum> sum{};
};

using duration_histogram = histogram<duration_buckets.size(), std::uint64_t>; // sum in ns
using gap_histogram = histogram<gap_buckets.size(), double>;

// ---- per-thread shard ----------------------------------------------------------------

std::size_t thread_slot() noexcept {
    static std::atomic<std::size_t> next{0};
    thread_local const std::size_t slot = next.fetch_add(1, relaxed) % metrics::shard_count;
    return slot;
}

std::uint64_t nanos(std::chrono::nanoseconds d) noexcept {
    return d.count() < 0 ? 0 : static_cast<std::uint64_t>(d.count());
}

// ---- rendering -------------------------------------------------------------------------

void append_escaped(std::string& out, std::string_view v) {
    for (char c : v) {
        switch (c) {
        case '\\':
            out += "\\\\";
            break;
        case '"':
            out += "\\\"";
            break;
        case '\n':
            out += "\\n";
            break;
        default:
            out += c;
        }
    }
}

void append_uint(std::string& out, std::uint64_t v) {
    char buf[24];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, end);
}

void append_int(std::string& out, std::int64_t v) {
    char buf[24];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, end);
}

void append_double(std::string& out, double v) {
    char buf[32];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, end);
}

void append_header(std::string& out, std::string_view name, std::string_view type,
                   std::string_view help) {
    out += "# HELP ";
    out += name;
    out += ' ';
    out += help;
    out += "\n# TYPE ";
    out += name;
    out += ' ';
    out += type;
    out += '\n';
}

struct label {
    std::string_view name;
    std::string_view value;
};

// name{l1="v1",l2="v2"} (no braces without labels), then a space; the caller appends
// the value and the newline.
void append_series(std::string& out, std::string_view name, std::initializer_list<label> labels) {
    out += name;
    bool first = true;
    for (const auto& l : labels) {
        if (l.name.empty()) {
            continue;
        }
        out += first ? '{' : ',';
        first = false;
        out += l.name;
        out += "=\"";
        append_escaped(out, l.value);
        out += '"';
    }
    if (!first) {
        out += '}';
    }
    out += ' ';
}

template <std::size_t N>
void append_histogram(std::string& out, std::string_view name, label l,
                      const std::array<bucket_bound, N>& bounds,
                      const std::array<std::uint64_t, N + 1>& counts, double sum) {
    const std::string bucket = std::string(name) + "_bucket";
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i <= N; ++i) {
        cumulative += counts[i];
        append_series(out, bucket, {l, {"le", i < N ? bounds[i].le : "+Inf"}});
        append_uint(out, cumulative);
        out += '\n';
    }
    append_series(out, std::string(name) + "_sum", {l});
    append_double(out, sum);
    out += '\n';
    append_series(out, std::string(name) + "_count", {l});
    append_uint(out, cumulative);
    out += '\n';
}

} // namespace

struct alignas(64) metrics::shard {
    std::array<std::array<counter, code_slots>, route_count> requests{};
    std::array<duration_histogram, route_count> request_duration{};
    std::array<duration_histogram, store_op_names.size()> store_duration{};
    std::array<counter, write_outcome_names.size()> writes{};
    gap_histogram stale_gap{};
    std::array<counter, store_error_names.size()> store_errors{};
    counter lock_mismatch{0};
    counter stale_floor{0};
    counter connections_rejected{0};
    counter shed{0};
    counter tls_handshakes{0};
    std::array<counter, tls_failure_names.size()> tls_failures{};
    // Gauges: incremented on one shard and perhaps decremented on another (a coroutine
    // may resume on another thread); the wrapping sum over all shards is exact.
    counter open_connections{0};
    counter inflight{0};
};

std::string_view to_string(write_outcome r) noexcept {
    return write_outcome_names[static_cast<std::size_t>(r)];
}
std::string_view to_string(tls_failure f) noexcept {
    return tls_failure_names[static_cast<std::size_t>(f)];
}
std::string_view to_string(store_op op) noexcept {
    return store_op_names[static_cast<std::size_t>(op)];
}
std::string_view to_string(store_error e) noexcept {
    return store_error_names[static_cast<std::size_t>(e)];
}

write_outcome classify_write(errc e) noexcept {
    switch (e) {
    case errc::ok:
        return write_outcome::applied;
    case errc::stale_token:
        return write_outcome::stale;
    case errc::precondition_failed:
        return write_outcome::precondition_failed;
    default:
        return write_outcome::error;
    }
}

metrics::metrics(std::string version)
    : shards_(new shard[shard_count]), version_(std::move(version)) {}

metrics::~metrics() = default;

metrics::shard& metrics::local() noexcept {
    return shards_[thread_slot()];
}

void metrics::count_request(route r, unsigned status, std::chrono::nanoseconds duration) noexcept {
    auto& s = local();
    const auto ri = route_index(r);
    s.requests[ri][code_slot(status)].fetch_add(1, relaxed);
    auto& h = s.request_duration[ri];
    const auto ns = nanos(duration);
    h.buckets[bucket_of(duration_buckets, ns)].fetch_add(1, relaxed);
    h.sum.fetch_add(ns, relaxed);
}

void metrics::count_write(write_outcome r) noexcept {
    local().writes[static_cast<std::size_t>(r)].fetch_add(1, relaxed);
}

void metrics::count_write(errc e) noexcept {
    count_write(classify_write(e));
    if (e == errc::lock_mismatch) {
        count_lock_mismatch();
    }
}

void metrics::observe_stale_gap(std::int64_t fence, std::int64_t token) noexcept {
    // Both are valid tokens (0 … INT64_MAX), so the difference cannot overflow; clamp
    // anyway so a caller's mix-up shows as gap 0 rather than as a huge number.
    const std::uint64_t gap =
        fence > token ? static_cast<std::uint64_t>(fence) - static_cast<std::uint64_t>(token) : 0;
    auto& h = local().stale_gap;
    h.buckets[bucket_of(gap_buckets, gap)].fetch_add(1, relaxed);
    h.sum.fetch_add(static_cast<double>(gap), relaxed);
}

void metrics::count_lock_mismatch() noexcept {
    local().lock_mismatch.fetch_add(1, relaxed);
}

void metrics::count_stale_floor() noexcept {
    local().stale_floor.fetch_add(1, relaxed);
}

void metrics::observe_store(store_op op, std::chrono::nanoseconds duration) noexcept {
    auto& h = local().store_duration[static_cast<std::size_t>(op)];
    const auto ns = nanos(duration);
    h.buckets[bucket_of(duration_buckets, ns)].fetch_add(1, relaxed);
    h.sum.fetch_add(ns, relaxed);
}

void metrics::count_store_error(store_error kind) noexcept {
    local().store_errors[static_cast<std::size_t>(kind)].fetch_add(1, relaxed);
}

void metrics::observe_store(store_op op, std::chrono::nanoseconds duration, errc e) noexcept {
    observe_store(op, duration);
    switch (e) {
    case errc::unavailable:
        count_store_error(store_error::unavailable);
        break;
    case errc::outcome_unknown:
        count_store_error(store_error::outcome_unknown);
        break;
    case errc::internal:
        count_store_error(store_error::internal);
        break;
    default:
        break;
    }
}

void metrics::connection_opened() noexcept {
    local().open_connections.fetch_add(1, relaxed);
}
void metrics::connection_closed() noexcept {
    local().open_connections.fetch_sub(1, relaxed);
}
void metrics::count_connection_rejected() noexcept {
    local().connections_rejected.fetch_add(1, relaxed);
}
void metrics::count_tls_handshake() noexcept {
    local().tls_handshakes.fetch_add(1, relaxed);
}
void metrics::count_tls_failure(tls_failure reason) noexcept {
    local().tls_failures[static_cast<std::size_t>(reason)].fetch_add(1, relaxed);
}
void metrics::request_started() noexcept {
    local().inflight.fetch_add(1, relaxed);
}
void metrics::request_finished() noexcept {
    local().inflight.fetch_sub(1, relaxed);
}
void metrics::count_shed() noexcept {
    local().shed.fetch_add(1, relaxed);
}

void metrics::set_store_ready_probe(std::function<bool()> probe) {
    store_ready_ = std::move(probe);
}

void metrics::set_batch_stats(const store::commit_stats* stats) noexcept {
    batch_stats_ = stats;
}

void metrics::set_file_health(const store::file_store_health* health) noexcept {
    file_health_ = health;
}

metrics::gauge_guard& metrics::gauge_guard::operator=(gauge_guard&& o) noexcept {
    if (this != &o) {
        reset();
        m_ = std::exchange(o.m_, nullptr);
        g_ = o.g_;
    }
    return *this;
}

void metrics::gauge_guard::reset() noexcept {
    if (m_ == nullptr) {
        return;
    }
    if (g_ == which::connections) {
        m_->connection_closed();
    } else {
        m_->request_finished();
    }
    m_ = nullptr;
}

metrics::gauge_guard metrics::track_connection() noexcept {
    connection_opened();
    return gauge_guard(this, gauge_guard::which::connections);
}

metrics::gauge_guard metrics::track_request() noexcept {
    request_started();
    return gauge_guard(this, gauge_guard::which::inflight);
}

std::string metrics::render() const {
    // Sum the shards first: a snapshot of plain integers, then format.
    std::array<std::array<std::uint64_t, code_slots>, route_count> requests{};
    std::array<std::array<std::uint64_t, duration_buckets.size() + 1>, route_count> req_buckets{};
    std::array<std::uint64_t, route_count> req_sum{};
    std::array<std::array<std::uint64_t, duration_buckets.size() + 1>, store_op_names.size()>
        store_buckets{};
    std::array<std::uint64_t, store_op_names.size()> store_sum{};
    std::array<std::uint64_t, write_outcome_names.size()> writes{};
    std::array<std::uint64_t, gap_buckets.size() + 1> gap{};
    double gap_sum = 0;
    std::array<std::uint64_t, store_error_names.size()> store_errors{};
    std::uint64_t lock_mismatch = 0, stale_floor = 0, rejected = 0, shed = 0, connections = 0,
                  inflight = 0, tls_handshakes = 0;
    std::array<std::uint64_t, tls_failure_names.size()> tls_failures{};

    for (std::size_t i = 0; i < shard_count; ++i) {
        const shard& s = shards_[i];
        for (std::size_t r = 0; r < route_count; ++r) {
            for (std::size_t c = 0; c < code_slots; ++c) {
                requests[r][c] += s.requests[r][c].load(relaxed);
            }
            for (std::size_t b = 0; b <= duration_buckets.size(); ++b) {
                req_buckets[r][b] += s.request_duration[r].buckets[b].load(relaxed);
            }
            req_sum[r] += s.request_duration[r].sum.load(relaxed);
        }
        for (std::size_t o = 0; o < store_op_names.size(); ++o) {
            for (std::size_t b = 0; b <= duration_buckets.size(); ++b) {
                store_buckets[o][b] += s.store_duration[o].buckets[b].load(relaxed);
            }
            store_sum[o] += s.store_duration[o].sum.load(relaxed);
        }
        for (std::size_t w = 0; w < writes.size(); ++w) {
            writes[w] += s.writes[w].load(relaxed);
        }
        for (std::size_t b = 0; b < gap.size(); ++b) {
            gap[b] += s.stale_gap.buckets[b].load(relaxed);
        }
        gap_sum += s.stale_gap.sum.load(relaxed);
        for (std::size_t k = 0; k < store_errors.size(); ++k) {
            store_errors[k] += s.store_errors[k].load(relaxed);
        }
        lock_mismatch += s.lock_mismatch.load(relaxed);
        stale_floor += s.stale_floor.load(relaxed);
        rejected += s.connections_rejected.load(relaxed);
        shed += s.shed.load(relaxed);
        connections += s.open_connections.load(relaxed);
        inflight += s.inflight.load(relaxed);
        tls_handshakes += s.tls_handshakes.load(relaxed);
        for (std::size_t f = 0; f < tls_failures.size(); ++f) {
            tls_failures[f] += s.tls_failures[f].load(relaxed);
        }
    }

    std::string out;
    out.reserve(24 * 1024);

    append_header(out, "fencekeeper_requests_total", "counter",
                  "HTTP responses sent, by route and status code.");
    for (std::size_t r = 0; r < route_count; ++r) {
        for (std::size_t c = 0; c < code_slots; ++c) {
            if (requests[r][c] == 0) {
                continue;
            }
            char code[8];
            std::string_view code_text;
            if (c < known_codes.size()) {
                auto [end, ec] = std::to_chars(code, code + sizeof code, known_codes[c]);
                code_text = std::string_view(code, static_cast<std::size_t>(end - code));
            } else {
                code_text = class_names[c - known_codes.size()];
            }
            append_series(out, "fencekeeper_requests_total",
                          {{"route", to_string(static_cast<route>(r))}, {"code", code_text}});
            append_uint(out, requests[r][c]);
            out += '\n';
        }
    }

    append_header(out, "fencekeeper_request_duration_seconds", "histogram",
                  "Time from a request's head to its response, by route.");
    for (std::size_t r = 0; r < route_count; ++r) {
        append_histogram(out, "fencekeeper_request_duration_seconds",
                         {"route", to_string(static_cast<route>(r))}, duration_buckets,
                         req_buckets[r], static_cast<double>(req_sum[r]) / 1e9);
    }

    append_header(out, "fencekeeper_writes_total", "counter",
                  "Writes, deletes, fence advances and operations that reached the store, by "
                  "result; result=\"stale\" counts zombie writers caught by the fence, "
                  "result=\"replayed\" retries answered from an Idempotency-Key record.");
    for (std::size_t w = 0; w < writes.size(); ++w) {
        append_series(out, "fencekeeper_writes_total", {{"result", write_outcome_names[w]}});
        append_uint(out, writes[w]);
        out += '\n';
    }

    append_header(out, "fencekeeper_stale_token_gap", "histogram",
                  "Fence minus token of each write rejected as stale.");
    append_histogram(out, "fencekeeper_stale_token_gap", {}, gap_buckets, gap, gap_sum);

    append_header(out, "fencekeeper_stale_floor_total", "counter",
                  "Writes rejected as stale because a fence floor, not the lock's own fence, "
                  "was above their token (also in writes_total{result=\"stale\"}).");
    append_series(out, "fencekeeper_stale_floor_total", {});
    append_uint(out, stale_floor);
    out += '\n';

    append_header(out, "fencekeeper_lock_mismatch_total", "counter",
                  "Writes rejected because the key belongs to another lock.");
    append_series(out, "fencekeeper_lock_mismatch_total", {});
    append_uint(out, lock_mismatch);
    out += '\n';

    append_header(out, "fencekeeper_store_duration_seconds", "histogram",
                  "Time spent in the store, by operation.");
    for (std::size_t o = 0; o < store_op_names.size(); ++o) {
        append_histogram(out, "fencekeeper_store_duration_seconds", {"op", store_op_names[o]},
                         duration_buckets, store_buckets[o],
                         static_cast<double>(store_sum[o]) / 1e9);
    }

    append_header(out, "fencekeeper_store_errors_total", "counter",
                  "Store calls that failed: unavailable, outcome_unknown or internal.");
    for (std::size_t k = 0; k < store_errors.size(); ++k) {
        append_series(out, "fencekeeper_store_errors_total", {{"kind", store_error_names[k]}});
        append_uint(out, store_errors[k]);
        out += '\n';
    }

    append_header(out, "fencekeeper_inflight_requests", "gauge",
                  "Requests received and not yet answered.");
    append_series(out, "fencekeeper_inflight_requests", {});
    append_int(out, static_cast<std::int64_t>(inflight));
    out += '\n';

    append_header(out, "fencekeeper_open_connections", "gauge", "Open client connections.");
    append_series(out, "fencekeeper_open_connections", {});
    append_int(out, static_cast<std::int64_t>(connections));
    out += '\n';

    append_header(out, "fencekeeper_connections_rejected_total", "counter",
                  "Connections closed on accept because the connection limit was reached.");
    append_series(out, "fencekeeper_connections_rejected_total", {});
    append_uint(out, rejected);
    out += '\n';

    append_header(out, "fencekeeper_shed_requests_total", "counter",
                  "Requests answered 503 because the in-flight request limit was reached.");
    append_series(out, "fencekeeper_shed_requests_total", {});
    append_uint(out, shed);
    out += '\n';

    append_header(out, "fencekeeper_tls_handshakes_total", "counter",
                  "TLS handshakes completed (0 on a plain HTTP listener).");
    append_series(out, "fencekeeper_tls_handshakes_total", {});
    append_uint(out, tls_handshakes);
    out += '\n';

    append_header(out, "fencekeeper_tls_handshake_failures_total", "counter",
                  "TLS handshakes that failed, by reason: timeout, closed, certificate or "
                  "protocol.");
    for (std::size_t f = 0; f < tls_failures.size(); ++f) {
        append_series(out, "fencekeeper_tls_handshake_failures_total",
                      {{"reason", tls_failure_names[f]}});
        append_uint(out, tls_failures[f]);
        out += '\n';
    }

    if (batch_stats_ != nullptr) {
        const auto b = batch_stats_->read();
        append_header(out, "fencekeeper_store_batch_size", "histogram",
                      "Writes per store commit (group commit): PUTs and DELETEs per Postgres "
                      "transaction, PUTs, DELETEs and fence advances per file-store journal "
                      "commit.");
        append_histogram(out, "fencekeeper_store_batch_size", {}, batch_buckets, b.buckets,
                         static_cast<double>(b.writes));
    }

    if (file_health_ != nullptr) {
        const auto& h = *file_health_;
        append_header(out, "fencekeeper_file_redo_backlog_rows", "gauge",
                      "File store: committed redo rows whose files are not yet known durable "
                      "(what a start after a crash would verify).");
        append_series(out, "fencekeeper_file_redo_backlog_rows", {});
        append_uint(out, static_cast<std::uint64_t>(
                             std::max<std::int64_t>(0, h.redo_backlog_rows.load(relaxed))));
        out += '\n';
        append_header(out, "fencekeeper_file_flush_waits_total", "counter",
                      "File store: batches that waited for the flusher because the backlog "
                      "reached file.max_redo_rows or file.max_redo_bytes.");
        append_series(out, "fencekeeper_file_flush_waits_total", {});
        append_uint(out, h.flush_waits.load(relaxed));
        out += '\n';
        append_header(out, "fencekeeper_file_flush_wait_seconds_total", "counter",
                      "File store: time batches spent waiting for the flusher.");
        append_series(out, "fencekeeper_file_flush_wait_seconds_total", {});
        append_double(out, static_cast<double>(h.flush_wait_ns.load(relaxed)) / 1e9);
        out += '\n';
        append_header(out, "fencekeeper_file_wal_pages", "gauge",
                      "File store: pages in the index's write-ahead log after the last commit.");
        append_series(out, "fencekeeper_file_wal_pages", {});
        append_uint(
            out, static_cast<std::uint64_t>(std::max<std::int64_t>(0, h.wal_pages.load(relaxed))));
        out += '\n';
        append_header(out, "fencekeeper_file_checkpoint_lag_seconds", "gauge",
                      "File store: how long a checkpoint of the index has been due without one "
                      "that copied the whole WAL; 0 when none is due.");
        append_series(out, "fencekeeper_file_checkpoint_lag_seconds", {});
        append_double(out, h.checkpoint_lag_seconds(std::chrono::steady_clock::now()));
        out += '\n';
    }

    if (store_ready_) {
        append_header(out, "fencekeeper_store_ready", "gauge",
                      "1 when the store is usable (as /readyz), else 0.");
        append_series(out, "fencekeeper_store_ready", {});
        out += store_ready_() ? "1\n" : "0\n";
    }

    append_header(out, "fencekeeper_build_info", "gauge", "Always 1; the version is a label.");
    append_series(out, "fencekeeper_build_info", {{"version", version_}});
    out += "1\n";
    return out;
}

} // namespace fk::proxy
