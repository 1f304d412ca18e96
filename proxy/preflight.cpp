#include "proxy/preflight.hpp"

#include "backends/postgres/uri_check.hpp"
#include "proxy/auth.hpp"
#include "proxy/tls.hpp"

#include <cstdlib>

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
    auto auth = resolve_auth(s);
    if (!auth.ok()) {
        r.error = auth.error;
        return r;
    }
    if (s.tls.enabled()) {
        auto tls = make_tls_context(s.tls);
        if (!tls.ok()) {
            r.error = tls.error;
            return r;
        }
        r.tls = std::move(tls.context);
        r.tls_serial = std::move(tls.serial);
        r.tls_not_after = std::move(tls.not_after);
        r.tls_expired = tls.expired;
    }
    r.token = std::move(auth.token);
    r.clients = std::move(auth.clients);
    return r;
}

auth_resolution resolve_auth(const config::settings& s) {
    auth_resolution r;
    if (s.auth_clients.empty()) {
        auto token = resolve_token(s.auth_token_file);
        r.token = std::move(token.token);
        r.error = std::move(token.error);
        return r;
    }
    // The parser has refused auth_token_file with auth.clients; the environment is only
    // seen here.
    if (s.auth_token_file || std::getenv(std::string(auth_token_env).c_str()) != nullptr) {
        r.error = "auth.clients and " + std::string(auth_token_env) +
                  " cannot be combined: unset it, or give the shared token its own client";
        return r;
    }
    auto clients = load_clients(s.auth_clients);
    r.clients = std::move(clients.clients);
    r.error = std::move(clients.error);
    return r;
}

std::optional<std::string> exposure_warning(const config::settings& s, bool auth_enabled) {
    // mTLS authenticates every connection by its certificate: that is auth too.
    if (auth_enabled || s.tls.client_ca_file || is_loopback_host(s.listen_host))
        return std::nullopt;
    return "WARNING: listening on " + s.listen_host +
           " without auth: anyone who can reach this port can advance fences and overwrite "
           "data. Set --auth-token-file or FENCEKEEPER_AUTH_TOKEN, or tls.client_ca_file "
           "(mTLS), or listen on 127.0.0.1.";
}

} // namespace fk::proxy
