#pragma once
// What every route's handler shares (proxy/routes/*.cpp, one file per route family): the
// call, the request's fencing headers, the Idempotency-Key's claim, the store call's
// timing and counting, the one mapping of a store's write refusal to a reply, and the log
// lines about writes. Every fenced write goes through one pipeline, in this order:
//
//   fencing headers: token, lock, preconditions     token_of, lock_of, write_headers_of
//   the Idempotency-Key's claim and fingerprint     idempotency_of (identity_of)
//   the store call, timed                           timed
//   writes_total, then the refusal or the reply     finish_write (write_failure)
//
// A new route is a file here, a declaration in routes.hpp and a case in handlers.cpp's
// dispatch (docs/architecture.md, "Where things go").

#include "backends/net.hpp"
#include "backends/store.hpp"
#include "fence/rule.hpp"
#include "proxy/handlers.hpp"
#include "proxy/idempotency.hpp"
#include "proxy/metrics.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace fk::proxy::routes {

using fence::token_t;

inline constexpr std::string_view fencing_token_field = "Fencing-Token";
inline constexpr std::string_view fencing_token_alias = "X-Fencing-Token";
inline constexpr std::string_view fencing_lock_field = "Fencing-Lock";

// The per-request state every handler needs.
struct call {
    handler_context& ctx;
    request& req;
    const route_match& match;
    bool head = false;
};

// A value or the error response to send instead.
template <class T> struct checked {
    std::optional<T> value;
    std::optional<response> failure;
};

// --- the request's headers (headers.cpp) ------------------------------------------

struct field_values {
    std::size_t count = 0;
    std::optional<std::string_view> first;
};

// How often the field `name` appears, and its first value.
field_values fields_named(const request& req, std::string_view name);

// Fencing-Token (or X-Fencing-Token): exactly one, well-formed; else 400/428.
checked<token_t> token_of(const request& req);
// The same when present; absent is no token (POST /v1/transactions: a default for its ops).
checked<std::optional<token_t>> optional_token_of(const request& req);
// Fencing-Lock, or `fallback` when absent (nullopt fallback: the header is required).
checked<std::string> lock_of(const request& req, std::optional<std::string_view> fallback);
// If-Match and If-None-Match on a write.
checked<fence::preconditions> preconditions_of(const request& req);

// The headers every resource write carries: token, lock (default: the key) and
// preconditions, or the error response for the first one that is bad.
struct write_headers {
    token_t token = 0;
    std::string lock;
    fence::preconditions pre;
};

checked<write_headers> write_headers_of(const request& req, std::string_view key);

// The 400 for a malformed Idempotency-Key (given twice, or not 1 to 255 visible ASCII
// characters); nullopt when it is absent or well-formed.
std::optional<response> idempotency_key_problem(const request& req);

// --- the pipeline (pipeline.cpp) ----------------------------------------------------

// An Idempotency-Key being served: what goes to the store, and this process's claim on
// the key (released when the handler returns, whatever the outcome).
struct keyed {
    std::optional<store::idempotency> idem;
    std::optional<inflight_keys::claim> claim;
};

// What an Idempotency-Key's fingerprint covers (proxy/idempotency.hpp); views `c.req`.
request_identity identity_of(const call& c, std::string_view lock, token_t token,
                             const fence::preconditions& pre);

// The request's Idempotency-Key: absent → nothing to do; malformed → 400; in flight here
// → 409 idempotency_in_progress; a caller at its record quota → 429; else claimed, with
// the request's fingerprint. `id` views the request, which outlives the call.
net::awaitable<checked<keyed>> idempotency_of(const call& c, const request_identity& id);

// Times one store call: store_duration_seconds{op}, and store_errors_total{kind} when the
// store failed (client-caused answers such as not_found or stale_token are not store
// errors).
class store_timer {
public:
    store_timer(const call& c, store_op op) noexcept
        : stats_(c.ctx.stats), op_(op), start_(std::chrono::steady_clock::now()) {}
    void done(errc e) const noexcept {
        if (stats_)
            stats_->observe_store(op_, std::chrono::steady_clock::now() - start_, e);
    }

private:
    metrics* stats_;
    store_op op_;
    std::chrono::steady_clock::time_point start_;
};

// The store call `pending` (a store:: coroutine, which owns its request), timed as `op`.
template <class Result>
net::awaitable<Result> timed(const call& c, store_op op, net::awaitable<Result> pending) {
    store_timer timer{c, op};
    auto r = co_await std::move(pending);
    timer.done(r.error);
    co_return r;
}

// writes_total{result} for a write, delete, fence advance or operation the store answered;
// the stale gap too when it was stale, and stale_floor_total when a floor rejected it.
void count_write(const call& c, errc e, token_t token, token_t current, bool replayed,
                 const std::optional<std::string>& floor) noexcept;

// A reply answered from an Idempotency-Key record says so (Idempotent-Replayed).
void mark_replayed(response& res, bool replayed);

// The pipeline's last step for the store's answer `r` to a write made with `token`:
// writes_total (unless `count` is false: floors are not writes), then `refuse(r)` when
// the store refused it, else `reply(r)`, marked when it was replayed from a record.
template <class Result, class Refuse, class Reply>
response finish_write(const call& c, const Result& r, token_t token, Refuse&& refuse, Reply&& reply,
                      bool count = true) {
    if (count)
        count_write(c, r.error, token, r.current_token, r.replayed, r.floor);
    if (r.error != errc::ok)
        return refuse(r);
    response res = reply(r);
    mark_replayed(res, r.replayed);
    return res;
}

// The refusal of a single write (PUT or DELETE of a key, a fence advance): 409 stale
// (logged), 409 lock_mismatch, 412, or store_failure's.
response write_failure(const call& c, const store::write_result& r,
                       std::optional<std::string_view> key, std::string_view lock, token_t token);

// unavailable, outcome_unknown, internal and anything unexpected from a store: logged as
// a store error; internal's detail is for the log only.
response store_failure(const call& c, errc e, const std::string& message);

// --- log lines and reply pieces (pipeline.cpp) ---------------------------------------

// peer, request_id and client: the fields of every line about a request.
nlohmann::json log_fields(const call& c);
// A 403 decided by a handler (a transaction op out of scope); those decided from the
// head are logged by the session with the same message.
void log_forbidden(const call& c, std::string_view why);
// "rejected stale write" (warn): every rejected write logs it.
void log_stale(const call& c, std::optional<std::string_view> key, std::string_view lock,
               token_t token, token_t current, const std::optional<std::string>& floor);
// "fence advanced" (debug).
void log_applied(const call& c, std::optional<std::string_view> key, std::string_view lock,
                 token_t token);

// The prefix of the floor that refused a write, as the replies and logs take it.
std::optional<std::string_view> floor_of(const std::optional<std::string>& floor);

// A lock name the store reports (the lock a key belongs to) as a reply to this caller may
// carry it: nullopt when a scoped client may not read it (docs/api.md#redacted-locks).
// Names the caller sent itself are in its scope already (checked from the head or per op).
std::optional<std::string_view> visible_lock(const call& c, std::string_view lock) noexcept;

// `"N"` for version N.
std::string etag(std::int64_t version);

// Operation bodies up to this size are parsed, and bodies up to this size hashed for an
// Idempotency-Key, where the request runs (a millisecond or less); larger ones on
// parse_pool, so that no other connection waits behind them.
inline constexpr std::size_t inline_parse_bytes = 64 * 1024;

// One thread: large operation bodies are parsed (and large keyed bodies hashed) one at a
// time and never on an I/O thread, so however many arrive they take at most one core
// from the I/O threads.
net::thread_pool& parse_pool();

} // namespace fk::proxy::routes
