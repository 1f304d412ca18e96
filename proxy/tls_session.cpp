#include "proxy/tls_session.hpp"

#include "proxy/detail/endpoint.hpp"
#include "proxy/detail/session_impl.hpp"

#include <boost/asio/ssl/stream_base.hpp>

namespace fk::proxy {

void session_transport<tls_stream>::expires_after(tls_stream& s,
                                                  std::chrono::steady_clock::duration d) {
    beast::get_lowest_layer(s).expires_after(d);
}

void session_transport<tls_stream>::expires_never(tls_stream& s) {
    beast::get_lowest_layer(s).expires_never();
}

void session_transport<tls_stream>::cancel(tls_stream& s) {
    beast::get_lowest_layer(s).cancel();
}

void session_transport<tls_stream>::shutdown_send(tls_stream& s, beast::error_code& ec) {
    beast::get_lowest_layer(s).socket().shutdown(net::ip::tcp::socket::shutdown_send, ec);
}

void session_transport<tls_stream>::close(tls_stream& s) {
    auto& tcp = beast::get_lowest_layer(s);
    beast::error_code ec;
    tcp.socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
    tcp.close();
}

std::string session_transport<tls_stream>::peer(tls_stream& s) {
    beast::error_code ec;
    auto ep = beast::get_lowest_layer(s).socket().remote_endpoint(ec);
    return ec ? std::string{"unknown"} : detail::format_endpoint(ep);
}

net::awaitable<beast::error_code> session_transport<tls_stream>::handshake(tls_stream& s) {
    auto [ec] = co_await s.async_handshake(net::ssl::stream_base::server, detail::use_tuple);
    co_return ec;
}

tls_failure session_transport<tls_stream>::failure_of(const beast::error_code& ec) noexcept {
    return classify_handshake_error(ec);
}

std::string session_transport<tls_stream>::identity(tls_stream& s) {
    return peer_identity(s.native_handle());
}

std::string session_transport<tls_stream>::protocol(tls_stream& s) {
    return protocol_of(s.native_handle());
}

net::awaitable<void> session_transport<tls_stream>::close_notify(tls_stream& s) {
    co_await s.async_shutdown(detail::use_tuple);
}

template class basic_session<tls_stream>;

tls_session::tls_session(net::ip::tcp::socket socket, std::shared_ptr<ssl_context> context,
                         const session_services& services,
                         std::shared_ptr<connection_registry> registry, limiter::permit connection)
    : detail::tls_context_holder{std::move(context)},
      basic_session(tls_stream{beast::tcp_stream{std::move(socket)}, *this->context}, services,
                    std::move(registry), std::move(connection)) {}

} // namespace fk::proxy
