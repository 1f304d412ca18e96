#pragma once
// Request routing (docs/api.md#routes) as a pure function of method and target: no I/O, no
// allocation beyond the decoded names, so every route, every 405 and every bad name is
// unit-tested without a server.

#include "fence/error.hpp"

// boost/core's string_view (via verb.hpp) needs std::ostream complete in Boost 1.81.
#include <ostream>

#include <boost/beast/http/verb.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace fk::proxy {

// The values are 0 … route_count - 1, so a route can index an array (proxy/metrics.cpp).
enum class route {
    not_found,    // no such route (error == not_found)
    resource,     // /v1/resources/{key}
    fence,        // /v1/fences/{lock}
    fences_list,  // /v1/fences?prefix=&limit=&after=
    operation,    // /v1/operations/{name}
    floors,       // /v1/floors (PUT ?prefix=, GET)
    transactions, // /v1/transactions (POST)
    healthz,      // /healthz
    readyz,       // /readyz
    metrics,      // /metrics
};
inline constexpr std::size_t route_count = static_cast<std::size_t>(route::metrics) + 1;

// The wire name of a route: the "route" field of log lines and the route label of the
// metrics. The one place these names are written.
std::string_view to_string(route r) noexcept;

inline constexpr std::size_t default_list_limit = 100;
inline constexpr std::size_t max_list_limit = 1000;

struct list_query {
    std::string prefix;               // percent-decoded; empty lists every lock
    std::optional<std::string> after; // percent-decoded; exclusive cursor
    std::size_t limit = default_list_limit;
};

struct route_match {
    route kind = route::not_found;
    // ok, or why the request cannot be served: not_found, method_not_allowed,
    // invalid_name (bad key, lock or operation name), invalid_request (bad query).
    errc error = errc::ok;
    // Decoded key, lock or operation name; for PUT /v1/floors, the decoded prefix (may be
    // empty: every lock).
    std::string name;
    list_query query;       // fences_list only
    std::string_view allow; // the route's methods; set whenever kind != not_found
    std::string message;    // human-readable detail for errors
};

// `target` is the request-target as sent: origin-form ("/v1/resources/a?x=1") or
// absolute-form ("http://host/v1/..."). The query string is ignored except on the
// listing and on PUT /v1/floors. Names and query values are percent-decoded strictly
// ('+' is not a space).
route_match match_route(boost::beast::http::verb method, std::string_view target);

} // namespace fk::proxy
