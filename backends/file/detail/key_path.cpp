#include "backends/file/detail/key_path.hpp"

#include "fence/names.hpp"

namespace fk::store::detail {

namespace {

bool is_plain(unsigned char c) noexcept {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

// "." and ".." must never reach the file system as names.
std::string no_dot_names(std::string name) {
    // Counted, not compared with "." / "..": GCC 12 at -O2 warns falsely
    // (-Wmaybe-uninitialized) about the comparison once this is inlined.
    const std::size_t n = name.size();
    if (n >= 1 && n <= 2 && name.find_first_not_of('.') == std::string::npos) {
        std::string out;
        for (std::size_t i = 0; i < n; ++i)
            out += "%2E";
        return out;
    }
    return name;
}

// Splits an encoded segment into chunks of at most max_component_bytes, never inside %XX.
std::vector<std::string> chunks_of(const std::string& enc) {
    std::vector<std::string> out;
    std::size_t pos = 0;
    while (enc.size() - pos > max_component_bytes) {
        std::size_t cut = pos + max_component_bytes;
        // A '%' at cut-1 or cut-2 starts a triple that would straddle the cut.
        if (enc[cut - 1] == '%')
            cut -= 1;
        else if (enc[cut - 2] == '%')
            cut -= 2;
        out.push_back(enc.substr(pos, cut - pos));
        pos = cut;
    }
    out.push_back(enc.substr(pos));
    return out;
}

} // namespace

std::string object_path::dir_id() const {
    std::string id;
    for (const auto& d : dirs) {
        if (!id.empty())
            id += '/';
        id += d;
    }
    return id;
}

std::string encode_segment(std::string_view segment) {
    static constexpr char hex[] = "0123456789ABCDEF";
    std::string out;
    out.reserve(segment.size());
    for (unsigned char c : segment) {
        if (is_plain(c)) {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 0xF];
        }
    }
    return out;
}

std::optional<object_path> object_path_for(std::string_view key) {
    object_path p;
    for (;;) {
        auto slash = key.find('/');
        std::string_view segment = key.substr(0, slash);
        if (segment.empty())
            return std::nullopt;
        auto chunks = chunks_of(encode_segment(segment));
        for (std::size_t i = 0; i + 1 < chunks.size(); ++i)
            p.dirs.push_back(chunks[i] + "~+");
        std::string last = no_dot_names(std::move(chunks.back()));
        if (slash == std::string_view::npos) {
            p.file = std::move(last);
            return p;
        }
        p.dirs.push_back(last + "~");
        key.remove_prefix(slash + 1);
    }
}

namespace {

// Appends the bytes an encoded name stands for. Lenient (any %XX, any other byte as
// itself): key_for_object's round trip then rejects every spelling but the encoder's.
bool decode_into(std::string_view enc, std::string& out) {
    auto decoded = fence::percent_decode(enc);
    if (decoded.error != errc::ok)
        return false;
    out += decoded.value;
    return true;
}

} // namespace

std::optional<std::string> key_for_object(std::string_view dir_id, std::string_view file) {
    const std::string_view whole_dir = dir_id;
    std::string key;
    while (!dir_id.empty()) {
        const auto slash = dir_id.find('/');
        std::string_view dir = dir_id.substr(0, slash);
        if (dir.size() > 2 && dir.ends_with("~+")) {
            if (!decode_into(dir.substr(0, dir.size() - 2), key))
                return std::nullopt;
        } else if (dir.size() > 1 && dir.ends_with('~')) {
            if (!decode_into(dir.substr(0, dir.size() - 1), key))
                return std::nullopt;
            key += '/';
        } else {
            return std::nullopt;
        }
        dir_id = slash == std::string_view::npos ? std::string_view() : dir_id.substr(slash + 1);
    }
    if (file.empty() || !decode_into(file, key))
        return std::nullopt;
    // Only the encoder's own spelling counts (chunk boundaries, "%2E" names): a name it
    // would never produce is not a key's body.
    auto back = object_path_for(key);
    if (!back || back->file != file || back->dir_id() != whole_dir)
        return std::nullopt;
    return key;
}

std::string tmp_name(std::string_view file, std::string_view unique) {
    std::string s(file);
    s += "~tmp~";
    s += unique;
    return s;
}

bool is_tmp_name(std::string_view name) noexcept {
    return name.find("~tmp~") != std::string_view::npos;
}

} // namespace fk::store::detail
