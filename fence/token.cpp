#include "fence/token.hpp"

#include <charconv>

namespace fk::fence {

namespace {
constexpr bool is_ows(char c) noexcept {
    return c == ' ' || c == '\t';
}
} // namespace

token_result parse_token(std::string_view text) noexcept {
    while (!text.empty() && is_ows(text.front()))
        text.remove_prefix(1);
    while (!text.empty() && is_ows(text.back()))
        text.remove_suffix(1);

    const token_result invalid{errc::invalid_token, 0};
    if (text.empty() || text.size() > 19)
        return invalid;
    // from_chars alone would accept a leading '-' and stop early on "4 2" or "1e3";
    // insisting on all-digits first rejects every form docs/api.md#tokens lists.
    for (char c : text)
        if (c < '0' || c > '9')
            return invalid;
    if (text.size() > 1 && text.front() == '0')
        return invalid;

    token_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc{} || end != text.data() + text.size())
        return invalid; // out of range for int64
    return {errc::ok, value};
}

token_result token_from_headers(std::size_t count, std::optional<std::string_view> value,
                                std::size_t alias_count,
                                std::optional<std::string_view> alias_value) noexcept {
    if (count + alias_count == 0)
        return {errc::missing_token, 0};
    if (count + alias_count > 1)
        return {errc::invalid_token, 0};
    if (count == 1)
        return value ? parse_token(*value) : token_result{errc::invalid_token, 0};
    return alias_value ? parse_token(*alias_value) : token_result{errc::invalid_token, 0};
}

} // namespace fk::fence
