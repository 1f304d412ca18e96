#include "backends/postgres/sql/utf8.hpp"

#include <cstdint>

namespace fk::store::pg::sql {

std::optional<std::string> prefix_successor(std::string_view prefix) {
    // Decode the last code point; drop it if it is U+10FFFF and try the one before.
    std::string p(prefix);
    while (!p.empty()) {
        std::size_t start = p.size() - 1;
        while (start > 0 && (static_cast<unsigned char>(p[start]) & 0xC0) == 0x80)
            --start;
        auto b = [&](std::size_t i) {
            return static_cast<std::uint32_t>(static_cast<unsigned char>(p[i]));
        };
        std::uint32_t cp = 0;
        const std::size_t len = p.size() - start;
        if (len == 1)
            cp = b(start);
        else if (len == 2)
            cp = ((b(start) & 0x1F) << 6) | (b(start + 1) & 0x3F);
        else if (len == 3)
            cp = ((b(start) & 0x0F) << 12) | ((b(start + 1) & 0x3F) << 6) | (b(start + 2) & 0x3F);
        else
            cp = ((b(start) & 0x07) << 18) | ((b(start + 1) & 0x3F) << 12) |
                 ((b(start + 2) & 0x3F) << 6) | (b(start + 3) & 0x3F);
        p.resize(start);
        if (cp >= 0x10FFFF)
            continue;
        ++cp;
        if (cp >= 0xD800 && cp <= 0xDFFF)
            cp = 0xE000;
        if (cp < 0x80) {
            p += static_cast<char>(cp);
        } else if (cp < 0x800) {
            p += static_cast<char>(0xC0 | (cp >> 6));
            p += static_cast<char>(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            p += static_cast<char>(0xE0 | (cp >> 12));
            p += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            p += static_cast<char>(0x80 | (cp & 0x3F));
        } else {
            p += static_cast<char>(0xF0 | (cp >> 18));
            p += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
            p += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            p += static_cast<char>(0x80 | (cp & 0x3F));
        }
        return p;
    }
    return std::nullopt;
}

} // namespace fk::store::pg::sql
