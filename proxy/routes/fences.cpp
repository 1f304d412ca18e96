// GET and PUT /v1/fences/{lock}, GET /v1/fences (docs/api.md#fences).
#include "proxy/routes/routes.hpp"

#include "fence/rfc3339.hpp"
#include "proxy/routes/pipeline.hpp"
#include "proxy/scopes.hpp"

#include <algorithm>
#include <iterator>

namespace fk::proxy::routes {

namespace {

nlohmann::json fence_json(const store::fence_info& f) {
    return {{"lock", f.lock},
            {"token", f.token},
            {"updated_at", fence::format_rfc3339_ms(f.updated_at_ms)}};
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

} // namespace

// The effective fence (docs/api.md#fence-floors): the floor is named when it sets it.
net::awaitable<response> get_fence(call c) {
    auto r = co_await timed(c, store_op::fence_read, c.ctx.store.read_fence(c.match.name));
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
    const token_t t = *token.value;
    const auto id = identity_of(c, c.match.name, t, {});
    auto k = co_await idempotency_of(c, id);
    if (k.failure)
        co_return std::move(*k.failure);
    store::fence_request f;
    f.lock = c.match.name;
    f.token = t;
    f.idem = std::move(k.value->idem);
    const auto r =
        co_await timed(c, store_op::fence_advance, c.ctx.store.advance_fence(std::move(f)));
    co_return finish_write(
        c, r, t,
        [&](const store::write_result& refused) {
            return write_failure(c, refused, std::nullopt, c.match.name, t);
        },
        [&](const store::write_result& applied) {
            if (!applied.replayed)
                log_applied(c, std::nullopt, c.match.name, applied.token);
            return json_response(http::status::ok,
                                 {{"lock", c.match.name}, {"token", applied.token}});
        });
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
        auto r = co_await timed(c, store_op::fence_list, c.ctx.store.list_fences(std::move(l)));
        if (r.error != errc::ok)
            co_return store_failure(c, r.error, r.message);
        co_return fences_page(r.fences, r.next);
    }
    std::vector<store::fence_info> merged;
    bool more = false;
    for (auto& part : parts) {
        store::list_request sub{std::move(part), l.after, l.limit};
        auto r = co_await timed(c, store_op::fence_list, c.ctx.store.list_fences(std::move(sub)));
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

} // namespace fk::proxy::routes
