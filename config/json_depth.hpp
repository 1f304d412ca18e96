#pragma once
// A cheap pre-check on untrusted JSON text (config files, request bodies): nlohmann::json
// parses, serialises and compares recursively, so deeply nested input is refused before
// it is parsed.

#include <cstddef>
#include <string_view>

namespace fk::config {

// True when arrays/objects in `text` nest deeper than `max_depth`. Brackets inside
// strings are ignored; the text is not otherwise validated.
bool json_nesting_exceeds(std::string_view text, std::size_t max_depth) noexcept;

} // namespace fk::config
