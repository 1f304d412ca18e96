#pragma once
// One HTTP/1.1 connection: a coroutine on its own strand that reads requests one after
// another (so pipelined requests are answered in order), hands each to handle_request
// and writes the response. Every read and write has a deadline; a framing error, a
// limit or a deadline ends only this connection.

#include "backends/net.hpp"
#include "backends/store.hpp"
#include "config/settings.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace fk::proxy {

class connection_registry;

class session : public std::enable_shared_from_this<session> {
public:
    // `socket`'s executor must be a strand: run(), drain() and close() all use it.
    session(net::ip::tcp::socket socket, store::store& store, const config::settings& settings,
            std::shared_ptr<connection_registry> registry);
    session(const session&) = delete;
    session& operator=(const session&) = delete;

    // Serves the connection until the client closes it, a deadline passes, an error
    // that ends the connection, or a drain. Spawn it on the socket's executor.
    net::awaitable<void> run();

    // Thread-safe. Stops after the request in flight (its response says
    // Connection: close); a connection waiting for its next request closes at once.
    void drain();
    // Thread-safe. Closes the socket now, whatever is in flight.
    void close();

    const std::string& peer() const noexcept { return peer_; }
    net::any_io_executor executor() { return stream_.get_executor(); }

private:
    net::awaitable<void> serve();
    net::awaitable<bool> wait_for_request();
    net::awaitable<beast::error_code> read_header(http::request_parser<http::string_body>& parser);
    net::awaitable<void> reply_and_close(errc code, std::string message, bool head,
                                         unsigned version, std::string request_id);
    net::awaitable<void> linger_close();

    beast::tcp_stream stream_;
    beast::flat_buffer buffer_;
    store::store& store_;
    const config::settings& settings_;
    std::shared_ptr<connection_registry> registry_;
    std::string peer_;
    // Strand-only state.
    bool idle_ = false;     // waiting for the first byte of a request
    bool draining_ = false; // finish the current request, then close
    bool closed_ = false;
};

} // namespace fk::proxy
