#include "fence/names.hpp"

namespace fk::fence {

namespace {

int hex_value(char c) noexcept {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

bool has_control(std::string_view s) noexcept {
    for (unsigned char c : s)
        if (c < 0x20 || c == 0x7f)
            return true;
    return false;
}

} // namespace

bool is_valid_utf8(std::string_view s) noexcept {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const auto* end = p + s.size();
    while (p < end) {
        unsigned char c = *p;
        if (c < 0x80) {
            ++p;
            continue;
        }
        std::size_t len;
        char32_t cp;
        if (c >= 0xc2 && c <= 0xdf) {
            len = 2;
            cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            len = 3;
            cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            len = 4;
            cp = c & 0x07;
        } else {
            return false; // continuation byte first, overlong lead (c0/c1) or > U+10FFFF
        }
        if (static_cast<std::size_t>(end - p) < len)
            return false;
        for (std::size_t i = 1; i < len; ++i) {
            if ((p[i] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (p[i] & 0x3f);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return false; // overlong, out of range or a UTF-16 surrogate
        p += len;
    }
    return true;
}

name_result percent_decode(std::string_view encoded) {
    name_result r;
    r.value.reserve(encoded.size());
    for (std::size_t i = 0; i < encoded.size(); ++i) {
        char c = encoded[i];
        if (c != '%') {
            r.value.push_back(c);
            continue;
        }
        if (i + 2 >= encoded.size())
            return {errc::invalid_name, {}}; // "a%2", "a%"
        int hi = hex_value(encoded[i + 1]);
        int lo = hex_value(encoded[i + 2]);
        if (hi < 0 || lo < 0)
            return {errc::invalid_name, {}};
        r.value.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
    }
    return r;
}

errc validate_lock_name(std::string_view name) noexcept {
    if (name.empty() || name.size() > max_name_bytes || has_control(name) || !is_valid_utf8(name))
        return errc::invalid_name;
    return errc::ok;
}

errc validate_key(std::string_view key) noexcept {
    if (validate_lock_name(key) != errc::ok)
        return errc::invalid_name;
    std::size_t start = 0;
    while (true) {
        std::size_t slash = key.find('/', start);
        std::string_view segment = key.substr(
            start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
        if (segment.empty() || segment == "." || segment == "..")
            return errc::invalid_name;
        if (slash == std::string_view::npos)
            return errc::ok;
        start = slash + 1;
    }
}

name_result key_from_path(std::string_view encoded) {
    auto r = percent_decode(encoded);
    if (r.error == errc::ok && validate_key(r.value) != errc::ok)
        r = {errc::invalid_name, {}};
    return r;
}

name_result lock_from_path(std::string_view encoded) {
    auto r = percent_decode(encoded);
    if (r.error == errc::ok && validate_lock_name(r.value) != errc::ok)
        r = {errc::invalid_name, {}};
    return r;
}

name_result lock_from_header(std::string_view value) {
    // Header values arrive with optional whitespace already trimmed by the HTTP parser;
    // the name is otherwise taken literally.
    if (validate_lock_name(value) != errc::ok)
        return {errc::invalid_name, {}};
    return {errc::ok, std::string(value)};
}

} // namespace fk::fence
