#pragma once
// Store URLs in logs: a postgresql:// URI may carry a user, a password and secret query
// parameters (password=, sslkey=, sslpassword=...), none of which belongs in a log line.

#include <string>
#include <string_view>

namespace fk::proxy::detail {

// file:PATH unchanged. postgresql:// and postgres:// reduced to scheme, host(s), port(s)
// and database: everything up to the last '@' before the query (userinfo), the query and
// the fragment are dropped. Anything else becomes "(unrecognised store URL)", so that a
// URL this function does not understand is never logged.
std::string redact_store_url(std::string_view url);

} // namespace fk::proxy::detail
