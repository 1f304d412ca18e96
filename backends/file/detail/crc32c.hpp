#pragma once
// CRC-32C (Castagnoli), the checksum of journal records and bodies.

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace fk::store::detail {

// Continues `crc` (0 to start) over `data`, zlib-style: crc32c(0, "123456789") == 0xE3069283.
std::uint32_t crc32c(std::uint32_t crc, std::string_view data) noexcept;

} // namespace fk::store::detail
