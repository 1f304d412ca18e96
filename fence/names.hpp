#pragma once
// Keys and lock names (docs/api.md#names): 1 to 1024 bytes, valid UTF-8, no control
// characters (U+0000–U+001F, U+007F). Keys may contain '/', but no segment may be empty,
// "." or "..". Names in the URL path are percent-decoded first; Fencing-Lock is literal.

#include "fence/error.hpp"
#include "fence/utf8.hpp" // is_valid_utf8

#include <string>
#include <string_view>

namespace fk::fence {

inline constexpr std::size_t max_name_bytes = 1024;

struct name_result {
    errc error = errc::ok; // ok or invalid_name
    std::string value;     // the decoded, validated name
};

// Strict percent-decoding: "%" must be followed by two hex digits, else invalid_name.
// '+' is not a space. The result is not validated.
name_result percent_decode(std::string_view encoded);

// Validation of already-decoded names.
errc validate_lock_name(std::string_view name) noexcept;
errc validate_key(std::string_view key) noexcept;

// Decode + validate, for names taken from the request path.
name_result key_from_path(std::string_view encoded);
name_result lock_from_path(std::string_view encoded);
// Fencing-Lock header: literal, validated as a lock name.
name_result lock_from_header(std::string_view value);

} // namespace fk::fence
