#pragma once
// Fencing tokens on the wire (docs/api.md#tokens): 1 to 19 ASCII digits, no sign, no leading
// zeros ("0" itself is valid), value <= INT64_MAX, surrounding whitespace ignored.

#include "fence/error.hpp"

#include <cstdint>
#include <optional>
#include <string_view>

namespace fk::fence {

using token_t = std::int64_t;

struct token_result {
    errc error = errc::ok; // ok or invalid_token
    token_t value = 0;
};

// Parses one header value. Whitespace (SP / HTAB) around the digits is ignored.
token_result parse_token(std::string_view text) noexcept;

// Picks the token from a request: `count` Fencing-Token fields (the first is `value`)
// and `alias_count` X-Fencing-Token fields (the first is `alias_value`). None at all →
// missing_token; more than one field in total → invalid_token; else parse_token.
token_result token_from_headers(std::size_t count, std::optional<std::string_view> value,
                                std::size_t alias_count,
                                std::optional<std::string_view> alias_value) noexcept;

} // namespace fk::fence
