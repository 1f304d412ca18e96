// Requests in, responses out (handlers.hpp): the route table (dispatch), the refusal a
// head alone decides, and the wire's finishing touches. The handlers themselves are in
// proxy/routes/, one file per route family, over one write pipeline
// (proxy/routes/pipeline.hpp).
#include "proxy/handlers.hpp"

#include "backends/log/logging.hpp"
#include "proxy/detail/request_id.hpp"
#include "proxy/router.hpp"
#include "proxy/routes/routes.hpp"

#include <exception>
#include <utility>

namespace fk::proxy {

using namespace routes;

namespace {

constexpr std::string_view request_id_field = "X-Request-Id";

// Step 8 of the order of checks: the target's match refuses it (404, 405, a bad name or
// query).
std::optional<response> route_refusal(const route_match& m) {
    if (m.error == errc::method_not_allowed)
        return method_not_allowed_response(m.allow, m.message);
    if (m.error != errc::ok)
        return make_error_response(m.error, m.message);
    return std::nullopt;
}

// The route table: a new route is a case here and a handler in proxy/routes/.
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
    case route::healthz:
        co_return healthz();
    case route::readyz:
        co_return readyz(c);
    case route::metrics:
        co_return get_metrics(c);
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
    auto field = routes::fields_named(req, request_id_field);
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
        res = co_await dispatch(routes::call{ctx, req, match, head});
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
