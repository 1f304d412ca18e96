#pragma once
// Timestamps on the wire and in the logs: RFC 3339, UTC, milliseconds
// ("2026-11-29T10:00:00.123Z"). Years 0000 to 9999.

#include <cstdint>
#include <string>

namespace fk::fence {

// Appends the time `unix_ms` milliseconds after the Unix epoch (negative: before it).
void append_rfc3339_ms(std::string& out, std::int64_t unix_ms);
std::string format_rfc3339_ms(std::int64_t unix_ms);

} // namespace fk::fence
