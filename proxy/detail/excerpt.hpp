#pragma once
// Client-supplied text quoted in an error message, cut to a readable length: the first 64
// bytes, then "..." when there was more. One rule for every message that echoes input
// (parameters, transaction bodies, scopes' 403s).

#include <cstddef>
#include <string>
#include <string_view>

namespace fk::proxy::detail {

inline constexpr std::size_t excerpt_bytes = 64;

inline std::string excerpt(std::string_view s) {
    return s.size() <= excerpt_bytes ? std::string{s}
                                     : std::string{s.substr(0, excerpt_bytes)} + "...";
}

} // namespace fk::proxy::detail
