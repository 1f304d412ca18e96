#include "fence/utf8.hpp"

namespace fk::fence {

utf8_step decode_utf8(std::string_view s, std::size_t i) noexcept {
    const auto b0 = static_cast<unsigned char>(s[i]);
    if (b0 < 0x80)
        return {1, b0};
    int len = 0;
    char32_t cp = 0;
    // The second byte's range excludes overlong forms (E0, F0), surrogates (ED) and
    // values above U+10FFFF (F4); later bytes are any continuation byte.
    unsigned char lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        len = 2;
        cp = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        len = 3;
        cp = b0 & 0x0F;
        if (b0 == 0xE0)
            lo = 0xA0;
        else if (b0 == 0xED)
            hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        len = 4;
        cp = b0 & 0x07;
        if (b0 == 0xF0)
            lo = 0x90;
        else if (b0 == 0xF4)
            hi = 0x8F;
    } else {
        return {-1, 0}; // a continuation byte, C0/C1 (always overlong) or F5–FF
    }
    for (int k = 1; k < len; ++k) {
        const std::size_t at = i + static_cast<std::size_t>(k);
        if (at >= s.size())
            return {-k, 0};
        const auto b = static_cast<unsigned char>(s[at]);
        if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF))
            return {-k, 0};
        cp = (cp << 6) | (b & 0x3F);
    }
    return {len, cp};
}

bool is_valid_utf8(std::string_view s) noexcept {
    std::size_t i = 0;
    while (i < s.size()) {
        if (static_cast<unsigned char>(s[i]) < 0x80) {
            ++i;
            continue;
        }
        const auto step = decode_utf8(s, i);
        if (step.length < 0)
            return false;
        i += static_cast<std::size_t>(step.length);
    }
    return true;
}

void append_utf8(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

std::optional<std::string> utf8_prefix_successor(std::string_view prefix) {
    std::string p(prefix);
    while (!p.empty()) {
        std::size_t start = p.size() - 1;
        while (start > 0 && (static_cast<unsigned char>(p[start]) & 0xC0) == 0x80)
            --start;
        const auto step = decode_utf8(p, start);
        if (step.length != static_cast<int>(p.size() - start))
            return std::nullopt; // not valid UTF-8: outside the contract
        char32_t cp = step.code_point;
        p.resize(start);
        if (cp >= 0x10FFFF)
            continue;
        ++cp;
        if (cp >= 0xD800 && cp <= 0xDFFF)
            cp = 0xE000;
        append_utf8(p, cp);
        return p;
    }
    return std::nullopt;
}

} // namespace fk::fence
