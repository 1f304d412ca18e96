#pragma once
// A connection on a TLS listener: basic_session (proxy/session.hpp) over
// net::ssl::stream<beast::tcp_stream>. The session's transport gains a handshake, the
// client's identity and a close_notify; the request loop, its limits and its deadlines
// are the plain session's. Kept out of session.hpp so that only the server and this
// file see OpenSSL's headers.

#include "proxy/session.hpp"
#include "proxy/tls.hpp"

#include <boost/asio/ssl/stream.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include <memory>
#include <string>

namespace fk::proxy {

// Asio's own stream rather than beast::ssl_stream: the latter's flat_stream layer, given the
// session's gathered head + body write with a body over 16 KiB, completed the write after
// the head alone (Boost 1.81), and the response stalled.
using tls_stream = net::ssl::stream<beast::tcp_stream>;

template <> struct session_transport<tls_stream> {
    static void expires_after(tls_stream& s, std::chrono::steady_clock::duration d);
    static void expires_never(tls_stream& s);
    static void cancel(tls_stream& s);
    // Half-closes the TCP connection (after close_notify).
    static void shutdown_send(tls_stream& s, beast::error_code& ec);
    static void close(tls_stream& s);
    static std::string peer(tls_stream& s);

    static net::awaitable<beast::error_code> handshake(tls_stream& s);
    static tls_failure failure_of(const beast::error_code& ec) noexcept;
    static std::string identity(tls_stream& s);
    static std::string protocol(tls_stream& s);
    // Sends close_notify and waits (under the deadline in force) for the client's, or for
    // it to close; any error is ignored, the connection is closing anyway.
    static net::awaitable<void> close_notify(tls_stream& s);
};

// Compiled once, in tls_session.cpp.
extern template class basic_session<tls_stream>;

namespace detail {
// Initialised before basic_session (a base listed first), which is built on it: the
// stream's SSL object refers to the context's settings for as long as it lives.
struct tls_context_holder {
    std::shared_ptr<ssl_context> context;
};
} // namespace detail

class tls_session final : private detail::tls_context_holder, public basic_session<tls_stream> {
public:
    // `context`: the credentials' current context when the connection was accepted; the
    // connection keeps it whatever a SIGHUP swaps in later.
    tls_session(net::ip::tcp::socket socket, std::shared_ptr<ssl_context> context,
                const session_services& services, std::shared_ptr<connection_registry> registry,
                limiter::permit connection);
};

} // namespace fk::proxy
