#include "proxy/preflight.hpp"

#include "backends/postgres/uri_check.hpp"
#include "proxy/auth.hpp"

namespace fk::proxy {

preflight_result preflight(const config::settings& s) {
    preflight_result r;
    // The parser has checked it already; a settings struct built by other means has not.
    const auto location = config::parse_store_url(s.store);
    if (!location) {
        r.error = "store: expected file:PATH or a postgresql:// URI";
        return r;
    }
    // What libpq will say when the store opens, said now (no connection is made).
    if (location->kind == config::store_kind::postgres) {
        if (auto why = store::pg::check_conninfo(location->path_or_uri)) {
            r.error = "store: not a valid postgresql:// URI: " + *why;
            return r;
        }
    }
    auto token = resolve_token(s.auth_token_file);
    if (!token.ok()) {
        r.error = token.error;
        return r;
    }
    r.token = std::move(token.token);
    return r;
}

std::optional<std::string> exposure_warning(const config::settings& s, bool auth_enabled) {
    if (auth_enabled || is_loopback_host(s.listen_host))
        return std::nullopt;
    return "WARNING: listening on " + s.listen_host +
           " without auth: anyone who can reach this port can advance fences and overwrite "
           "data. Set --auth-token-file or FENCEKEEPER_AUTH_TOKEN, or listen on 127.0.0.1.";
}

} // namespace fk::proxy
