#include "proxy/detail/request_feed.hpp"

#include <boost/beast/http/error.hpp>

#include <exception>
#include <iterator>

namespace fk::proxy::detail {

namespace {

bool phase_done(const request_parser& parser, feed_phase phase) {
    return phase == feed_phase::head ? parser.is_header_done() : parser.is_done();
}

} // namespace

beast::error_code feed(request_parser& parser, beast::flat_buffer& buffer, feed_phase phase,
                       std::size_t limit, feed_progress& progress) {
    // In the body phase each put() takes one piece: a run of body data, one chunk-size
    // line (with the previous chunk's CRLF), or the last chunk with the trailer section.
    // What a piece takes beyond the body's growth is framing, bounded whether it arrived
    // in one read or in many.
    if (phase == feed_phase::body)
        parser.eager(false);
    constexpr std::size_t framing_slack = 4; // the CRLFs around a chunk-size line
    for (;;) {
        if (phase_done(parser, phase))
            return {};
        if (buffer.size() == 0)
            return http::error::need_more;
        beast::error_code ec;
        std::size_t used = 0;
        const std::size_t body_before = parser.get().body().size();
        try {
            used = parser.put(buffer.data(), ec);
        } catch (const std::exception&) {
            // basic_fields refuses a name or value over 64 KiB by throwing.
            return http::error::header_limit;
        }
        buffer.consume(used);
        if (phase == feed_phase::head) {
            progress.head_bytes += used;
            if (progress.head_bytes > limit)
                return http::error::header_limit;
        } else {
            const std::size_t body_grew = parser.get().body().size() - body_before;
            if (used > body_grew && used - body_grew > limit + framing_slack)
                return http::error::header_limit;
        }
        if (phase_done(parser, phase))
            return {};
        if (ec && ec != http::error::need_more)
            return ec;
        if (used > 0)
            continue;
        // The parser took nothing: everything buffered belongs to one incomplete piece
        // of framing (the rest of the head, a chunk-size line or the trailer section).
        const std::size_t held =
            buffer.size() + (phase == feed_phase::head ? progress.head_bytes : 0);
        if (held > limit)
            return http::error::header_limit;
        return http::error::need_more;
    }
}

std::size_t field_count(const http::fields& fields) noexcept {
    return static_cast<std::size_t>(std::distance(fields.begin(), fields.end()));
}

} // namespace fk::proxy::detail
