#include "fence/json_string.hpp"

#include "fence/utf8.hpp"

namespace fk::fence {

void append_json_string(std::string& out, std::string_view text) {
    static constexpr char hex[] = "0123456789abcdef";
    out += '"';
    std::size_t i = 0;
    while (i < text.size()) {
        // A run of plain ASCII is copied at once.
        std::size_t j = i;
        while (j < text.size()) {
            const auto c = static_cast<unsigned char>(text[j]);
            if (c < 0x20 || c == '"' || c == '\\' || c >= 0x80)
                break;
            ++j;
        }
        out.append(text.data() + i, j - i);
        i = j;
        if (i == text.size())
            break;
        const auto c = static_cast<unsigned char>(text[i]);
        if (c < 0x80) {
            switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\b':
                out += "\\b";
                break;
            case '\t':
                out += "\\t";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\f':
                out += "\\f";
                break;
            case '\r':
                out += "\\r";
                break;
            default: {
                const char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 0xF]};
                out.append(esc, 6);
            }
            }
            ++i;
            continue;
        }
        // Invalid bytes are skipped by nlohmann's rule (see fence::utf8_step).
        const int n = decode_utf8(text, i).length;
        if (n > 0) {
            out.append(text.data() + i, static_cast<std::size_t>(n));
            i += static_cast<std::size_t>(n);
        } else {
            out += "\xEF\xBF\xBD";
            i += static_cast<std::size_t>(-n);
        }
    }
    out += '"';
}

} // namespace fk::fence
