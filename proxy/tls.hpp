#pragma once
// TLS and mTLS on the listener (docs/operations.md, "TLS and mTLS"): the server's
// OpenSSL context built from config::tls_settings, the holder that SIGHUP swaps it in, and
// what a finished or failed handshake tells us (the client's identity, the failure's
// class for fencekeeper_tls_handshake_failures_total).
//
// Reload without dropping connections: every new connection copies the current
// shared_ptr<ssl::context> and keeps it for its lifetime (an SSL object must not outlive
// its SSL_CTX's settings), so a swap changes only the handshakes that start after it.

#include "config/settings.hpp"
#include "proxy/metrics.hpp"

#include <boost/asio/ssl/context.hpp>
#include <boost/system/error_code.hpp>

#include <memory>
#include <mutex>
#include <string>

namespace fk::proxy {

using ssl_context = boost::asio::ssl::context;

struct tls_context_result {
    std::shared_ptr<ssl_context> context; // null on failure
    std::string error;                    // names the file and what is wrong with it
    std::string serial;                   // the server certificate's serial, hex
    std::string not_after;                // its expiry, "Jan  1 00:00:00 2027 GMT"
    bool expired = false;                 // served anyway; the caller warns
    bool ok() const noexcept { return context != nullptr; }
};

// Reads the certificate chain, the key and (for mTLS) the client CA bundle, checks that
// the key belongs to the certificate, and builds a server context: TLS 1.2 or 1.3 from
// min_version up, no renegotiation, client certificates required and verified when
// client_ca_file is set. Blocking file I/O: never on an I/O thread. `t.enabled()` must
// hold.
tls_context_result make_tls_context(const config::tls_settings& t);

// The context new connections use; swapped by SIGHUP from another thread.
class tls_credentials {
public:
    explicit tls_credentials(std::shared_ptr<ssl_context> context);
    std::shared_ptr<ssl_context> current() const;
    void set(std::shared_ptr<ssl_context> context);

private:
    // As in authenticator: a mutex around a pointer copy (see proxy/auth.hpp for why not
    // atomic<shared_ptr>).
    mutable std::mutex mutex_;
    std::shared_ptr<ssl_context> context_;
};

// The verified client certificate's identity: its first DNS or URI subjectAltName, else
// its subject CN; empty without a certificate. `ssl` is an SSL* (opaque here).
std::string peer_identity(void* ssl);
// "TLSv1.3" and the like.
std::string protocol_of(void* ssl);

// The class of a failed handshake, from its error code.
tls_failure classify_handshake_error(const boost::system::error_code& ec) noexcept;

} // namespace fk::proxy
