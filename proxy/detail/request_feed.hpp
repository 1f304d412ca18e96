#pragma once
// Feeding a request parser from a buffer, with the bounds the session enforces: no
// socket, so the session, the unit tests and the request fuzzer share one implementation
// (docs/operations.md, "Limits").
//
// What Beast's parser leaves unbounded and this bounds, each by the header limit:
// - the head as a whole (Beast's header_limit bounds each parse window, not the total of
//   a head that arrives in pieces);
// - a chunk-size line (with its extensions) or trailer section, whether it waits
//   incomplete in the buffer (Beast buffers either until its end arrives, however long)
//   or arrives whole in one read.
// And it never throws: Beast's fields container throws for a field over 64 KiB, which a
// configured header limit above that lets through; that becomes header_limit too.

#include "backends/net.hpp"

#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <cstddef>

namespace fk::proxy::detail {

using request_parser = http::request_parser<http::string_body>;

enum class feed_phase {
    head, // until the header is done (the parser is not eager: no body byte is taken)
    body, // until the message is done (feed() parses it one piece at a time: not eager)
};

// Per request: what has been consumed so far.
struct feed_progress {
    std::size_t head_bytes = 0;
};

// Feeds what `buffer` holds to `parser` and consumes what the parser used, until the
// phase is complete (returns no error), the parser needs bytes not yet buffered
// (http::error::need_more: read more into `buffer` and call again), or an error:
// http::error::header_limit when a bound above is exceeded, else the parser's own.
beast::error_code feed(request_parser& parser, beast::flat_buffer& buffer, feed_phase phase,
                       std::size_t limit, feed_progress& progress);

// The number of fields in a message: more after the body than after the head means the
// body's trailer section added some.
std::size_t field_count(const http::fields& fields) noexcept;

} // namespace fk::proxy::detail
