// Fuzzes percent-decoding and key / lock-name validation (docs/api.md#names) against an
// oracle written from the contract's wording. The properties that matter most: an
// accepted key has no empty, "." or ".." segment, no control character, is valid UTF-8
// and at most 1024 bytes, and so can never name a path outside the store's root.
// Also the file store's key <-> path mapping: a valid key's location decodes back to it,
// and any name found on disk decodes to nothing or to the key that lives exactly there.

#include "backends/file/detail/key_path.hpp"
#include "fence/names.hpp"
#include "tests/fuzz/fuzz_check.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace {

using fk::errc;
namespace fence = fk::fence;

// Well-formed UTF-8 per Unicode Table 3-7, written as byte ranges rather than by decoding
// code points, so that it shares no logic with fence::is_valid_utf8.
bool oracle_utf8(std::string_view s) {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const std::size_t n = s.size();
    auto in = [](unsigned char c, unsigned lo, unsigned hi) { return c >= lo && c <= hi; };
    for (std::size_t i = 0; i < n;) {
        const unsigned char b0 = p[i];
        if (b0 <= 0x7f) {
            i += 1;
            continue;
        }
        const std::size_t left = n - i;
        if (in(b0, 0xc2, 0xdf) && left >= 2 && in(p[i + 1], 0x80, 0xbf)) {
            i += 2;
            continue;
        }
        if (left >= 3) {
            const unsigned char b1 = p[i + 1], b2 = p[i + 2];
            const bool cont2 = in(b2, 0x80, 0xbf);
            if (cont2 && ((b0 == 0xe0 && in(b1, 0xa0, 0xbf)) ||
                          ((in(b0, 0xe1, 0xec) || in(b0, 0xee, 0xef)) && in(b1, 0x80, 0xbf)) ||
                          (b0 == 0xed && in(b1, 0x80, 0x9f)))) {
                i += 3;
                continue;
            }
        }
        if (left >= 4) {
            const unsigned char b1 = p[i + 1], b2 = p[i + 2], b3 = p[i + 3];
            const bool cont23 = in(b2, 0x80, 0xbf) && in(b3, 0x80, 0xbf);
            if (cont23 &&
                ((b0 == 0xf0 && in(b1, 0x90, 0xbf)) || (in(b0, 0xf1, 0xf3) && in(b1, 0x80, 0xbf)) ||
                 (b0 == 0xf4 && in(b1, 0x80, 0x8f)))) {
                i += 4;
                continue;
            }
        }
        return false;
    }
    return true;
}

bool oracle_lock_name(std::string_view s) {
    if (s.empty() || s.size() > 1024)
        return false;
    for (unsigned char c : s)
        if (c < 0x20 || c == 0x7f)
            return false;
    return oracle_utf8(s);
}

bool oracle_key(std::string_view s) {
    if (!oracle_lock_name(s))
        return false;
    std::string_view rest = s;
    while (true) {
        const auto slash = rest.find('/');
        const auto segment = rest.substr(0, slash);
        if (segment.empty() || segment == "." || segment == "..")
            return false;
        if (slash == std::string_view::npos)
            return true;
        rest.remove_prefix(slash + 1);
    }
}

// A key, joined under a store root, stays under it.
bool stays_under_root(const std::string& key) {
    const std::filesystem::path root("/store/root");
    const auto joined = (root / key).lexically_normal();
    const auto rel = joined.lexically_relative(root);
    return !rel.empty() && *rel.begin() != ".." && *rel.begin() != "." && !key.starts_with('/');
}

std::string percent_encode_all(std::string_view s) {
    static constexpr char hex[] = "0123456789aBcDeF"; // mixed case: both must decode
    std::string out;
    out.reserve(s.size() * 3);
    for (unsigned char c : s) {
        out.push_back('%');
        out.push_back(hex[c >> 4]);
        out.push_back(hex[c & 15]);
    }
    return out;
}

bool oracle_escapes_well_formed(std::string_view s) {
    auto is_hex = [](char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    };
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '%')
            continue;
        if (s.size() - i < 3) // needs '%' and two more characters
            return false;
        if (!is_hex(s[i + 1]) || !is_hex(s[i + 2]))
            return false;
        i += 2;
    }
    return true;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view input(reinterpret_cast<const char*>(data), size);

    // Validators on the raw bytes, as if already decoded.
    const bool lock_ok = fence::validate_lock_name(input) == errc::ok;
    const bool key_ok = fence::validate_key(input) == errc::ok;
    FK_FUZZ_CHECK(fence::is_valid_utf8(input) == oracle_utf8(input));
    FK_FUZZ_CHECK(lock_ok == oracle_lock_name(input));
    FK_FUZZ_CHECK(key_ok == oracle_key(input));
    FK_FUZZ_CHECK(!key_ok || lock_ok);
    if (key_ok)
        FK_FUZZ_CHECK(stays_under_root(std::string(input)));

    // Fencing-Lock is literal: accepted exactly when the bytes are a valid lock name.
    const auto header = fence::lock_from_header(input);
    FK_FUZZ_CHECK((header.error == errc::ok) == lock_ok);
    FK_FUZZ_CHECK(header.error == errc::ok || header.error == errc::invalid_name);
    if (header.error == errc::ok)
        FK_FUZZ_CHECK(header.value == input);

    // Percent-decoding: strict escapes, never longer than the input, the identity on
    // text without '%', and the inverse of encoding every byte.
    const auto decoded = fence::percent_decode(input);
    FK_FUZZ_CHECK(decoded.error == errc::ok || decoded.error == errc::invalid_name);
    FK_FUZZ_CHECK((decoded.error == errc::ok) == oracle_escapes_well_formed(input));
    if (decoded.error == errc::ok)
        FK_FUZZ_CHECK(decoded.value.size() <= input.size());
    if (input.find('%') == std::string_view::npos) {
        FK_FUZZ_CHECK(decoded.error == errc::ok);
        FK_FUZZ_CHECK(decoded.value == input);
    }
    if (size <= 4096) {
        const auto round_trip = fence::percent_decode(percent_encode_all(input));
        FK_FUZZ_CHECK(round_trip.error == errc::ok);
        FK_FUZZ_CHECK(round_trip.value == input);
    }

    // Names from the path: decode, then the same rules as above on the decoded bytes.
    const auto key = fence::key_from_path(input);
    const auto lock = fence::lock_from_path(input);
    FK_FUZZ_CHECK(key.error == errc::ok || key.error == errc::invalid_name);
    FK_FUZZ_CHECK(lock.error == errc::ok || lock.error == errc::invalid_name);
    const bool decodes = decoded.error == errc::ok;
    FK_FUZZ_CHECK((key.error == errc::ok) == (decodes && oracle_key(decoded.value)));
    FK_FUZZ_CHECK((lock.error == errc::ok) == (decodes && oracle_lock_name(decoded.value)));
    if (key.error == errc::ok) {
        FK_FUZZ_CHECK(key.value == decoded.value);
        FK_FUZZ_CHECK(key.value.size() >= 1 && key.value.size() <= fence::max_name_bytes);
        FK_FUZZ_CHECK(stays_under_root(key.value));
        FK_FUZZ_CHECK(lock.error == errc::ok); // every valid key is a valid lock name
    }
    if (lock.error == errc::ok)
        FK_FUZZ_CHECK(lock.value == decoded.value);

    // The file store's paths (backends/file/detail/key_path.*).
    namespace fs = fk::store::detail;
    if (key_ok) {
        const auto where = fs::object_path_for(input);
        FK_FUZZ_CHECK(where.has_value());
        FK_FUZZ_CHECK(fs::key_for_object(where->dir_id(), where->file) == std::string(input));
    }
    const auto cut = input.rfind('/');
    const std::string_view dir = cut == std::string_view::npos ? "" : input.substr(0, cut);
    const std::string_view file = cut == std::string_view::npos ? input : input.substr(cut + 1);
    if (const auto found = fs::key_for_object(dir, file)) {
        const auto back = fs::object_path_for(*found);
        FK_FUZZ_CHECK(back.has_value());
        FK_FUZZ_CHECK(back->dir_id() == dir && back->file == file);
    }
    return 0;
}
