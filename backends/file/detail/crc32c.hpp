#pragma once
// CRC-32C (Castagnoli), the checksum of bodies (and of 0.1 journal records).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fk::store::detail {

// Continues `crc` (0 to start) over `data`, zlib-style: crc32c(0, "123456789") == 0xE3069283.
std::uint32_t crc32c(std::uint32_t crc, std::string_view data) noexcept;

// Whether file `name` in directory `dir` is a regular file of `size` bytes with CRC `crc`:
// 0 with `ok` set; a missing file is not an error (ok = false); else an errno value.
int file_matches(int dir, const std::string& name, std::uint64_t size, std::uint32_t crc, bool& ok);

} // namespace fk::store::detail
