// Fuzzes the Fencing-Token parser (docs/api.md#tokens) against an independent oracle written
// from the contract's wording, so that both over-acceptance (a malformed token that
// reaches the fence rule) and over-rejection (a valid token answered with 400) show up.

#include "fence/token.hpp"
#include "tests/fuzz/fuzz_check.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace {

using fk::errc;
using fk::fence::parse_token;
using fk::fence::token_from_headers;

std::string_view trim_ows(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
        s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
        s.remove_suffix(1);
    return s;
}

// The contract, read literally: 1 to 19 ASCII digits, no leading zero unless the token
// is "0", value <= 9223372036854775807. Compared as strings so that it shares no
// arithmetic with the parser.
bool oracle_accepts(std::string_view trimmed) {
    if (trimmed.empty() || trimmed.size() > 19)
        return false;
    for (char c : trimmed)
        if (c < '0' || c > '9')
            return false;
    if (trimmed.size() > 1 && trimmed[0] == '0')
        return false;
    return trimmed.size() < 19 || trimmed <= std::string_view("9223372036854775807");
}

void check_single(std::string_view text) {
    const auto r = parse_token(text);
    const auto trimmed = trim_ows(text);
    FK_FUZZ_CHECK(r.error == errc::ok || r.error == errc::invalid_token);
    FK_FUZZ_CHECK((r.error == errc::ok) == oracle_accepts(trimmed));
    if (r.error == errc::ok) {
        FK_FUZZ_CHECK(r.value >= 0);
        FK_FUZZ_CHECK(std::to_string(r.value) == trimmed);
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    check_single(input);

    // token_from_headers: the first byte picks how many Fencing-Token and X-Fencing-Token
    // fields there are (0..3 each) and whether their values are present; the rest is split
    // at the first ',' into the two values.
    if (input.empty())
        return 0;
    const auto selector = static_cast<unsigned char>(input[0]);
    const std::size_t count = selector & 3u;
    const std::size_t alias_count = (selector >> 2) & 3u;
    const bool has_value = (selector & 0x10u) == 0;
    const bool has_alias = (selector & 0x20u) == 0;
    auto rest = input.substr(1);
    const auto comma = rest.find(',');
    const auto first = rest.substr(0, comma);
    const auto second =
        comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);

    const std::optional<std::string_view> value =
        has_value ? std::optional<std::string_view>(first) : std::nullopt;
    const std::optional<std::string_view> alias =
        has_alias ? std::optional<std::string_view>(second) : std::nullopt;
    const auto r = token_from_headers(count, value, alias_count, alias);

    if (count + alias_count == 0) {
        FK_FUZZ_CHECK(r.error == errc::missing_token);
    } else if (count + alias_count > 1) {
        // Two fields (the header given twice, or both names) are invalid_token, never a
        // silently chosen one.
        FK_FUZZ_CHECK(r.error == errc::invalid_token);
    } else {
        const auto chosen = count == 1 ? value : alias;
        if (!chosen) {
            FK_FUZZ_CHECK(r.error == errc::invalid_token);
        } else {
            const auto single = parse_token(*chosen);
            FK_FUZZ_CHECK(r.error == single.error);
            if (r.error == errc::ok)
                FK_FUZZ_CHECK(r.value == single.value);
        }
    }
    if (r.error == errc::ok)
        FK_FUZZ_CHECK(r.value >= 0);
    return 0;
}
