#pragma once
// Optional bearer-token auth. When a token is configured, every request except
// /healthz and /readyz must carry `Authorization: Bearer <token>`, else 401
// unauthorized (which routes are open is decided by proxy/admission.hpp, from the
// router's match, so that the two cannot disagree). The token comes from a file (--auth-token-file)
// or, failing that, from the environment variable FENCEKEEPER_AUTH_TOKEN; SIGHUP re-reads it and
// swaps it in without disturbing requests in flight.
//
// Or scoped clients (config auth.clients, docs/operations.md "Scoped credentials"): each
// with its own token (from its token_file) or mTLS certificate identity, and its own scope
// (proxy/scopes.hpp). The two modes exclude each other; SIGHUP swaps the whole client list.
//
// Cheap to include: no Boost.

#include "config/settings.hpp"

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fk::proxy {

struct client_scope;

inline constexpr std::string_view auth_token_env = "FENCEKEEPER_AUTH_TOKEN";

// A token, or why none could be had. Neither set (`token` empty and `error` empty) means
// "auth is off".
struct token_source_result {
    std::optional<std::string> token;
    std::string error; // non-empty: the configured source is unusable; do not start / keep
                       // the previous token
    bool ok() const noexcept { return error.empty(); }
};

// The first line of `path`, without surrounding whitespace (so a trailing newline or CRLF
// from an editor is harmless). An unreadable file, an empty first line or a token with
// characters outside visible ASCII (0x21–0x7E) is an error naming the file.
token_source_result load_token(const std::string& path);

// The token from the value of FENCEKEEPER_AUTH_TOKEN (nullptr: unset → auth off). Set but
// blank is an error rather than "auth off", so a templating mistake fails closed.
token_source_result token_from_env(const char* value);

// What the process uses, at start and on SIGHUP: the file when `file` is given (an error
// there is an error; the environment is not consulted), else the environment (read with
// std::getenv).
token_source_result resolve_token(const std::optional<std::string>& file);

// Compares a and b in time that depends only on b's length (b is the secret): no early
// exit on the first difference, and a length mismatch still walks all of b.
bool constant_time_equal(std::string_view a, std::string_view b) noexcept;

// One scoped client, ready to match: exactly one of token and tls_identity is non-empty.
struct client_credentials {
    std::shared_ptr<const client_scope> scope;
    std::string token;
    std::string tls_identity;
};

struct clients_result {
    std::vector<client_credentials> clients;
    std::string error; // non-empty: the list cannot be used (names the client, never a token)
    bool ok() const noexcept { return error.empty(); }
};

// Reads every client's token file (as load_token) and builds its scope. A file that does
// not load, or two clients with the same token (which one a request is would be a guess),
// fails the whole list.
clients_result load_clients(const std::vector<config::auth_client>& clients);

// True for addresses that only this machine can reach: 127.0.0.0/8, ::1, localhost
// (with or without brackets). Listening elsewhere without auth deserves a loud warning.
bool is_loopback_host(std::string_view host) noexcept;

// The current token, swappable at any time from any thread (SIGHUP) while other threads
// check requests against it.
class authenticator {
public:
    authenticator() = default; // auth off
    explicit authenticator(std::optional<std::string> token);

    // nullopt turns auth off. Requests already being checked use the token they loaded.
    // Replaces any client list.
    void set_token(std::optional<std::string> token);
    // Scoped clients (non-empty) instead of the single token. Replaces the token.
    void set_clients(std::vector<client_credentials> clients);

    bool enabled() const noexcept;
    bool scoped() const noexcept; // scoped clients are configured

    struct caller {
        bool authenticated = false;                // false: 401
        std::shared_ptr<const client_scope> scope; // null: every name and route (no scoped clients)
    };
    // Who the caller is. `authorization` is the
    // Authorization field's value, nullopt when absent, "" when given more than once
    // (never accepted). `tls_identity`: the mTLS client certificate's identity, or empty.
    // Auth off, or the single token matched: no scope (everything). Scoped clients: a bearer token,
    // when sent, decides (compared in constant time with every client's token, without an
    // early exit); without one, the certificate identity names the client.
    caller identify(std::optional<std::string_view> authorization,
                    std::string_view tls_identity) const;

    // Whether a request with this Authorization field value (empty when absent) may pass.
    // Always true when auth is off. Accepts "Bearer <token>" with the scheme in any case
    // and one or more spaces after it. A request carrying Authorization twice should be
    // passed here as empty (rejected) by the caller.
    bool authorized(std::string_view authorization) const noexcept;

private:
    struct state {
        std::optional<std::string> token;
        std::vector<client_credentials> clients;
    };
    std::shared_ptr<const state> current() const;
    void set_state(std::shared_ptr<const state> next);

    // A mutex around a shared_ptr copy rather than std::atomic<std::shared_ptr>: the
    // critical section is two pointer copies, and libstdc++ 12's atomic<shared_ptr> uses
    // a spin lock that ThreadSanitizer reports as a race.
    mutable std::mutex mutex_;
    std::shared_ptr<const state> state_;
};

} // namespace fk::proxy
