#pragma once
// Hexadecimal digits and strict percent-decoding: the one decoder for request paths
// (fence/names.hpp) and the file store's journal fields.

#include <optional>
#include <string>
#include <string_view>

namespace fk::fence {

// 0–15 for 0-9, a-f, A-F; -1 for anything else.
int hex_value(char c) noexcept;

// "%XY" (two hex digits, either case) becomes the byte 0xXY; every other byte is copied.
// nullopt when a '%' is not followed by two hex digits. '+' is not a space.
std::optional<std::string> percent_decode_bytes(std::string_view encoded);

} // namespace fk::fence
