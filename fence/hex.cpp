#include "fence/hex.hpp"

namespace fk::fence {

int hex_value(char c) noexcept {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

std::optional<std::string> percent_decode_bytes(std::string_view encoded) {
    std::string out;
    out.reserve(encoded.size());
    for (std::size_t i = 0; i < encoded.size(); ++i) {
        const char c = encoded[i];
        if (c != '%') {
            out += c;
            continue;
        }
        if (i + 2 >= encoded.size())
            return std::nullopt; // "a%2", "a%"
        const int hi = hex_value(encoded[i + 1]);
        const int lo = hex_value(encoded[i + 2]);
        if (hi < 0 || lo < 0)
            return std::nullopt;
        out += static_cast<char>(hi << 4 | lo);
        i += 2;
    }
    return out;
}

} // namespace fk::fence
