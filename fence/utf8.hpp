#pragma once
// UTF-8, as RFC 3629 defines it: no overlong forms, no UTF-16 surrogates (U+D800–U+DFFF),
// nothing above U+10FFFF. The one decoder of the code base: name validation, the log
// escaper and the Postgres store's prefix bounds all use it.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace fk::fence {

// One step of decoding at s[i] (i < s.size()).
struct utf8_step {
    // > 0: a valid sequence of this many bytes encodes `code_point`.
    // < 0: no valid sequence starts here; skip -length bytes. That is the longest prefix
    // of a valid sequence found here (at least 1 byte): -1 for a byte that cannot start a
    // sequence, -k when a lead byte and k-1 good continuation bytes are followed by a bad
    // byte (looked at again by the next step) or the end of the text. This is Unicode's
    // "maximal subpart" rule, the one nlohmann::json uses when it replaces bad UTF-8.
    int length = 0;
    char32_t code_point = 0;
};

utf8_step decode_utf8(std::string_view s, std::size_t i) noexcept;

bool is_valid_utf8(std::string_view s) noexcept;

// Appends the encoding of `cp`, which must be a Unicode scalar value (at most U+10FFFF,
// not a surrogate).
void append_utf8(std::string& out, char32_t cp);

// The smallest valid UTF-8 string that is bytewise greater than every string starting
// with `prefix` (valid UTF-8): the last code point incremented, skipping the surrogates,
// with trailing U+10FFFF dropped first; nullopt when there is none (empty, or only
// U+10FFFF, or a prefix that is not valid UTF-8). Bytewise order of UTF-8 is code point order, so
// [prefix, successor) holds exactly the strings with that prefix.
std::optional<std::string> utf8_prefix_successor(std::string_view prefix);

} // namespace fk::fence
