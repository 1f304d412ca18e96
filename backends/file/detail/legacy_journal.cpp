#include "backends/file/detail/legacy_journal.hpp"

#include "backends/file/detail/crc32c.hpp"
#include "fence/hex.hpp"

#include <charconv>

namespace fk::store::detail::legacy {

namespace {

constexpr char hex_digits[] = "0123456789abcdef";

void append_hex8(std::string& out, std::uint32_t v) {
    for (int shift = 28; shift >= 0; shift -= 4)
        out += hex_digits[(v >> shift) & 0xF];
}

std::optional<std::uint32_t> parse_hex8(std::string_view s) noexcept {
    if (s.size() != 8)
        return std::nullopt;
    std::uint32_t v = 0;
    for (char c : s) {
        int d = fence::hex_value(c);
        if (d < 0)
            return std::nullopt;
        v = v << 4 | static_cast<std::uint32_t>(d);
    }
    return v;
}

template <typename T> std::optional<T> parse_number(std::string_view s) noexcept {
    T v{};
    if (s.empty() || s[0] == '-' || s[0] == '+')
        return std::nullopt;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || end != s.data() + s.size())
        return std::nullopt;
    return v;
}

void append_number(std::string& out, std::int64_t v) {
    out += ' ';
    out += std::to_string(v);
}

void append_text(std::string& out, std::string_view v) {
    out += ' ';
    out += encode_field(v);
}

std::vector<std::string_view> split_fields(std::string_view body) {
    std::vector<std::string_view> fields;
    for (;;) {
        auto sp = body.find(' ');
        fields.push_back(body.substr(0, sp));
        if (sp == std::string_view::npos)
            return fields;
        body.remove_prefix(sp + 1);
    }
}

// The record in `body` (text after the CRC), or nullopt if malformed.
std::optional<record> parse_body(std::string_view body) {
    auto f = split_fields(body);
    if (f.empty() || f[0].size() != 1)
        return std::nullopt;
    record r;
    auto text = [&](std::size_t i, std::string& out) {
        auto v = decode_field(f[i]);
        if (!v)
            return false;
        out = std::move(*v);
        return true;
    };
    auto num = [&](std::size_t i, auto& out) {
        auto v = parse_number<std::remove_reference_t<decltype(out)>>(f[i]);
        if (!v)
            return false;
        out = *v;
        return true;
    };
    switch (f[0][0]) {
    case 'V':
        r.type = record_type::verified;
        if (f.size() != 2 || !num(1, r.count))
            return std::nullopt;
        return r;
    case 'F':
        r.type = record_type::fence;
        if (f.size() != 4 || !text(1, r.lock) || !num(2, r.token) || !num(3, r.ms))
            return std::nullopt;
        return r;
    case 'P': {
        r.type = record_type::put;
        if ((f.size() != 10 && f.size() != 11) || !text(1, r.key) || !text(2, r.lock) ||
            !num(3, r.token) || !num(4, r.version) || !num(5, r.ms) || !num(6, r.size) ||
            !text(8, r.tmp) || !text(9, r.content_type))
            return std::nullopt;
        auto crc = parse_hex8(f[7]);
        if (!crc)
            return std::nullopt;
        r.body_crc = *crc;
        if (f.size() == 11) {
            // A journaled body must be the one the record describes.
            r.body.emplace();
            if (!text(10, *r.body) || r.body->size() != r.size || crc32c(0, *r.body) != r.body_crc)
                return std::nullopt;
        }
        return r;
    }
    case 'D':
        r.type = record_type::del;
        if (f.size() != 6 || !text(1, r.key) || !text(2, r.lock) || !num(3, r.token) ||
            !num(4, r.version) || !num(5, r.ms))
            return std::nullopt;
        return r;
    default:
        return std::nullopt;
    }
}

// The record on the '\n'-terminated line `line` (without the '\n'), if intact.
std::optional<record> parse_line(std::string_view line) {
    if (line.size() < 10 || line[8] != ' ')
        return std::nullopt;
    auto crc = parse_hex8(line.substr(0, 8));
    std::string_view body = line.substr(9);
    if (!crc || *crc != crc32c(0, body))
        return std::nullopt;
    return parse_body(body);
}

} // namespace

std::string encode_field(std::string_view raw) {
    static constexpr char upper[] = "0123456789ABCDEF";
    std::string out;
    out.reserve(raw.size());
    for (unsigned char c : raw) {
        if (c < 0x21 || c == 0x7F || c == '%') {
            out += '%';
            out += upper[c >> 4];
            out += upper[c & 0xF];
        } else {
            out += static_cast<char>(c);
        }
    }
    return out;
}

std::optional<std::string> decode_field(std::string_view encoded) {
    return fence::percent_decode_bytes(encoded);
}

void append_record(std::string& out, const record& r) {
    std::string body(1, static_cast<char>(r.type));
    switch (r.type) {
    case record_type::verified:
        append_number(body, static_cast<std::int64_t>(r.count));
        break;
    case record_type::fence:
        append_text(body, r.lock);
        append_number(body, r.token);
        append_number(body, r.ms);
        break;
    case record_type::put:
        append_text(body, r.key);
        append_text(body, r.lock);
        append_number(body, r.token);
        append_number(body, r.version);
        append_number(body, r.ms);
        append_number(body, static_cast<std::int64_t>(r.size));
        body += ' ';
        append_hex8(body, r.body_crc);
        append_text(body, r.tmp);
        append_text(body, r.content_type);
        if (r.body)
            append_text(body, *r.body);
        break;
    case record_type::del:
        append_text(body, r.key);
        append_text(body, r.lock);
        append_number(body, r.token);
        append_number(body, r.version);
        append_number(body, r.ms);
        break;
    }
    append_hex8(out, crc32c(0, body));
    out += ' ';
    out += body;
    out += '\n';
}

parsed_journal parse_journal(std::string_view text) {
    parsed_journal out;
    std::size_t pos = 0;
    while (pos < text.size()) {
        auto nl = text.find('\n', pos);
        if (nl == std::string_view::npos)
            break;
        auto rec = parse_line(text.substr(pos, nl - pos));
        if (!rec)
            break;
        out.records.push_back(std::move(*rec));
        pos = nl + 1;
    }
    out.valid_bytes = pos;
    if (pos == text.size())
        return out;
    out.damaged = true;
    // Any intact line after the damaged one? Resynchronise on every newline.
    auto nl = text.find('\n', pos);
    while (nl != std::string_view::npos && nl + 1 < text.size()) {
        std::size_t start = nl + 1;
        nl = text.find('\n', start);
        if (nl == std::string_view::npos)
            break;
        if (parse_line(text.substr(start, nl - start))) {
            out.intact_after_damage = true;
            break;
        }
    }
    return out;
}

} // namespace fk::store::detail::legacy
