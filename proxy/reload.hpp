#pragma once
// SIGHUP (docs/operations.md, "Lifecycle and signals"): re-read the auth token, the log level
// and the TLS certificate and key without touching listeners, connections or requests in
// flight.

#include <string>
#include <vector>

namespace fk::proxy {

class authenticator;
class tls_credentials;

struct reload_result {
    bool ok = false;
    std::string message; // what changed, or why nothing did
};

// Parses the original command line `args` again: the config file (if --config was given)
// is read anew and the flags still override it. Then resolves the token (the token file,
// else FENCEKEEPER_AUTH_TOKEN), or loads auth.clients (every token file; a client list
// that does not load whole is refused, and the old list stays), and, with `tls` (the listener
// speaks TLS), builds a new TLS context from the tls.* settings (certificate, key, client CA, min
// version); only when all of that succeeds are the token, the log level and the TLS context swapped
// in together (new handshakes use the new context; open connections keep theirs). On any failure
// nothing changes. A reload turns TLS neither on nor off. A reload never turns auth off: a
// configuration without a token while a token is required is refused (restart to turn auth off).
// Other settings (listen address, store, limits) need a restart and are ignored here. Logs the
// outcome (info, or error on failure). Does blocking file I/O: never call it on an I/O thread.
reload_result reload_settings(const std::vector<std::string>& args, authenticator& auth,
                              tls_credentials* tls = nullptr);

} // namespace fk::proxy
