// Every route's handler, ~900 lines in one file: they share the call context, the
// parsing of Fencing-Token, Fencing-Lock and preconditions, the logging of applied and
// stale writes, and the one mapping of a store's write failure to a reply, and each
// handler itself is short. docs/api.md#routes is what they implement.
#include "proxy/handlers.hpp"

#include "backends/log/logging.hpp"
#include "fence/names.hpp"
#include "fence/rfc3339.hpp"
#include "fence/token.hpp"
#include "proxy/detail/operation_params.hpp"
#include "proxy/detail/request_id.hpp"
#include "proxy/detail/txn_body.hpp"
#include "proxy/idempotency.hpp"
#include "proxy/metrics.hpp"
#include "proxy/router.hpp"
#include "proxy/scopes.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/field.hpp>

#include <algorithm>
#include <chrono>
#include <exception>
#include <utility>

namespace fk::proxy {

namespace {

using fence::token_t;

constexpr std::string_view fencing_token_field = "Fencing-Token";
constexpr std::string_view fencing_token_alias = "X-Fencing-Token";
constexpr std::string_view fencing_lock_field = "Fencing-Lock";
constexpr std::string_view request_id_field = "X-Request-Id";
constexpr std::string_view metrics_content_type = "text/plain; version=0.0.4; charset=utf-8";

struct field_values {
    std::size_t count = 0;
    std::optional<std::string_view> first;
};

field_values fields_named(const request& req, std::string_view name) {
    field_values out;
    auto [it, end] = req.equal_range(name);
    for (; it != end; ++it)
        if (out.count++ == 0)
            out.first = std::string_view{it->value()};
    return out;
}

// Cuts client-supplied text quoted in messages to a readable length.
std::string excerpt(std::string_view text) {
    constexpr std::size_t max = 64;
    return text.size() <= max ? std::string{text} : std::string{text.substr(0, max)} + "...";
}

// Operation bodies up to this size are parsed, and bodies up to this size hashed for an
// Idempotency-Key, where the request runs (a millisecond or less); larger ones on
// parse_pool, so that no other connection waits behind them.
constexpr std::size_t inline_parse_bytes = 64 * 1024;

// One thread: large operation bodies are parsed (and large keyed bodies hashed) one at a
// time and never on an I/O thread, so however many arrive they take at most one core
// from the I/O threads.
net::thread_pool& parse_pool() {
    static net::thread_pool pool{1};
    return pool;
}

} // namespace

void join_parse_thread() {
    parse_pool().join();
}

namespace {

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

checked<token_t> token_of(const request& req) {
    auto primary = fields_named(req, fencing_token_field);
    auto alias = fields_named(req, fencing_token_alias);
    auto t = fence::token_from_headers(primary.count, primary.first, alias.count, alias.first);
    if (t.error == errc::ok)
        return {t.value, std::nullopt};
    if (t.error == errc::missing_token)
        return {std::nullopt,
                make_error_response(errc::missing_token, "a write needs a Fencing-Token header")};
    if (primary.count + alias.count > 1)
        return {std::nullopt,
                make_error_response(errc::invalid_token,
                                    "give exactly one Fencing-Token (or X-Fencing-Token) field")};
    auto text = primary.first ? *primary.first : alias.first.value_or("");
    return {std::nullopt,
            make_error_response(errc::invalid_token,
                                "invalid fencing token '" + excerpt(text) +
                                    "': 1 to 19 digits, no sign or leading zeros, at most "
                                    "9223372036854775807")};
}

// Fencing-Lock, or `fallback` when absent (nullopt fallback: the header is required).
checked<std::string> lock_of(const request& req, std::optional<std::string_view> fallback) {
    auto field = fields_named(req, fencing_lock_field);
    if (field.count == 0) {
        if (fallback)
            return {std::string{*fallback}, std::nullopt};
        return {std::nullopt, make_error_response(errc::invalid_request,
                                                  "this request needs a Fencing-Lock header")};
    }
    if (field.count > 1)
        return {std::nullopt,
                make_error_response(errc::invalid_name, "Fencing-Lock given more than once")};
    auto lock = fence::lock_from_header(*field.first);
    if (lock.error != errc::ok)
        return {std::nullopt,
                make_error_response(errc::invalid_name,
                                    "invalid Fencing-Lock: 1 to 1024 bytes of UTF-8 without "
                                    "control characters")};
    return {std::move(lock.value), std::nullopt};
}

// `"N"` as sent in If-Match; nullopt for anything else, which can never match an ETag
// this proxy sends (weak tags never match under If-Match's strong comparison).
std::optional<std::int64_t> parse_etag_version(std::string_view tag) noexcept {
    if (tag.size() < 3 || tag.front() != '"' || tag.back() != '"')
        return std::nullopt;
    auto digits = tag.substr(1, tag.size() - 2);
    if (digits.size() > 18 || (digits.size() > 1 && digits[0] == '0'))
        return std::nullopt;
    std::int64_t v = 0;
    for (char c : digits) {
        if (c < '0' || c > '9')
            return std::nullopt;
        v = v * 10 + (c - '0');
    }
    return v;
}

checked<fence::preconditions> preconditions_of(const request& req) {
    fence::preconditions pre;
    auto if_match = fields_named(req, "If-Match");
    if (if_match.count == 1 && *if_match.first == "*") {
        pre.if_match_any = true;
    } else if (if_match.count > 0) {
        // A value that cannot match still goes to the store, so that the fence and the
        // lock are checked first, in the contract's order; -1 is no version.
        auto v = if_match.count == 1 ? parse_etag_version(*if_match.first) : std::nullopt;
        pre.if_match = v.value_or(-1);
    }
    auto if_none_match = fields_named(req, "If-None-Match");
    if (if_none_match.count > 0) {
        if (if_none_match.count > 1 || *if_none_match.first != "*")
            return {std::nullopt,
                    make_error_response(errc::invalid_request,
                                        "only 'If-None-Match: *' is supported on writes")};
        pre.if_none_match_any = true;
    }
    return {pre, std::nullopt};
}

nlohmann::json log_fields(const call& c) {
    nlohmann::json f{{"peer", c.ctx.peer}, {"request_id", c.ctx.request_id}};
    if (!c.ctx.client.empty())
        f["client"] = c.ctx.client;
    return f;
}

// A 403 decided by a handler (a transaction op out of scope); those decided from the head
// are logged by the session with the same message.
void log_forbidden(const call& c, std::string_view why) {
    auto f = log_fields(c);
    f["method"] = std::string_view{c.req.method_string()};
    f["route"] = to_string(c.match.kind);
    f["detail"] = why;
    logging::write(logging::level::info, "forbidden request", f);
}

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

// The prefix of the floor that refused a write, as the replies and logs take it.
std::optional<std::string_view> floor_of(const std::optional<std::string>& floor) {
    return floor ? std::optional<std::string_view>{*floor} : std::nullopt;
}

// writes_total{result} for a write, delete, fence advance or operation the store answered;
// the stale gap too when it was stale, and stale_floor_total when a floor rejected it.
void count_write(const call& c, errc e, token_t token, token_t current, bool replayed,
                 const std::optional<std::string>& floor) noexcept {
    if (!c.ctx.stats)
        return;
    if (replayed)
        c.ctx.stats->count_write(write_outcome::replayed);
    else
        c.ctx.stats->count_write(e);
    if (e == errc::stale_token) {
        c.ctx.stats->observe_stale_gap(current, token);
        if (floor)
            c.ctx.stats->count_stale_floor();
    }
}

std::optional<std::string_view> client_of(const call& c) {
    return c.ctx.client.empty() ? std::nullopt : std::optional<std::string_view>{c.ctx.client};
}

// A lock name the store reports (the lock a key belongs to) as a reply to this caller may
// carry it: nullopt when a scoped client may not read it (docs/api.md#redacted-locks).
// Names the caller sent itself are in its scope already (checked from the head or per op).
std::optional<std::string_view> visible_lock(const call& c, std::string_view lock) noexcept {
    if (c.ctx.scope && !c.ctx.scope->may_read(lock))
        return std::nullopt;
    return lock;
}

// Every rejected write logs this line, so it is formatted without a JSON tree.
void log_stale(const call& c, std::optional<std::string_view> key, std::string_view lock,
               token_t token, token_t current, const std::optional<std::string>& floor) {
    if (!logging::enabled(logging::level::warn))
        return;
    logging::write_fields(logging::level::warn, "rejected stale write",
                          {{"peer", c.ctx.peer},
                           logging::field::optional("client", client_of(c)),
                           {"request_id", c.ctx.request_id},
                           {"lock", lock},
                           logging::field::optional("key", key),
                           {"token", token},
                           {"fence", current},
                           {"current_token", current}, // the name in the 409 body
                           {"gap", current - token},
                           logging::field::optional("floor", floor_of(floor))});
}

void log_applied(const call& c, std::optional<std::string_view> key, std::string_view lock,
                 token_t token) {
    if (!logging::enabled(logging::level::debug))
        return;
    auto f = log_fields(c);
    f["lock"] = lock;
    f["key"] = key ? nlohmann::json(*key) : nlohmann::json(nullptr);
    f["token"] = token;
    logging::write(logging::level::debug, "fence advanced", f);
}

// unavailable, outcome_unknown, internal and anything unexpected from a store.
response store_failure(const call& c, errc e, const std::string& message) {
    if (e == errc::ok)
        e = errc::internal;
    if (e == errc::unavailable || e == errc::outcome_unknown || e == errc::internal) {
        auto f = log_fields(c);
        f["route"] = to_string(c.match.kind);
        f["name"] = c.match.name;
        f["error"] = to_string(e);
        f["detail"] = message;
        logging::write(logging::level::error, "store error", f);
    }
    // A store's internal detail is for the log, not for clients.
    if (e == errc::internal)
        return make_error_response(e, std::string{});
    // Whatever a store says about a 504, the client must learn how to resolve it.
    if (e == errc::outcome_unknown && !message.empty() &&
        message.find("Idempotency-Key") == std::string::npos)
        return make_error_response(e, message + "; retry it with the same Idempotency-Key to learn "
                                                "whether it was, without applying it twice");
    return make_error_response(e, message);
}

response write_failure(const call& c, const store::write_result& r,
                       std::optional<std::string_view> key, std::string_view lock, token_t token) {
    switch (r.error) {
    case errc::stale_token:
        log_stale(c, key, lock, token, r.current_token, r.floor);
        return stale_token_response(lock, token, r.current_token, floor_of(r.floor));
    case errc::lock_mismatch:
        return lock_mismatch_response(key.value_or(""), visible_lock(c, r.lock));
    case errc::precondition_failed:
        return precondition_failed_response(key.value_or(""));
    default:
        return store_failure(c, r.error, r.message);
    }
}

std::string etag(std::int64_t version) {
    std::string tag = std::to_string(version);
    tag.insert(tag.begin(), '"');
    tag += '"';
    return tag;
}

// The headers every resource write carries: token, lock (default: the key) and
// preconditions, or the error response for the first one that is bad.
struct write_headers {
    token_t token = 0;
    std::string lock;
    fence::preconditions pre;
};

checked<write_headers> write_headers_of(const request& req, std::string_view key) {
    auto token = token_of(req);
    if (token.failure)
        return {std::nullopt, std::move(token.failure)};
    auto lock = lock_of(req, key);
    if (lock.failure)
        return {std::nullopt, std::move(lock.failure)};
    auto pre = preconditions_of(req);
    if (pre.failure)
        return {std::nullopt, std::move(pre.failure)};
    return {write_headers{*token.value, std::move(*lock.value), *pre.value}, std::nullopt};
}

// An Idempotency-Key being served: what goes to the store, and this process's claim on
// the key (released when the handler returns, whatever the outcome).
struct keyed {
    std::optional<store::idempotency> idem;
    std::optional<inflight_keys::claim> claim;
};

// The caller's space of Idempotency-Keys (docs/api.md#retries-and-exactly-once): a scoped
// client's name, so that two clients never share a record, a claim or a 422; "" for the
// single bearer token and auth off, where every caller is the same caller. Client names
// are never empty (config/parse.cpp), so no client shares the "" space.
std::string_view scope_of(const call& c) noexcept {
    return c.ctx.scope ? std::string_view{c.ctx.scope->name} : std::string_view{};
}

// The 400 for a malformed Idempotency-Key (given twice, or not 1 to 255 visible ASCII
// characters); nullopt when it is absent or well-formed.
std::optional<response> idempotency_key_problem(const request& req) {
    auto field = fields_named(req, idempotency_key_field);
    if (field.count == 0 || (field.count == 1 && valid_idempotency_key(*field.first)))
        return std::nullopt;
    return make_error_response(errc::invalid_request,
                               field.count > 1 ? "give Idempotency-Key at most once"
                                               : "invalid Idempotency-Key: 1 to 255 characters "
                                                 "from '!' to '~' (visible ASCII, no spaces)");
}

// The request's Idempotency-Key: absent → nothing to do; malformed → 400; in flight here
// → 409 idempotency_in_progress; else claimed, with the request's fingerprint.
// `id` views the request, which outlives the call.
net::awaitable<checked<keyed>> idempotency_of(const call& c, const request_identity& id) {
    if (auto bad = idempotency_key_problem(c.req))
        co_return checked<keyed>{std::nullopt, std::move(bad)};
    auto field = fields_named(c.req, idempotency_key_field);
    if (field.count == 0)
        co_return checked<keyed>{keyed{}, std::nullopt};
    keyed k;
    const auto scope = scope_of(c);
    if (c.ctx.idempotency_keys) {
        auto claim = c.ctx.idempotency_keys->try_claim(scope, *field.first);
        if (!claim)
            co_return checked<keyed>{std::nullopt,
                                     make_error_response(errc::idempotency_in_progress, "")};
        k.claim.emplace(std::move(*claim));
    }
    // A caller that holds as many records as it may (idempotency.max_records_per_client,
    // max_bytes_per_client) gets no new one; a retry of a recorded request is still
    // answered from its record.
    if (auto wait = c.ctx.store.idempotency_records_full(scope)) {
        auto presence = co_await c.ctx.store.has_idempotency_record(std::string{scope},
                                                                    std::string{*field.first});
        if (presence.error != errc::ok)
            co_return checked<keyed>{
                std::nullopt,
                make_error_response(errc::unavailable,
                                    "could not look up the Idempotency-Key; nothing was written")};
        if (!presence.found) {
            auto res = make_error_response(errc::too_many_idempotency_records, "");
            res.set(http::field::retry_after, std::to_string(wait->count()));
            co_return checked<keyed>{std::nullopt, std::move(res)};
        }
    }
    store::idempotency idem;
    idem.scope = std::string{scope};
    idem.key = std::string{*field.first};
    if (id.body.size() <= inline_parse_bytes)
        idem.fingerprint = fingerprint(id);
    else
        idem.fingerprint = co_await net::co_spawn(
            parse_pool(), [&id]() -> net::awaitable<std::string> { co_return fingerprint(id); },
            net::use_awaitable);
    k.idem = std::move(idem);
    co_return checked<keyed>{std::move(k), std::nullopt};
}

request_identity identity_of(const call& c, std::string_view lock, token_t token,
                             const fence::preconditions& pre) {
    request_identity id;
    id.method = c.req.method_string();
    id.route = to_string(c.match.kind);
    id.name = c.match.name;
    id.lock = lock;
    id.token = token;
    id.pre = pre;
    id.content_type = c.req[http::field::content_type];
    id.body = c.req.body();
    return id;
}

// A reply answered from an Idempotency-Key record says so.
void mark_replayed(response& res, bool replayed) {
    if (replayed)
        res.set(idempotent_replayed_field, "true");
}

net::awaitable<response> put_resource(call c) {
    auto h = write_headers_of(c.req, c.match.name);
    if (h.failure)
        co_return std::move(*h.failure);
    auto& [token, lock, pre] = *h.value;
    const auto id = identity_of(c, lock, token, pre);
    auto k = co_await idempotency_of(c, id);
    if (k.failure)
        co_return std::move(*k.failure);

    store::put_request p;
    p.idem = std::move(k.value->idem);
    p.key = c.match.name;
    p.lock = lock;
    p.token = token;
    p.content_type = std::string{std::string_view{c.req[http::field::content_type]}};
    p.body = std::move(c.req.body());
    p.pre = pre;
    store_timer timer{c, store_op::put};
    auto r = co_await c.ctx.store.put(std::move(p));
    timer.done(r.error);
    count_write(c, r.error, token, r.current_token, r.replayed, r.floor);
    if (r.error != errc::ok)
        co_return write_failure(c, r, c.match.name, lock, token);

    if (!r.replayed)
        log_applied(c, c.match.name, lock, r.token);
    auto res = applied_put_response(r.created, c.match.name, lock, r.token, r.version);
    res.set(http::field::etag, etag(r.version));
    mark_replayed(res, r.replayed);
    co_return res;
}

net::awaitable<response> delete_resource(call c) {
    auto h = write_headers_of(c.req, c.match.name);
    if (h.failure)
        co_return std::move(*h.failure);
    auto& [token, lock, pre] = *h.value;
    const auto id = identity_of(c, lock, token, pre);
    auto k = co_await idempotency_of(c, id);
    if (k.failure)
        co_return std::move(*k.failure);

    store::delete_request d;
    d.idem = std::move(k.value->idem);
    d.key = c.match.name;
    d.lock = lock;
    d.token = token;
    d.pre = pre;
    store_timer timer{c, store_op::del};
    auto r = co_await c.ctx.store.remove(std::move(d));
    timer.done(r.error);
    count_write(c, r.error, token, r.current_token, r.replayed, r.floor);
    if (r.error != errc::ok)
        co_return write_failure(c, r, c.match.name, lock, token);

    if (!r.replayed)
        log_applied(c, c.match.name, lock, r.token);
    response res{http::status::no_content, 11};
    mark_replayed(res, r.replayed);
    co_return res;
}

net::awaitable<response> get_resource(call c) {
    store_timer timer{c, store_op::get};
    auto r = co_await c.ctx.store.get(c.match.name, !c.head);
    timer.done(r.error);
    if (r.error == errc::not_found)
        co_return make_error_response(errc::not_found, "no resource '" + c.match.name + "'");
    if (r.error != errc::ok)
        co_return store_failure(c, r.error, r.message);

    response res{http::status::ok, 11};
    res.set(http::field::content_type,
            r.content_type.empty() ? std::string{"application/octet-stream"} : r.content_type);
    res.set(http::field::etag, etag(r.version));
    // The writer's lock and token only to a caller who may read that lock: a key in scope
    // may have been written under another tenant's lock (docs/api.md#redacted-locks).
    if (visible_lock(c, r.lock)) {
        res.set(fencing_token_field, std::to_string(r.token));
        res.set(fencing_lock_field, r.lock);
    }
    if (c.head)
        res.content_length(r.size);
    else
        res.body() = std::move(r.body);
    co_return res;
}

nlohmann::json fence_json(const store::fence_info& f) {
    return {{"lock", f.lock},
            {"token", f.token},
            {"updated_at", fence::format_rfc3339_ms(f.updated_at_ms)}};
}

// The effective fence (docs/api.md#fence-floors): the floor is named when it sets it.
net::awaitable<response> get_fence(call c) {
    store_timer timer{c, store_op::fence_read};
    auto r = co_await c.ctx.store.read_fence(c.match.name);
    timer.done(r.error);
    if (r.error == errc::not_found)
        co_return make_error_response(errc::not_found,
                                      "lock '" + c.match.name +
                                          "' has never been fenced and no fence floor covers it");
    if (r.error != errc::ok)
        co_return store_failure(c, r.error, r.message);
    auto body = fence_json(r.fence);
    if (r.fence.floor)
        body["floor"] = *r.fence.floor;
    co_return json_response(http::status::ok, body);
}

net::awaitable<response> put_fence(call c) {
    auto token = token_of(c.req);
    if (token.failure)
        co_return std::move(*token.failure);
    const auto id = identity_of(c, c.match.name, *token.value, {});
    auto k = co_await idempotency_of(c, id);
    if (k.failure)
        co_return std::move(*k.failure);
    store_timer timer{c, store_op::fence_advance};
    store::fence_request f;
    f.lock = c.match.name;
    f.token = *token.value;
    f.idem = std::move(k.value->idem);
    auto r = co_await c.ctx.store.advance_fence(std::move(f));
    timer.done(r.error);
    count_write(c, r.error, *token.value, r.current_token, r.replayed, r.floor);
    if (r.error != errc::ok)
        co_return write_failure(c, r, std::nullopt, c.match.name, *token.value);
    if (!r.replayed)
        log_applied(c, std::nullopt, c.match.name, r.token);
    auto res = json_response(http::status::ok, {{"lock", c.match.name}, {"token", r.token}});
    mark_replayed(res, r.replayed);
    co_return res;
}

response fences_page(const std::vector<store::fence_info>& fences,
                     const std::optional<std::string>& next) {
    auto list = nlohmann::json::array();
    for (const auto& f : fences)
        list.push_back(fence_json(f));
    return json_response(http::status::ok,
                         {{"fences", std::move(list)},
                          {"next", next ? nlohmann::json(*next) : nlohmann::json(nullptr)}});
}

net::awaitable<response> list_fences(call c) {
    store::list_request l;
    l.prefix = c.match.query.prefix;
    l.after = c.match.query.after;
    l.limit = c.match.query.limit;
    // A scoped client sees only the locks it may read: the listing's prefix narrowed to
    // each of its read prefixes under it (disjoint), each queried for a page, the pages
    // merged. Exact pages, at most one store call per read prefix.
    std::vector<std::string> parts{l.prefix};
    if (c.ctx.scope && !c.ctx.scope->reads_everything())
        parts = readable_prefixes_under(*c.ctx.scope, l.prefix);
    if (parts.size() == 1 && parts[0] == l.prefix) {
        store_timer timer{c, store_op::fence_list};
        auto r = co_await c.ctx.store.list_fences(std::move(l));
        timer.done(r.error);
        if (r.error != errc::ok)
            co_return store_failure(c, r.error, r.message);
        co_return fences_page(r.fences, r.next);
    }
    std::vector<store::fence_info> merged;
    bool more = false;
    for (auto& part : parts) {
        store::list_request sub{std::move(part), l.after, l.limit};
        store_timer timer{c, store_op::fence_list};
        auto r = co_await c.ctx.store.list_fences(std::move(sub));
        timer.done(r.error);
        if (r.error != errc::ok)
            co_return store_failure(c, r.error, r.message);
        more = more || r.next.has_value();
        std::move(r.fences.begin(), r.fences.end(), std::back_inserter(merged));
    }
    std::sort(merged.begin(), merged.end(),
              [](const auto& a, const auto& b) { return a.lock < b.lock; });
    // Each part's page holds its first `limit` locks after the cursor, so the first
    // `limit` of the union are the filtered listing's.
    if (merged.size() > l.limit) {
        merged.resize(l.limit);
        more = true;
    }
    std::optional<std::string> next;
    if (more && !merged.empty())
        next = merged.back().lock;
    co_return fences_page(merged, next);
}

// PUT /v1/floors?prefix=P (docs/api.md#fence-floors). Checked like PUT /v1/fences/{lock}:
// token, then Idempotency-Key (its fingerprint covers the prefix as the route's name);
// the body is ignored.
net::awaitable<response> raise_floor(call c) {
    auto token = token_of(c.req);
    if (token.failure)
        co_return std::move(*token.failure);
    const std::string& prefix = c.match.name;
    const auto id = identity_of(c, prefix, *token.value, {});
    auto k = co_await idempotency_of(c, id);
    if (k.failure)
        co_return std::move(*k.failure);
    store_timer timer{c, store_op::floor_raise};
    store::floor_request f;
    f.prefix = prefix;
    f.token = *token.value;
    f.idem = std::move(k.value->idem);
    auto r = co_await c.ctx.store.raise_floor(std::move(f));
    timer.done(r.error);
    switch (r.error) {
    case errc::ok:
        break;
    case errc::stale_token:
        co_return stale_floor_response(prefix, *token.value, r.current_token);
    case errc::invalid_request:
    case errc::idempotency_key_reused:
        co_return make_error_response(r.error, r.message);
    default:
        co_return store_failure(c, r.error, r.message);
    }
    if (!r.replayed) {
        // Rare and operator-made: every raise is worth a line.
        auto fields = log_fields(c);
        fields["prefix"] = prefix;
        fields["token"] = r.token;
        logging::write(logging::level::info, "fence floor raised", fields);
    }
    auto res = json_response(http::status::ok, {{"prefix", prefix}, {"token", r.token}});
    mark_replayed(res, r.replayed);
    co_return res;
}

net::awaitable<response> list_floors(call c) {
    store_timer timer{c, store_op::floor_list};
    auto r = co_await c.ctx.store.list_floors();
    timer.done(r.error);
    if (r.error != errc::ok)
        co_return store_failure(c, r.error, r.message);
    auto floors = nlohmann::json::array();
    // A scoped client that is not admin sees the floors over names it may read.
    const bool filter = c.ctx.scope && !c.ctx.scope->admin && !c.ctx.scope->reads_everything();
    for (const auto& f : r.floors)
        if (!filter || c.ctx.scope->may_read(f.prefix))
            floors.push_back({{"prefix", f.prefix},
                              {"token", f.token},
                              {"updated_at", fence::format_rfc3339_ms(f.updated_at_ms)}});
    co_return json_response(http::status::ok, {{"floors", std::move(floors)}});
}

// `body` and `name` outlive the call (the awaiting request owns them).
net::awaitable<detail::operation_params>
parse_params(std::string_view body, std::optional<std::size_t> takes, std::string_view name) {
    if (body.size() <= inline_parse_bytes)
        co_return detail::parse_operation_params(body, takes, name);
    co_return co_await net::co_spawn(
        parse_pool(),
        [body, takes, name]() -> net::awaitable<detail::operation_params> {
            co_return detail::parse_operation_params(body, takes, name);
        },
        net::use_awaitable);
}

// The database's own text for an operation's error: for the log, whatever the reply
// shows (it may quote data from any table, or the schema).
void log_operation_error(const call& c, const store::operation_result& r) {
    if (!logging::enabled(logging::level::warn))
        return;
    auto f = log_fields(c);
    f["operation"] = c.match.name;
    f["error"] = to_string(r.error);
    f["sqlstate"] = r.sqlstate;
    f["detail"] = r.server_message;
    logging::write(logging::level::warn, "operation error", f);
}

response no_operations(std::string_view name) {
    return make_error_response(errc::not_found, "no operation '" + std::string{name} +
                                                    "': named operations need the postgres store");
}

net::awaitable<response> run_operation(call c) {
    if (!c.ctx.store.supports_operations())
        co_return no_operations(c.match.name);
    auto lock = lock_of(c.req, std::nullopt);
    if (lock.failure)
        co_return std::move(*lock.failure);
    auto token = token_of(c.req);
    if (token.failure)
        co_return std::move(*token.failure);
    const auto id = identity_of(c, *lock.value, *token.value, {});
    auto k = co_await idempotency_of(c, id);
    if (k.failure)
        co_return std::move(*k.failure);
    auto params = co_await parse_params(
        c.req.body(), c.ctx.store.operation_param_count(c.match.name), c.match.name);
    if (!params.error.empty())
        co_return make_error_response(errc::invalid_request, std::move(params.error));
    // The parameters hold what the statement needs; the body is not kept while the
    // request waits for a connection, and the parameters' buffer gives back what they
    // did not take of the body's size only then (a copy of them, while the body is gone).
    std::string{}.swap(c.req.body());
    params.values.shrink_to_fit();

    store::operation_request o;
    o.name = c.match.name;
    o.lock = *lock.value;
    o.token = *token.value;
    o.params = std::move(params.values);
    o.idem = std::move(k.value->idem);
    store_timer timer{c, store_op::operation};
    auto r = co_await c.ctx.store.run_operation(std::move(o));
    timer.done(r.error);
    count_write(c, r.error, *token.value, r.current_token, r.replayed, r.floor);
    if (!r.server_message.empty())
        log_operation_error(c, r);
    switch (r.error) {
    case errc::ok:
        break;
    case errc::stale_token:
        log_stale(c, std::nullopt, *lock.value, *token.value, r.current_token, r.floor);
        co_return stale_token_response(*lock.value, *token.value, r.current_token,
                                       floor_of(r.floor));
    case errc::operation_failed:
        co_return operation_failed_response(r.sqlstate, r.message);
    case errc::not_found:
    case errc::invalid_request:
    case errc::idempotency_key_reused:
        co_return make_error_response(r.error, r.message);
    default:
        co_return store_failure(c, r.error, r.message);
    }

    if (!r.replayed)
        log_applied(c, std::nullopt, *lock.value, r.token);
    // rows_json is already a JSON array; spliced in rather than parsed and re-serialised.
    response res{http::status::ok, 11};
    res.set(http::field::content_type, "application/json");
    res.body() = "{\"token\":" + std::to_string(r.token) +
                 ",\"rows_affected\":" + std::to_string(r.rows_affected) +
                 ",\"rows\":" + (r.rows_json.empty() ? std::string{"[]"} : r.rows_json) + "}";
    mark_replayed(res, r.replayed);
    co_return res;
}

// The request's Fencing-Token, when present (POST /v1/transactions: a default for ops
// without a token); a malformed one is refused as on single writes.
checked<std::optional<token_t>> optional_token_of(const request& req) {
    if (fields_named(req, fencing_token_field).count == 0 &&
        fields_named(req, fencing_token_alias).count == 0)
        return {std::optional<token_t>{}, std::nullopt};
    auto t = token_of(req);
    if (t.failure)
        return {std::nullopt, std::move(t.failure)};
    return {std::optional<token_t>{*t.value}, std::nullopt};
}

// What a transaction's error replies and log lines need of each op, kept when the ops
// move into the store's request.
struct txn_op_ref {
    store::txn_op::kind kind;
    std::string key;
    std::string lock;
    token_t token = 0;
    std::string name; // operation
};

// A transaction's error: the op that decided it, by its index, in the body.
response with_op_index(response res, std::optional<std::size_t> op_index) {
    if (op_index)
        add_error_field(res, "op_index", *op_index);
    return res;
}

void log_txn_operation_error(const call& c, const store::txn_result& r, std::string_view name) {
    if (!logging::enabled(logging::level::warn))
        return;
    auto f = log_fields(c);
    f["operation"] = name;
    f["op_index"] = r.op_index ? nlohmann::json(*r.op_index) : nlohmann::json(nullptr);
    f["error"] = to_string(r.error);
    f["sqlstate"] = r.sqlstate;
    f["detail"] = r.server_message;
    logging::write(logging::level::warn, "operation error", f);
}

// The store's refusal of a transaction, naming the op that decided it.
response txn_failure(const call& c, const store::txn_result& r,
                     const std::vector<txn_op_ref>& ops) {
    const txn_op_ref* op = r.op_index && *r.op_index < ops.size() ? &ops[*r.op_index] : nullptr;
    switch (r.error) {
    case errc::stale_token:
        if (!op)
            break;
        log_stale(c, op->key.empty() ? std::nullopt : std::optional<std::string_view>{op->key},
                  op->lock, op->token, r.current_token, r.floor);
        return with_op_index(
            stale_token_response(op->lock, op->token, r.current_token, floor_of(r.floor)),
            r.op_index);
    case errc::lock_mismatch:
        if (!op)
            break;
        return with_op_index(lock_mismatch_response(op->key, visible_lock(c, r.lock)), r.op_index);
    case errc::precondition_failed:
        if (!op)
            break;
        if (op->kind == store::txn_op::kind::check_version)
            return with_op_index(
                make_error_response(error_reply{errc::precondition_failed,
                                                "check_version does not hold for key '" + op->key +
                                                    "'; nothing was written",
                                                {{"key", op->key}},
                                                {}}),
                r.op_index);
        return with_op_index(precondition_failed_response(op->key), r.op_index);
    case errc::operation_failed:
        return with_op_index(operation_failed_response(r.sqlstate, r.message), r.op_index);
    case errc::invalid_request:
    case errc::not_found:
        // A request the store cannot run (e.g. an operation it does not know): the
        // client's to fix, so 400 whatever the store's code.
        return with_op_index(make_error_response(errc::invalid_request, r.message), r.op_index);
    case errc::idempotency_key_reused:
        return make_error_response(r.error, r.message);
    default:
        break;
    }
    // unavailable, outcome_unknown, internal, or an op error without its op (a store bug).
    return store_failure(c,
                         r.error == errc::stale_token || r.error == errc::lock_mismatch ||
                                 r.error == errc::precondition_failed
                             ? errc::internal
                             : r.error,
                         r.message);
}

// The coroutine parse_pool runs: its arguments live in its own frame. It was a coroutine
// lambda with the rules as a capture, and our GCC 12 build aborted destroying it
// (`free(): invalid pointer`) after every transaction above inline_parse_bytes with a
// Fencing-Lock header: one request took the process down (test_hostile_memory.py and
// test_hostile_disk.py send such bodies).
net::awaitable<detail::txn_body> parse_txn_there(std::string_view body,
                                                 detail::txn_body_rules rules) {
    co_return detail::parse_txn_body(body, rules);
}

// `body` outlives the call (the awaiting request owns it); `rules` is copied.
net::awaitable<detail::txn_body> parse_txn(std::string_view body, detail::txn_body_rules rules) {
    if (body.size() <= inline_parse_bytes)
        co_return detail::parse_txn_body(body, rules);
    co_return co_await net::co_spawn(parse_pool(), parse_txn_there(body, std::move(rules)),
                                     net::use_awaitable);
}

// POST /v1/transactions (docs/api.md#post-v1transactions). Checked in this order: the
// header defaults (Fencing-Token, Fencing-Lock), the body (every op, then
// store::validate_txn), the Idempotency-Key; then one store call decides every op.
// A transaction's header defaults for its ops: Fencing-Token and Fencing-Lock, each
// optional, each refused as on single writes when malformed.
struct txn_defaults {
    std::optional<token_t> token;
    std::optional<std::string> lock;
};

checked<txn_defaults> txn_defaults_of(const request& req) {
    auto token = optional_token_of(req);
    if (token.failure)
        return {std::nullopt, std::move(token.failure)};
    txn_defaults d{*token.value, std::nullopt};
    if (fields_named(req, fencing_lock_field).count > 0) {
        auto l = lock_of(req, std::nullopt);
        if (l.failure)
            return {std::nullopt, std::move(l.failure)};
        d.lock = std::move(*l.value);
    }
    return {std::move(d), std::nullopt};
}

// A transaction of guards only (check, check_version) changes nothing: a retry cannot
// apply it twice, so its Idempotency-Key is checked for form and neither claimed nor
// recorded (a record would be storage held for a request that wrote nothing). Any other
// transaction's key as on the other routes. (A coroutine of its own: a co_await inside a
// conditional expression double-destroyed its temporary under GCC 12.)
net::awaitable<checked<keyed>> txn_idempotency_of(const call& c, const request_identity& id,
                                                  const std::vector<store::txn_op>& ops) {
    const bool writes = std::any_of(ops.begin(), ops.end(), [](const store::txn_op& op) {
        return op.op != store::txn_op::kind::check && op.op != store::txn_op::kind::check_version;
    });
    if (!writes)
        co_return checked<keyed>{keyed{}, idempotency_key_problem(c.req)};
    co_return co_await idempotency_of(c, id);
}

net::awaitable<response> post_transaction(call c) {
    auto defaults = txn_defaults_of(c.req);
    if (defaults.failure)
        co_return std::move(*defaults.failure);
    auto& [token, lock] = *defaults.value;

    detail::txn_body_rules rules;
    rules.max_ops = c.ctx.settings.http.max_txn_ops;
    rules.max_op_body_bytes = c.ctx.settings.http.max_txn_op_body_bytes;
    rules.token = token;
    rules.lock = lock;
    rules.operations = c.ctx.store.supports_operations();
    rules.param_count = [&store = c.ctx.store](const std::string& name) {
        return store.operation_param_count(name);
    };
    rules.known = [&store = c.ctx.store](const std::string& name) {
        return store.has_operation(name);
    };
    auto parsed = co_await parse_txn(c.req.body(), std::move(rules));
    if (parsed.error != errc::ok)
        co_return with_op_index(make_error_response(parsed.error, std::move(parsed.message)),
                                parsed.op_index);
    // A scoped client: every op's key and lock (after the defaults) in scope, before the
    // Idempotency-Key is looked at and before any op runs (docs/api.md#scopes).
    if (c.ctx.scope)
        for (std::size_t i = 0; i < parsed.ops.size(); ++i)
            if (auto why = forbidden_op(*c.ctx.scope, parsed.ops[i])) {
                log_forbidden(c, *why);
                co_return with_op_index(
                    make_error_response(errc::forbidden, "op " + std::to_string(i) + ": " + *why),
                    i);
            }

    // The fingerprint covers the body as sent and the headers that give it meaning, as on
    // the other routes. A Fencing-Token of 0 and none at all hash alike: they differ only
    // for a body with an op without a token, which is refused without one (400 above).
    // identity_of keeps views: the lock's text must outlive the fingerprint (a temporary
    // here was a stack-use-after-scope under ASan).
    const std::string lock_text = lock.value_or("");
    const auto id = identity_of(c, lock_text, token.value_or(0), {});
    auto k = co_await txn_idempotency_of(c, id, parsed.ops);
    if (k.failure)
        co_return std::move(*k.failure);
    // The ops hold what the store needs; the body is not kept while the store works.
    std::string{}.swap(c.req.body());

    std::vector<txn_op_ref> refs;
    refs.reserve(parsed.ops.size());
    for (const auto& op : parsed.ops)
        refs.push_back({op.op, op.key, op.lock, op.token, op.name});

    store::txn_result r;
    if (parsed.unknown_operation) {
        // The store's first check, answered here: the parser kept no parameters of a
        // transaction it cannot run (docs/operations.md, "Memory").
        r.error = errc::invalid_request;
        r.op_index = *parsed.unknown_operation;
        r.message = "no operation '" + refs[*r.op_index].name + "'";
    } else {
        store::txn_request t;
        t.ops = std::move(parsed.ops);
        t.idem = std::move(k.value->idem);
        store_timer timer{c, store_op::transaction};
        r = co_await c.ctx.store.transact(std::move(t));
        timer.done(r.error);
    }
    const txn_op_ref* failing =
        r.op_index && *r.op_index < refs.size() ? &refs[*r.op_index] : nullptr;
    count_write(c, r.error, failing ? failing->token : 0, r.current_token, r.replayed, r.floor);
    if (!r.server_message.empty()) {
        const bool named = failing && failing->kind == store::txn_op::kind::operation;
        log_txn_operation_error(c, r, named ? std::string_view{failing->name} : "");
    }
    if (r.error != errc::ok)
        co_return txn_failure(c, r, refs);

    if (!r.replayed && logging::enabled(logging::level::debug)) {
        auto f = log_fields(c);
        f["ops"] = refs.size();
        auto locks = nlohmann::json::array();
        for (std::size_t i = 0; i < refs.size(); ++i) {
            if (refs[i].kind == store::txn_op::kind::check_version)
                continue;
            bool seen = false;
            for (std::size_t j = 0; j < i && !seen; ++j)
                seen = refs[j].kind != store::txn_op::kind::check_version &&
                       refs[j].lock == refs[i].lock;
            if (!seen)
                locks.push_back({{"lock", refs[i].lock}, {"token", refs[i].token}});
        }
        f["locks"] = std::move(locks);
        logging::write(logging::level::debug, "transaction committed", f);
    }
    // results_json is already a JSON array; spliced in rather than parsed and re-serialised.
    response res{http::status::ok, 11};
    res.set(http::field::content_type, "application/json");
    res.body() =
        "{\"results\":" + (r.results_json.empty() ? std::string{"[]"} : r.results_json) + "}";
    mark_replayed(res, r.replayed);
    co_return res;
}

// Step 8 of the order of checks: the target's match refuses it (404, 405, a bad name or
// query).
std::optional<response> route_refusal(const route_match& m) {
    if (m.error == errc::method_not_allowed)
        return method_not_allowed_response(m.allow, m.message);
    if (m.error != errc::ok)
        return make_error_response(m.error, m.message);
    return std::nullopt;
}

net::awaitable<response> dispatch(call c) {
    const auto& m = c.match;
    if (auto refused = route_refusal(m))
        co_return std::move(*refused);

    auto method = c.req.method();
    switch (m.kind) {
    case route::resource:
        if (method == http::verb::put)
            co_return co_await put_resource(c);
        if (method == http::verb::delete_)
            co_return co_await delete_resource(c);
        co_return co_await get_resource(c);
    case route::fence:
        if (method == http::verb::put)
            co_return co_await put_fence(c);
        co_return co_await get_fence(c);
    case route::fences_list:
        co_return co_await list_fences(c);
    case route::floors:
        if (method == http::verb::put)
            co_return co_await raise_floor(c);
        co_return co_await list_floors(c);
    case route::operation:
        co_return co_await run_operation(c);
    case route::transactions:
        co_return co_await post_transaction(c);
    case route::healthz: {
        // The liveness probe, asked often: a fixed body, no JSON tree.
        response res{http::status::ok, 11};
        res.set(http::field::content_type, "application/json");
        res.body() = R"({"status":"ok"})";
        co_return res;
    }
    case route::readyz:
        if (c.ctx.store.ready())
            co_return json_response(http::status::ok, {{"status", "ready"}});
        co_return make_error_response(errc::unavailable, "the store is not ready");
    case route::metrics: {
        if (!c.ctx.stats)
            co_return make_error_response(errc::not_found, "metrics are not enabled");
        response res{http::status::ok, 11};
        res.set(http::field::content_type, metrics_content_type);
        res.body() = c.ctx.stats->render();
        co_return res;
    }
    case route::not_found:
        break;
    }
    co_return make_error_response(errc::not_found, "no such route");
}

} // namespace

std::optional<response> refusal_from_head(const store::store& store, const request& head,
                                          const route_match& match) {
    if (auto refused = route_refusal(match))
        return refused;
    const auto method = head.method();
    switch (match.kind) {
    case route::resource:
        if (method != http::verb::put && method != http::verb::delete_)
            return std::nullopt;
        if (auto h = write_headers_of(head, match.name); h.failure)
            return std::move(h.failure);
        return idempotency_key_problem(head);
    case route::fence:
    case route::floors:
        if (method != http::verb::put)
            return std::nullopt;
        if (auto token = token_of(head); token.failure)
            return std::move(token.failure);
        return idempotency_key_problem(head);
    case route::operation:
        if (!store.supports_operations())
            return no_operations(match.name);
        if (auto lock = lock_of(head, std::nullopt); lock.failure)
            return std::move(lock.failure);
        if (auto token = token_of(head); token.failure)
            return std::move(token.failure);
        return idempotency_key_problem(head);
    case route::transactions:
        // Its Idempotency-Key is looked at only once the ops are parsed and in scope.
        return std::move(txn_defaults_of(head).failure);
    default:
        return std::nullopt;
    }
}

std::string request_id_of(const request& req) {
    auto field = fields_named(req, request_id_field);
    return detail::request_id_for(field.count == 1 ? field.first : std::nullopt);
}

void finish_response(response& res, bool head, unsigned request_version, bool keep_alive,
                     std::string_view request_id) {
    res.version(request_version == 10 ? 10 : 11);
    res.set(request_id_field, request_id);
    if (head) {
        if (!res.body().empty() || res.find(http::field::content_length) == res.end())
            res.content_length(res.body().size());
        res.body().clear();
    } else if (res.result() == http::status::no_content ||
               res.result() == http::status::not_modified) {
        // RFC 9110 §8.6: no Content-Length in a 204 (Beast's prepare_payload would add 0).
        res.body().clear();
        res.erase(http::field::content_length);
    } else {
        res.prepare_payload();
    }
    res.keep_alive(keep_alive);
}

net::awaitable<response> handle_request(handler_context& ctx, request&& req) {
    auto match = match_route(req.method(), req.target());
    co_return co_await handle_request(ctx, std::move(req), std::move(match));
}

net::awaitable<response> handle_request(handler_context& ctx, request&& req, route_match match) {
    ctx.request_id = request_id_of(req);
    const bool head = req.method() == http::verb::head;
    const bool keep_alive = req.keep_alive();
    const unsigned version = req.version();
    response res;
    std::optional<std::string> failure;
    try {
        ctx.matched = match.kind;
        res = co_await dispatch(call{ctx, req, match, head});
    } catch (const std::exception& e) {
        failure = e.what();
    } catch (...) {
        failure = "unknown exception";
    }
    if (failure) {
        logging::write(logging::level::error, "request failed with an exception",
                       {{"exception", *failure},
                        {"method", std::string_view{req.method_string()}},
                        {"peer", ctx.peer},
                        {"request_id", ctx.request_id}});
        res = make_error_response(errc::internal, "");
    }
    finish_response(res, head, version, keep_alive, ctx.request_id);
    co_return res;
}

} // namespace fk::proxy
