// POST /v1/operations/{name} (docs/api.md#operations): the Postgres store's named SQL
// operations.
#include "proxy/routes/routes.hpp"

#include "backends/log/logging.hpp"
#include "proxy/detail/operation_params.hpp"
#include "proxy/routes/pipeline.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/field.hpp>

namespace fk::proxy::routes {

namespace {

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

} // namespace

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
    const std::string& l = *lock.value;
    const token_t t = *token.value;
    const auto id = identity_of(c, l, t, {});
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
    o.lock = l;
    o.token = t;
    o.params = std::move(params.values);
    o.idem = std::move(k.value->idem);
    const auto r = co_await timed(c, store_op::operation, c.ctx.store.run_operation(std::move(o)));
    if (!r.server_message.empty())
        log_operation_error(c, r);
    co_return finish_write(
        c, r, t,
        [&](const store::operation_result& refused) {
            switch (refused.error) {
            case errc::stale_token:
                log_stale(c, std::nullopt, l, t, refused.current_token, refused.floor);
                return stale_token_response(l, t, refused.current_token, floor_of(refused.floor));
            case errc::operation_failed:
                return operation_failed_response(refused.sqlstate, refused.message);
            case errc::not_found:
            case errc::invalid_request:
            case errc::idempotency_key_reused:
                return make_error_response(refused.error, refused.message);
            default:
                return store_failure(c, refused.error, refused.message);
            }
        },
        [&](const store::operation_result& applied) {
            if (!applied.replayed)
                log_applied(c, std::nullopt, l, applied.token);
            // rows_json is already a JSON array; spliced in rather than parsed and
            // re-serialised.
            response res{http::status::ok, 11};
            res.set(http::field::content_type, "application/json");
            res.body() =
                "{\"token\":" + std::to_string(applied.token) +
                ",\"rows_affected\":" + std::to_string(applied.rows_affected) +
                ",\"rows\":" + (applied.rows_json.empty() ? std::string{"[]"} : applied.rows_json) +
                "}";
            return res;
        });
}

} // namespace fk::proxy::routes
