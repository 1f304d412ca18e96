// PUT, DELETE, GET and HEAD /v1/resources/{key} (docs/api.md#resources).
#include "proxy/routes/routes.hpp"

#include "proxy/routes/pipeline.hpp"

#include <boost/beast/http/field.hpp>

namespace fk::proxy::routes {

namespace {

// A key's write (PUT or DELETE) past the pipeline's first two steps: its fencing headers
// and its Idempotency-Key's claim, held until the handler returns.
struct key_write {
    write_headers headers;
    keyed key;
};

net::awaitable<checked<key_write>> key_write_of(const call& c) {
    auto h = write_headers_of(c.req, c.match.name);
    if (h.failure)
        co_return checked<key_write>{std::nullopt, std::move(h.failure)};
    const write_headers& w = *h.value;
    const auto id = identity_of(c, w.lock, w.token, w.pre);
    auto k = co_await idempotency_of(c, id);
    if (k.failure)
        co_return checked<key_write>{std::nullopt, std::move(k.failure)};
    co_return checked<key_write>{key_write{std::move(*h.value), std::move(*k.value)}, std::nullopt};
}

// The pipeline's last step for a key's write: write_failure's reply to a refusal; on
// success the "fence advanced" line and `reply(applied)`.
template <class Reply>
response finish_key_write(const call& c, const write_headers& w, const store::write_result& r,
                          Reply&& reply) {
    return finish_write(
        c, r, w.token,
        [&](const store::write_result& refused) {
            return write_failure(c, refused, c.match.name, w.lock, w.token);
        },
        [&](const store::write_result& applied) {
            if (!applied.replayed)
                log_applied(c, c.match.name, w.lock, applied.token);
            return reply(applied);
        });
}

} // namespace

net::awaitable<response> put_resource(call c) {
    auto claimed = co_await key_write_of(c);
    if (claimed.failure)
        co_return std::move(*claimed.failure);
    const write_headers& w = claimed.value->headers;

    store::put_request p;
    p.idem = std::move(claimed.value->key.idem);
    p.key = c.match.name;
    p.lock = w.lock;
    p.token = w.token;
    p.content_type = std::string{std::string_view{c.req[http::field::content_type]}};
    p.body = std::move(c.req.body());
    p.pre = w.pre;
    const auto r = co_await timed(c, store_op::put, c.ctx.store.put(std::move(p)));
    co_return finish_key_write(c, w, r, [&](const store::write_result& applied) {
        auto res = applied_put_response(applied.created, c.match.name, w.lock, applied.token,
                                        applied.version);
        res.set(http::field::etag, etag(applied.version));
        return res;
    });
}

net::awaitable<response> delete_resource(call c) {
    auto claimed = co_await key_write_of(c);
    if (claimed.failure)
        co_return std::move(*claimed.failure);
    const write_headers& w = claimed.value->headers;

    store::delete_request d;
    d.idem = std::move(claimed.value->key.idem);
    d.key = c.match.name;
    d.lock = w.lock;
    d.token = w.token;
    d.pre = w.pre;
    const auto r = co_await timed(c, store_op::del, c.ctx.store.remove(std::move(d)));
    co_return finish_key_write(c, w, r, [](const store::write_result&) {
        return response{http::status::no_content, 11};
    });
}

net::awaitable<response> get_resource(call c) {
    auto r = co_await timed(c, store_op::get, c.ctx.store.get(c.match.name, !c.head));
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

} // namespace fk::proxy::routes
