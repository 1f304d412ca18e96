#pragma once
// One HTTP/1.1 connection: a coroutine on its own executor (a strand, or an io_context run
// by one thread; see server.hpp) that reads requests one after
// another (so pipelined requests are answered in order), hands each to handle_request
// and writes the response. Every read and write has a deadline; a framing error, a
// limit or a deadline ends only this connection.
//
// Per request: the head is read (bounded by max_header_bytes), then admit()
// (proxy/admission.hpp) decides, from the head alone, in the order docs/operations.md
// gives: framing, target, credentials (401 before any body byte is read), body rules
// (open routes take none; a declared length over max_body_bytes is 413), then a
// process-wide in-flight permit (503 + Retry-After when none is left, before the body is
// read, so that bodies in memory are bounded by max_inflight_requests × max_body_bytes).
// Then the body (a chunk-size line or trailer section held incomplete is bounded by
// max_header_bytes, see request_feed.hpp; a non-empty trailer section is refused), the
// handler and the response. A connection
// serves one request at a time: its in-flight count is at most 1 by construction.
//
// The loop is one template over the transport, basic_session<Stream>: production runs it
// over beast::tcp_stream (`session`, instantiated once, in session.cpp), and
// tests/unit/proxy_session_test.cpp over Beast's in-memory test stream with failure
// injection. What differs between transports (deadlines, half-close, close, the peer's
// name) goes through session_transport<Stream>; the member definitions are in
// proxy/detail/session_impl.hpp, included only where an instantiation is made.
//
// TLS (proxy/tls_session.hpp) is one more transport, Asio's ssl::stream over the same
// tcp_stream: its session_transport adds handshake() (run before the first request, under
// limits.handshake_timeout_ms, while the connection already holds its max_connections
// permit) and close_notify() (before a lingering close). The request loop is the same.

#include "backends/net.hpp"
#include "backends/store.hpp"
#include "config/settings.hpp"
#include "proxy/connection_registry.hpp"
#include "proxy/detail/request_feed.hpp"
#include "proxy/handlers.hpp"
#include "proxy/idempotency.hpp"
#include "proxy/metrics.hpp"
#include "proxy/overload.hpp"
#include "proxy/router.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace fk::proxy {

class authenticator;

// What every session shares. All of it must outlive every session (main owns it).
struct session_services {
    store::store& store;
    const config::settings& settings;
    metrics& stats;
    const authenticator& auth;
    limiter& connections; // open connections (limits.max_connections)
    limiter& inflight;    // requests being served, process-wide (limits.max_inflight_requests)
    inflight_keys& idempotency_keys; // Idempotency-Keys of requests being served
};

// The customisation point: what the session needs of a transport beyond
// async_read_some / async_write_some. A specialisation provides, as static functions:
//   expires_after(Stream&, duration)   a deadline for the reads and writes that follow
//   expires_never(Stream&)             none (while the handler runs)
//   cancel(Stream&)                    end a pending read now (drain of an idle connection)
//   shutdown_send(Stream&, error_code&) half-close: the peer sees the end of the response
//   close(Stream&)                     close both directions now; pending operations end
//   peer(Stream&) -> std::string       the client's address, for logs
// and, for a transport with a handshake (TLS), also:
//   handshake(Stream&) -> awaitable<error_code>  the server side of the handshake
//   failure_of(const error_code&) -> tls_failure its class, for the metrics
//   identity(Stream&) -> std::string   the client certificate's identity (empty: none)
//   protocol(Stream&) -> std::string   the version agreed, for logs
//   close_notify(Stream&) -> awaitable<void> the orderly end before a lingering close
// All are called on the stream's executor. A lingering close reads and drops what the
// client still sends from beast::get_lowest_layer(stream) (for TLS, the TCP stream).
template <class Stream> struct session_transport;

template <> struct session_transport<beast::tcp_stream> {
    static void expires_after(beast::tcp_stream& s, std::chrono::steady_clock::duration d);
    static void expires_never(beast::tcp_stream& s);
    static void cancel(beast::tcp_stream& s);
    static void shutdown_send(beast::tcp_stream& s, beast::error_code& ec);
    static void close(beast::tcp_stream& s);
    static std::string peer(beast::tcp_stream& s);
};

template <class Stream>
class basic_session : public drainable, public std::enable_shared_from_this<basic_session<Stream>> {
public:
    // `stream`'s executor must serialise its handlers (a strand, or an io_context run by
    // exactly one thread): run(), drain() and close() all use it.
    // `connection` is the max_connections permit this connection holds until it closes.
    basic_session(Stream stream, const session_services& services,
                  std::shared_ptr<connection_registry> registry, limiter::permit connection);
    basic_session(const basic_session&) = delete;
    basic_session& operator=(const basic_session&) = delete;

    // Serves the connection until the client closes it, a deadline passes, an error
    // that ends the connection, or a drain. Spawn it on the stream's executor.
    net::awaitable<void> run();

    // Thread-safe. Stops after the request in flight (its response says
    // Connection: close); a connection waiting for its next request closes at once.
    void drain() override;
    // Thread-safe. Closes the connection now, whatever is in flight.
    void close() override;

    const std::string& peer() const noexcept { return peer_; }
    // The client certificate's identity once a mutual TLS handshake is done; else empty.
    const std::string& client() const noexcept { return client_; }
    net::any_io_executor executor() { return stream_.get_executor(); }

private:
    using transport = session_transport<Stream>;

    // The transport's handshake, if it has one; false when the connection should end.
    net::awaitable<bool> handshake();
    net::awaitable<void> serve();
    net::awaitable<bool> wait_for_request();
    net::awaitable<beast::error_code> read_until(detail::request_parser& parser,
                                                 detail::feed_phase phase,
                                                 detail::feed_progress& progress);
    using time_point = std::chrono::steady_clock::time_point;
    // Sends an error the session itself decided on (401, 503 shed, 4xx framing) and counts
    // it. keep_alive false: Connection: close, then a lingering close. `parsed` false: the
    // head is half-read, and only its request id is used.
    // `request_id` empty: taken from the head (or generated). `allow`: the Allow header of
    // a 405.
    net::awaitable<bool> reply(errc code, std::string message, const request& head, bool parsed,
                               bool keep_alive, route r, time_point started,
                               std::string request_id = {}, std::string_view allow = {});
    net::awaitable<void> reply_and_close(errc code, std::string message, const request& head,
                                         bool parsed, route r, time_point started);
    // Sends a handler's refusal decided from the head alone (refusal_from_head) while the
    // body is still unread, then closes.
    net::awaitable<void> refuse_unread_body(response res, const request& head, route r,
                                            time_point started);
    // Writes a finished response and counts it in requests_total; false when the
    // connection should end.
    net::awaitable<bool> send(response& res, route r, time_point started);
    net::awaitable<void> linger_close();

    Stream stream_;
    beast::flat_buffer buffer_;
    session_services services_;
    const config::settings& settings_;
    std::shared_ptr<connection_registry> registry_;
    limiter::permit connection_;
    metrics::gauge_guard open_gauge_;
    std::string peer_;
    std::string client_;
    std::string head_; // the serialised response head, reused across requests
    // Only touched on the stream's executor.
    bool idle_ = false;     // waiting for the first byte of a request
    bool draining_ = false; // finish the current request, then close
    bool closed_ = false;
};

// Compiled once, in session.cpp.
extern template class basic_session<beast::tcp_stream>;

// A connection accepted by the server.
class session final : public basic_session<beast::tcp_stream> {
public:
    session(net::ip::tcp::socket socket, const session_services& services,
            std::shared_ptr<connection_registry> registry, limiter::permit connection);
};

} // namespace fk::proxy
