#pragma once
// The one alias header for Asio and Beast (declarations only: both are compiled once, in
// backends/detail/asio_impl.cpp).

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

namespace boost::beast::http {}

namespace fk {
namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
} // namespace fk
