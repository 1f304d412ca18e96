#pragma once
// Whether libpq accepts a connection URI, without connecting: what `fencekeeper
// --check-config` asks of a postgresql:// store URL. libpq-fe.h stays in the .cpp.

#include <optional>
#include <string>

namespace fk::store::pg {

// nullopt when PQconninfoParse accepts `uri`, else libpq's reason (one line).
std::optional<std::string> check_conninfo(const std::string& uri);

} // namespace fk::store::pg
