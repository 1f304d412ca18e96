#include "proxy/detail/endpoint.hpp"

namespace fk::proxy::detail {

std::string format_endpoint(const boost::asio::ip::tcp::endpoint& ep) {
    auto address = ep.address().to_string();
    auto port = std::to_string(ep.port());
    if (ep.address().is_v6())
        return "[" + address + "]:" + port;
    return address + ":" + port;
}

} // namespace fk::proxy::detail
