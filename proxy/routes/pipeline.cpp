// The write pipeline's steps after the headers (pipeline.hpp): the Idempotency-Key's
// claim, counting, the mapping of a store's refusal to a reply, and the log lines about
// writes.
#include "proxy/routes/pipeline.hpp"

#include "backends/log/logging.hpp"
#include "proxy/scopes.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace fk::proxy::routes {

namespace {

// The caller's space of Idempotency-Keys (docs/api.md#retries-and-exactly-once): a scoped
// client's name, so that two clients never share a record, a claim or a 422; "" for the
// single bearer token and auth off, where every caller is the same caller. Client names
// are never empty (config/keys.cpp), so no client shares the "" space.
std::string_view scope_of(const call& c) noexcept {
    return c.ctx.scope ? std::string_view{c.ctx.scope->name} : std::string_view{};
}

std::optional<std::string_view> client_of(const call& c) {
    return c.ctx.client.empty() ? std::nullopt : std::optional<std::string_view>{c.ctx.client};
}

} // namespace

net::thread_pool& parse_pool() {
    static net::thread_pool pool{1};
    return pool;
}

nlohmann::json log_fields(const call& c) {
    nlohmann::json f{{"peer", c.ctx.peer}, {"request_id", c.ctx.request_id}};
    if (!c.ctx.client.empty())
        f["client"] = c.ctx.client;
    return f;
}

void log_forbidden(const call& c, std::string_view why) {
    auto f = log_fields(c);
    f["method"] = std::string_view{c.req.method_string()};
    f["route"] = to_string(c.match.kind);
    f["detail"] = why;
    logging::write(logging::level::info, "forbidden request", f);
}

std::optional<std::string_view> floor_of(const std::optional<std::string>& floor) {
    return floor ? std::optional<std::string_view>{*floor} : std::nullopt;
}

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

void mark_replayed(response& res, bool replayed) {
    if (replayed)
        res.set(idempotent_replayed_field, "true");
}

} // namespace fk::proxy::routes

namespace fk::proxy {

void join_parse_thread() {
    routes::parse_pool().join();
}

} // namespace fk::proxy
