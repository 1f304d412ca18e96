#include "fence/names.hpp"

#include "fence/hex.hpp"

namespace fk::fence {

namespace {

bool has_control(std::string_view s) noexcept {
    for (unsigned char c : s)
        if (c < 0x20 || c == 0x7f)
            return true;
    return false;
}

} // namespace

name_result percent_decode(std::string_view encoded) {
    auto decoded = percent_decode_bytes(encoded);
    if (!decoded)
        return {errc::invalid_name, {}};
    return {errc::ok, std::move(*decoded)};
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
