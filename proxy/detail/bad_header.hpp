#pragma once
// Beast's parser refuses a header value with control characters as a whole request
// ("bad value"). When that value is one of ours, the contract names the error:
// Fencing-Token → invalid_token, Fencing-Lock → invalid_name (docs/api.md#tokens, #names).

#include "fence/error.hpp"

#include <string_view>

namespace fk::proxy::detail {

// `raw` is the unparsed rest of a request head. invalid_token or invalid_name when a
// Fencing-Token / X-Fencing-Token / Fencing-Lock line holds a control character (other
// than HTAB), else invalid_request.
errc classify_bad_header_value(std::string_view raw) noexcept;

} // namespace fk::proxy::detail
