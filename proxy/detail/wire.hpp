#pragma once
// A response's status line and header block, serialised by hand into a buffer the
// session keeps across keep-alive requests: the same bytes Beast's serializer writes
// (tested against it), without its buffer-sequence machinery on every response. The
// body is not copied; the session sends head and body in one gathered write.

#include "proxy/error_response.hpp"

#include <string>

namespace fk::proxy::detail {

// True when append_head + the body is the whole message on the wire (no chunked
// Transfer-Encoding, which only Beast's serializer frames).
bool plain_framing(const response& res);

// Appends "HTTP/1.x NNN Reason\r\n", every field as "Name: value\r\n", then "\r\n".
void append_head(std::string& out, const response& res);

} // namespace fk::proxy::detail
