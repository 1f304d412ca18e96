// GET /healthz, /readyz and /metrics (docs/api.md#probes, docs/operations.md#metrics).
#include "proxy/routes/routes.hpp"

#include "proxy/routes/pipeline.hpp"

#include <boost/beast/http/field.hpp>

namespace fk::proxy::routes {

namespace {

constexpr std::string_view metrics_content_type = "text/plain; version=0.0.4; charset=utf-8";

} // namespace

// The liveness probe, asked often: a fixed body, no JSON tree.
response healthz() {
    response res{http::status::ok, 11};
    res.set(http::field::content_type, "application/json");
    res.body() = R"({"status":"ok"})";
    return res;
}

response readyz(const call& c) {
    if (c.ctx.store.ready())
        return json_response(http::status::ok, {{"status", "ready"}});
    return make_error_response(errc::unavailable, "the store is not ready");
}

response get_metrics(const call& c) {
    if (!c.ctx.stats)
        return make_error_response(errc::not_found, "metrics are not enabled");
    response res{http::status::ok, 11};
    res.set(http::field::content_type, metrics_content_type);
    res.body() = c.ctx.stats->render();
    return res;
}

} // namespace fk::proxy::routes
