#pragma once
// A cheap pre-check on JSON text from clients: nlohmann::json serialises and compares
// recursively, so deeply nested input is refused before it is parsed.

#include <cstddef>
#include <string_view>

namespace fk::proxy::detail {

// True when arrays/objects in `text` nest deeper than `max_depth`. Brackets inside
// strings are ignored; the text is not otherwise validated.
bool json_nesting_exceeds(std::string_view text, std::size_t max_depth) noexcept;

} // namespace fk::proxy::detail
