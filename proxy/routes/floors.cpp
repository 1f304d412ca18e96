// PUT and GET /v1/floors (docs/api.md#fence-floors).
#include "proxy/routes/routes.hpp"

#include "backends/log/logging.hpp"
#include "fence/rfc3339.hpp"
#include "proxy/routes/pipeline.hpp"
#include "proxy/scopes.hpp"

namespace fk::proxy::routes {

// PUT /v1/floors?prefix=P (docs/api.md#fence-floors). Checked like PUT /v1/fences/{lock}:
// token, then Idempotency-Key (its fingerprint covers the prefix as the route's name);
// the body is ignored.
net::awaitable<response> raise_floor(call c) {
    auto token = token_of(c.req);
    if (token.failure)
        co_return std::move(*token.failure);
    const token_t t = *token.value;
    const std::string& prefix = c.match.name;
    const auto id = identity_of(c, prefix, t, {});
    auto k = co_await idempotency_of(c, id);
    if (k.failure)
        co_return std::move(*k.failure);
    store::floor_request f;
    f.prefix = prefix;
    f.token = t;
    f.idem = std::move(k.value->idem);
    const auto r = co_await timed(c, store_op::floor_raise, c.ctx.store.raise_floor(std::move(f)));
    // A raise is not a write: writes_total does not count it.
    co_return finish_write(
        c, r, t,
        [&](const store::write_result& refused) {
            switch (refused.error) {
            case errc::stale_token:
                return stale_floor_response(prefix, t, refused.current_token);
            case errc::invalid_request:
            case errc::idempotency_key_reused:
                return make_error_response(refused.error, refused.message);
            default:
                return store_failure(c, refused.error, refused.message);
            }
        },
        [&](const store::write_result& applied) {
            if (!applied.replayed) {
                // Rare and operator-made: every raise is worth a line.
                auto fields = log_fields(c);
                fields["prefix"] = prefix;
                fields["token"] = applied.token;
                logging::write(logging::level::info, "fence floor raised", fields);
            }
            return json_response(http::status::ok, {{"prefix", prefix}, {"token", applied.token}});
        },
        false);
}

net::awaitable<response> list_floors(call c) {
    auto r = co_await timed(c, store_op::floor_list, c.ctx.store.list_floors());
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

} // namespace fk::proxy::routes
