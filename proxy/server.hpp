#pragma once
// The listener: binds, accepts, and gives each connection its own session coroutine.
//
// Threading: `io` runs the acceptor, the signals, the drain deadline and the store. Each
// accepted connection goes, round-robin, to one of `session_contexts`: io_contexts that
// are each run by exactly one thread, so a session needs no strand (its coroutine, its
// socket's deadline timer, drain() and close() all run on that one thread) and I/O threads
// share no locks on the request path. Stores resume their callers on the caller's executor
// (backends/store.hpp), so a session on any context can use the store. With no
// session_contexts, every session gets its own strand on `io` (run by any number of
// threads).
//
// SIGTERM / SIGINT start
// a graceful drain: stop accepting, let in-flight requests finish, close idle
// keep-alive connections, and force-close whatever is left at the shutdown deadline.
//
// Admission: at most limits.max_connections connections are open; one more is accepted
// and closed at once (no response: the cheapest refusal, and the client sees a clean
// close or reset it can retry), counted in connections_rejected_total. At most
// limits.max_inflight_requests requests are served at once, process-wide (see session).
// On a TLS listener the handshake runs inside the session, under the connection's permit:
// a client that connects and stays silent holds one of max_connections until
// limits.handshake_timeout_ms, and no more.

#include "backends/net.hpp"
#include "backends/store.hpp"
#include "config/settings.hpp"
#include "proxy/overload.hpp"
#include "proxy/session.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fk::proxy {

class connection_registry;
class tls_credentials;

class server {
public:
    // Everything in `services` must outlive the server and every session it started.
    // `tls` (optional, must outlive the server): the listener speaks TLS only, each new
    // connection with the credentials' context of the moment (proxy/tls_session.hpp).
    server(net::io_context& io, const session_services& services,
           std::vector<net::io_context*> session_contexts = {},
           const tls_credentials* tls = nullptr);
    ~server();
    server(const server&) = delete;
    server& operator=(const server&) = delete;

    // Resolves settings.listen_host and binds settings.listen_port (0 picks a free one).
    // Returns a message naming the address on failure.
    std::optional<std::string> listen();
    // The bound address ("127.0.0.1:43127"; IPv6 in brackets).
    std::string local_address() const;

    // Starts accepting and watching SIGTERM / SIGINT. Call after listen().
    void start();

    // Starts the graceful drain, as a first SIGTERM does. Thread-safe, idempotent.
    void shutdown();
    // Blocks the calling thread (never an I/O thread) until every connection has closed
    // or the shutdown deadline has passed and the rest were closed.
    void wait_drained();

    std::size_t open_connections() const;

private:
    net::awaitable<void> accept_loop();
    template <class Session> void spawn(std::shared_ptr<Session> s);
    // Where the next accepted connection runs.
    net::any_io_executor next_session_executor();
    void watch_signals();
    void drained();

    net::io_context& io_;
    std::vector<net::io_context*> session_contexts_;
    std::size_t next_context_ = 0; // acceptor strand only
    session_services services_;
    const config::settings& settings_;
    const tls_credentials* tls_;
    net::ip::tcp::acceptor acceptor_;
    net::signal_set signals_;
    net::steady_timer deadline_;
    std::shared_ptr<connection_registry> registry_;
    std::atomic<bool> shutting_down_{false};
    std::atomic<bool> drained_flag_{false};
    std::promise<void> drained_;
};

} // namespace fk::proxy
