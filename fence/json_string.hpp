#pragma once
// JSON string literals, written without building a tree: the log lines' fields, the
// proxy's fixed-shape reply bodies, and the Postgres store's rows as JSON. One escaper for
// all of them, so that every byte fencekeeper writes as JSON reads back as nlohmann
// writes it.

#include <string>
#include <string_view>

namespace fk::fence {

// Appends `text` as a JSON string literal (quotes included), escaped exactly as
// nlohmann::json::dump(-1, ' ', false, error_handler_t::replace) does: invalid UTF-8
// becomes U+FFFD (by fence::decode_utf8's "maximal subpart" rule).
void append_json_string(std::string& out, std::string_view text);

} // namespace fk::fence
