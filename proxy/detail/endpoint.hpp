#pragma once
// "ip:port" for logs and the startup line; IPv6 addresses in brackets ("[::1]:8080").

#include <boost/asio/ip/tcp.hpp>

#include <string>

namespace fk::proxy::detail {

std::string format_endpoint(const boost::asio::ip::tcp::endpoint& ep);

} // namespace fk::proxy::detail
