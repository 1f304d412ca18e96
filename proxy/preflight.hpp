#pragma once
// The checks of a parsed configuration that need more than the parser (docs/operations.md,
// "Lifecycle and signals"): the store URL, the auth token (file or environment), the TLS
// files. What `fencekeeper
// --check-config` reports, and what the server refuses to start without. Nothing here opens the
// store or binds a socket.

#include "config/settings.hpp"
#include "proxy/auth.hpp"

#include <memory>
#include <optional>
#include <string>

namespace boost::asio::ssl {
class context;
}

namespace fk::proxy {

struct preflight_result {
    std::optional<std::string> token;        // the bearer token to require; nullopt: auth off
    std::vector<client_credentials> clients; // auth.clients, loaded; then `token` is nullopt
    // The TLS server context when settings.tls is on (proxy/tls.hpp); null: plain HTTP.
    std::shared_ptr<boost::asio::ssl::context> tls;
    std::string tls_serial, tls_not_after; // of its certificate, for the start line
    bool tls_expired = false;              // served anyway, with a warning
    std::string error;                     // non-empty: the configuration cannot be served
    bool ok() const noexcept { return error.empty(); }
};

// The store URL parses (a postgresql:// URI as libpq parses it, without connecting), and
// the auth token loads: from settings.auth_token_file when set,
// else from FENCEKEEPER_AUTH_TOKEN (proxy/auth.hpp, resolve_token), and the TLS
// certificate, key and client CA load and match (proxy/tls.hpp, make_tls_context).
// With auth.clients: every client's token file loads (load_clients), and neither
// auth_token_file nor FENCEKEEPER_AUTH_TOKEN is set (the modes exclude each other).
// resolve_auth is that part alone, shared with SIGHUP (proxy/reload.hpp).
struct auth_resolution {
    std::optional<std::string> token;
    std::vector<client_credentials> clients;
    std::string error;
    bool ok() const noexcept { return error.empty(); }
};
auth_resolution resolve_auth(const config::settings& s);

preflight_result preflight(const config::settings& s);

// The loud warning for a listener that anyone on the network may reach with no auth,
// nullopt when the listen host is loopback, auth is on or clients need a certificate
// (mTLS).
std::optional<std::string> exposure_warning(const config::settings& s, bool auth_enabled);

} // namespace fk::proxy
