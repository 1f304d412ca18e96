// Asio's SSL layer, compiled once (separate compilation, as backends/detail/asio_impl.cpp
// does for the rest of Asio): here rather than there so that only the proxy links OpenSSL's
// libssl.
#include <boost/asio/ssl/impl/src.hpp>
