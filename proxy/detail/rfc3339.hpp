#pragma once
// Timestamps on the wire: RFC 3339, UTC, milliseconds ("2026-11-29T10:00:00.123Z").

#include <cstdint>
#include <string>

namespace fk::proxy::detail {

std::string format_rfc3339_ms(std::int64_t unix_ms);

} // namespace fk::proxy::detail
