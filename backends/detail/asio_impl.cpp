// The one translation unit that compiles Asio and Beast (separate compilation):
// every other file includes only their declarations, which keeps builds fast on 2 cores.
#include <boost/asio/impl/src.hpp>
#include <boost/beast/src.hpp>
