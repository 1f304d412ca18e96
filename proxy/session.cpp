#include "proxy/session.hpp"

#include "proxy/detail/endpoint.hpp"
#include "proxy/detail/session_impl.hpp"

namespace fk::proxy {

void session_transport<beast::tcp_stream>::expires_after(beast::tcp_stream& s,
                                                         std::chrono::steady_clock::duration d) {
    s.expires_after(d);
}

void session_transport<beast::tcp_stream>::expires_never(beast::tcp_stream& s) {
    s.expires_never();
}

void session_transport<beast::tcp_stream>::cancel(beast::tcp_stream& s) {
    s.cancel();
}

void session_transport<beast::tcp_stream>::shutdown_send(beast::tcp_stream& s,
                                                         beast::error_code& ec) {
    s.socket().shutdown(net::ip::tcp::socket::shutdown_send, ec);
}

void session_transport<beast::tcp_stream>::close(beast::tcp_stream& s) {
    beast::error_code ec;
    s.socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
    s.close();
}

std::string session_transport<beast::tcp_stream>::peer(beast::tcp_stream& s) {
    beast::error_code ec;
    auto ep = s.socket().remote_endpoint(ec);
    return ec ? std::string{"unknown"} : detail::format_endpoint(ep);
}

template class basic_session<beast::tcp_stream>;

session::session(net::ip::tcp::socket socket, const session_services& services,
                 std::shared_ptr<connection_registry> registry, limiter::permit connection)
    : basic_session(beast::tcp_stream{std::move(socket)}, services, std::move(registry),
                    std::move(connection)) {}

} // namespace fk::proxy
