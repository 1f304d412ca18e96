#pragma once
// The definitions of basic_session's members (proxy/session.hpp). Included only where
// basic_session is instantiated: proxy/session.cpp for beast::tcp_stream, and the session
// unit test for Beast's in-memory test stream; everything else sees the declarations.

#include "proxy/session.hpp"

#include "backends/log/logging.hpp"
#include "proxy/admission.hpp"
#include "proxy/auth.hpp"
#include "proxy/connection_registry.hpp"
#include "proxy/detail/bad_header.hpp"
#include "proxy/detail/request_feed.hpp"
#include "proxy/detail/wire.hpp"
#include "proxy/error_response.hpp"
#include "proxy/handlers.hpp"
#include "proxy/scopes.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/stream_traits.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <limits>
#include <optional>
#include <tuple>

namespace fk::proxy {

namespace detail {

inline constexpr auto use_tuple = net::as_tuple(net::use_awaitable);

// Bytes asked for per read while waiting for a request.
inline constexpr std::size_t read_chunk = 16 * 1024;
// After an error reply, what the client still sends is read and dropped for up to this
// long before the connection closes, so that a reset does not destroy the reply unread
// (the "lingering close" of RFC 9112 §9.6).
inline constexpr std::chrono::seconds linger_time{2};
inline constexpr std::size_t linger_max_bytes = 64 * 1024 * 1024;

inline bool is_http_error(const beast::error_code& ec) {
    return ec.category() == beast::http::make_error_code(http::error::bad_method).category();
}

inline bool expects_continue(const request& req) {
    return req.version() >= 11 && beast::iequals(req[http::field::expect], "100-continue");
}

// The Authorization value to check: nullopt when absent, empty (never accepted) when given
// more than once, so that no proxy in front can smuggle a second one past us.
inline std::optional<std::string_view> authorization_of(const request& req) {
    auto [it, end] = req.equal_range(http::field::authorization);
    if (it == end)
        return std::nullopt;
    std::string_view value = it->value();
    return ++it == end ? value : std::string_view{};
}

} // namespace detail

template <class Stream>
basic_session<Stream>::basic_session(Stream stream, const session_services& services,
                                     std::shared_ptr<connection_registry> registry,
                                     limiter::permit connection)
    : stream_(std::move(stream)), services_(services), settings_(services.settings),
      registry_(std::move(registry)), connection_(std::move(connection)),
      open_gauge_(services.stats.track_connection()), peer_(transport::peer(stream_)) {}

template <class Stream> void basic_session<Stream>::drain() {
    net::post(stream_.get_executor(), [self = this->shared_from_this()] {
        self->draining_ = true;
        if (self->idle_)
            transport::cancel(self->stream_);
    });
}

template <class Stream> void basic_session<Stream>::close() {
    net::post(stream_.get_executor(), [self = this->shared_from_this()] {
        self->draining_ = true;
        self->closed_ = true;
        transport::close(self->stream_);
    });
}

template <class Stream> net::awaitable<void> basic_session<Stream>::run() {
    auto id = registry_->add(this->shared_from_this());
    if (id == 0) {
        // Accepted just as the drain began.
        transport::close(stream_);
        co_return;
    }
    struct deregister {
        connection_registry& registry;
        std::uint64_t id;
        ~deregister() { registry.remove(id); }
    } guard{*registry_, id};

    if (co_await handshake())
        co_await serve();
    if (!closed_)
        transport::close(stream_);
    // The socket is gone: free its place under max_connections now, not whenever the
    // last reference to this object happens to go.
    connection_.release();
    open_gauge_.reset();
}

template <class Stream> net::awaitable<bool> basic_session<Stream>::handshake() {
    if constexpr (!requires(Stream & s) { transport::handshake(s); }) {
        co_return true;
    } else {
        // Idle as far as a drain is concerned: nothing has been asked yet.
        idle_ = true;
        transport::expires_after(stream_, settings_.http.handshake_timeout);
        auto ec = co_await transport::handshake(stream_);
        idle_ = false;
        // A drain that cancelled the handshake shows as an error; one that came just
        // after it completed is seen by wait_for_request().
        if (ec || closed_) {
            const auto reason = ec ? transport::failure_of(ec) : tls_failure::closed;
            services_.stats.count_tls_failure(reason);
            // Debug only, as refused connections: a scanner would fill the log.
            if (logging::enabled(logging::level::debug))
                logging::write(logging::level::debug, "TLS handshake failed",
                               {{"peer", peer_},
                                {"reason", to_string(reason)},
                                {"error", ec ? ec.message() : std::string{"closed"}}});
            co_return false;
        }
        services_.stats.count_tls_handshake();
        client_ = transport::identity(stream_);
        if (logging::enabled(logging::level::debug))
            logging::write(
                logging::level::debug, "TLS handshake completed",
                {{"peer", peer_}, {"protocol", transport::protocol(stream_)}, {"client", client_}});
        co_return true;
    }
}

// Waits for the first byte of the next request (already buffered when pipelined).
// False when the connection should end instead.
template <class Stream> net::awaitable<bool> basic_session<Stream>::wait_for_request() {
    if (buffer_.size() > 0)
        co_return true;
    if (draining_)
        co_return false;
    idle_ = true;
    auto [ec, n] =
        co_await stream_.async_read_some(buffer_.prepare(detail::read_chunk), detail::use_tuple);
    idle_ = false;
    if (ec)
        co_return false; // closed by the client, idle deadline, or drain
    buffer_.commit(n);
    co_return !closed_;
}

template <class Stream> net::awaitable<void> basic_session<Stream>::serve() {
    const auto& limits = settings_.http;
    const auto header_limit = static_cast<std::uint32_t>(
        std::min<std::size_t>(limits.max_header_bytes, std::numeric_limits<std::uint32_t>::max()));

    // A new connection gets header_timeout to start its first request; a kept-alive one
    // gets idle_timeout to start the next.
    transport::expires_after(stream_, limits.header_timeout);
    for (bool first = true;; first = false) {
        if (!first)
            transport::expires_after(stream_, limits.idle_timeout);
        if (!co_await wait_for_request())
            co_return;
        // requests_total and request_duration_seconds measure from the head's first byte.
        const auto started = std::chrono::steady_clock::now();

        detail::request_parser parser;
        parser.header_limit(header_limit);
        // The declared length is checked by admit(), after the credentials, so that a
        // stranger learns nothing but 401; chunked bodies get the limit below.
        parser.body_limit(boost::none);
        detail::feed_progress progress;

        // A new connection's header_timeout has run since it was accepted and covers its
        // whole first head; a kept-alive one gets header_timeout from its first byte.
        if (!first)
            transport::expires_after(stream_, limits.header_timeout);
        auto hec = co_await read_until(parser, detail::feed_phase::head, progress);
        const request& head = parser.get();
        if (hec) {
            if (hec == http::error::header_limit)
                co_await reply_and_close(errc::headers_too_large,
                                         "request line and headers exceed " +
                                             std::to_string(limits.max_header_bytes) + " bytes",
                                         head, false, route::not_found, started);
            else if (hec == http::error::bad_value)
                co_await reply_and_close(
                    detail::classify_bad_header_value(std::string_view{
                        static_cast<const char*>(buffer_.data().data()), buffer_.size()}),
                    "a header value contains a control character", head, false, route::not_found,
                    started);
            else if (detail::is_http_error(hec) && hec != http::error::partial_message &&
                     hec != http::error::end_of_stream)
                co_await reply_and_close(errc::invalid_request,
                                         "malformed request: " + hec.message(), head, false,
                                         route::not_found, started);
            co_return; // otherwise: closed, timed out or drained mid-header
        }
        // From here on the request counts as in flight (the inflight_requests gauge).
        auto inflight_gauge = services_.stats.track_request();

        // The target is matched once: the same result decides credentials and the handler.
        route_match target = match_route(head.method(), head.target());
        const route r = target.kind;
        const bool body_follows = !parser.is_done();
        authenticator::caller caller{true, nullptr};
        if (!is_open_route(r))
            caller = services_.auth.identify(detail::authorization_of(head), client_);
        // A scoped client's head is checked against its scope (403); the single token and
        // no auth have none, and pay nothing for it.
        std::optional<std::string> forbidden;
        if (caller.scope && !is_open_route(r))
            forbidden = forbidden_by_head(*caller.scope, head, target);
        std::optional<std::uint64_t> content_length;
        if (auto declared = parser.content_length())
            content_length = *declared;
        const auto decision =
            admit({head, target, body_follows, caller.authenticated, content_length,
                   limits.max_body_bytes, forbidden ? std::string_view{*forbidden} : ""});
        if (decision.refusal != errc::ok) {
            auto request_id = request_id_of(head);
            if (decision.refusal == errc::forbidden)
                logging::write(logging::level::info, "forbidden request",
                               {{"method", std::string_view{head.method_string()}},
                                {"route", to_string(r)},
                                {"peer", peer_},
                                {"client", caller.scope->name},
                                {"request_id", request_id},
                                {"detail", decision.message}});
            if (decision.refusal == errc::unauthorized)
                logging::write(
                    logging::level::info, "unauthorized request",
                    {{"method", std::string_view{head.method_string()}},
                     {"peer", peer_},
                     {"client", client_},
                     {"request_id", request_id},
                     {"authorization",
                      head.count(http::field::authorization) == 0 ? "missing" : "wrong"}});
            if (!co_await reply(decision.refusal, decision.message, head, true, !decision.close, r,
                                started, std::move(request_id), decision.allow))
                co_return;
            continue;
        }

        // A process-wide bound on requests being served, taken before the body is read.
        // A shed request touches neither the store nor the fence.
        auto permit = decision.needs_permit ? services_.inflight.try_acquire() : limiter::permit{};
        if (decision.needs_permit && !permit) {
            services_.stats.count_shed();
            auto request_id = request_id_of(head);
            // Debug only: under overload a line per shed request would add to the load.
            if (logging::enabled(logging::level::debug))
                logging::write(logging::level::debug, "request shed: in-flight limit reached",
                               {{"limit", services_.inflight.limit()},
                                {"peer", peer_},
                                {"request_id", request_id}});
            if (!co_await reply(errc::unavailable,
                                "too many requests in flight; nothing was written, retry later",
                                head, true, !body_follows, r, started, std::move(request_id)))
                co_return;
            continue;
        }

        if (body_follows) {
            if (detail::expects_continue(head)) {
                // What the head alone refuses is answered instead of the 100, so that the
                // client never uploads a body that is bound to be refused; the body is
                // never read, so the connection closes, as after a 401 or 403.
                if (auto refused = refusal_from_head(services_.store, head, target)) {
                    co_await refuse_unread_body(std::move(*refused), head, r, started);
                    co_return;
                }
                http::response<http::empty_body> go_on{http::status::continue_, 11};
                transport::expires_after(stream_, limits.write_timeout);
                auto [wec, wn] = co_await http::async_write(stream_, go_on, detail::use_tuple);
                if (wec)
                    co_return;
            }
            parser.body_limit(static_cast<std::uint64_t>(limits.max_body_bytes));
            const auto head_fields = detail::field_count(parser.get());
            transport::expires_after(stream_, limits.body_timeout);
            auto bec = co_await read_until(parser, detail::feed_phase::body, progress);
            if (bec) {
                if (bec == http::error::body_limit)
                    co_await reply_and_close(errc::body_too_large,
                                             "request body exceeds " +
                                                 std::to_string(limits.max_body_bytes) + " bytes",
                                             parser.get(), true, r, started);
                else if (bec == http::error::header_limit)
                    co_await reply_and_close(errc::headers_too_large,
                                             "a chunk-size line or the trailer section exceeds " +
                                                 std::to_string(limits.max_header_bytes) + " bytes",
                                             parser.get(), true, r, started);
                else if (detail::is_http_error(bec) && bec != http::error::partial_message &&
                         bec != http::error::end_of_stream)
                    co_await reply_and_close(errc::invalid_request,
                                             "malformed request body: " + bec.message(),
                                             parser.get(), true, r, started);
                co_return;
            }
            // RFC 9110 §6.5.1: a trailer must not supply or override a header field, and
            // an intermediary in front of us may have checked only the head. Refused
            // rather than dropped, so that a client relying on one learns it at once.
            if (detail::field_count(parser.get()) != head_fields) {
                if (!co_await reply(errc::invalid_request,
                                    "trailer fields are not accepted; send every field in "
                                    "the request head",
                                    parser.get(), true, true, r, started))
                    co_return;
                continue;
            }
        }

        // The store has its own deadlines; the socket has none while the handler runs.
        transport::expires_never(stream_);
        handler_context ctx{services_.store, settings_, peer_, {}, &services_.stats};
        ctx.idempotency_keys = &services_.idempotency_keys;
        // Log lines name the scoped client (never its token); else the certificate's identity.
        ctx.client = caller.scope ? caller.scope->name : client_;
        ctx.scope = std::move(caller.scope);
        response res = co_await handle_request(ctx, parser.release(), std::move(target));
        if (closed_)
            co_return;
        if (!co_await send(res, ctx.matched, started))
            co_return;
    }
}

// Reads until feed() has what the phase needs; the bounds are feed()'s.
template <class Stream>
net::awaitable<beast::error_code>
basic_session<Stream>::read_until(detail::request_parser& parser, detail::feed_phase phase,
                                  detail::feed_progress& progress) {
    for (;;) {
        auto ec = detail::feed(parser, buffer_, phase, settings_.http.max_header_bytes, progress);
        if (ec != http::error::need_more)
            co_return ec;
        auto [rec, n] = co_await stream_.async_read_some(buffer_.prepare(detail::read_chunk),
                                                         detail::use_tuple);
        if (rec == net::error::eof)
            co_return http::error::partial_message;
        if (rec)
            co_return rec;
        buffer_.commit(n);
    }
}

template <class Stream>
net::awaitable<bool> basic_session<Stream>::send(response& res, route r, time_point started) {
    if (draining_)
        res.keep_alive(false);
    transport::expires_after(stream_, settings_.http.write_timeout);
    beast::error_code ec;
    if (detail::plain_framing(res)) {
        // Head and body in one gathered write; head_ keeps its capacity across requests.
        head_.clear();
        detail::append_head(head_, res);
        const std::array<net::const_buffer, 2> wire{net::buffer(head_), net::buffer(res.body())};
        std::tie(ec, std::ignore) = co_await net::async_write(stream_, wire, detail::use_tuple);
    } else {
        std::tie(ec, std::ignore) = co_await http::async_write(stream_, res, detail::use_tuple);
    }
    services_.stats.count_request(r, res.result_int(), std::chrono::steady_clock::now() - started);
    if (ec)
        co_return false;
    if (!res.keep_alive()) {
        co_await linger_close();
        co_return false;
    }
    co_return true;
}

template <class Stream>
net::awaitable<bool> basic_session<Stream>::reply(errc code, std::string message,
                                                  const request& head, bool parsed, bool keep_alive,
                                                  route r, time_point started,
                                                  std::string request_id, std::string_view allow) {
    if (request_id.empty())
        request_id = request_id_of(head);
    if (logging::enabled(logging::level::debug))
        logging::write(logging::level::debug, "request refused before the handler",
                       {{"error", to_string(code)},
                        {"detail", message},
                        {"peer", peer_},
                        {"request_id", request_id}});
    response res = code == errc::method_not_allowed
                       ? method_not_allowed_response(allow, std::move(message))
                       : make_error_response(code, std::move(message));
    // Of a head that failed to parse only the request id is used: its method and version
    // may be half-read, so the answer is a full HTTP/1.1 one.
    const bool complete = parsed;
    finish_response(res, complete && head.method() == http::verb::head,
                    complete ? head.version() : 11, keep_alive && complete && head.keep_alive(),
                    request_id);
    co_return co_await send(res, r, started);
}

template <class Stream>
net::awaitable<void> basic_session<Stream>::refuse_unread_body(response res, const request& head,
                                                               route r, time_point started) {
    auto request_id = request_id_of(head);
    if (logging::enabled(logging::level::debug))
        logging::write(logging::level::debug, "request refused before the handler",
                       {{"status", res.result_int()},
                        {"detail", "refused from the head instead of 100 Continue"},
                        {"peer", peer_},
                        {"request_id", request_id}});
    finish_response(res, head.method() == http::verb::head, head.version(), false, request_id);
    co_await send(res, r, started);
}

template <class Stream>
net::awaitable<void> basic_session<Stream>::reply_and_close(errc code, std::string message,
                                                            const request& head, bool parsed,
                                                            route r, time_point started) {
    co_await reply(code, std::move(message), head, parsed, false, r, started);
}

template <class Stream> net::awaitable<void> basic_session<Stream>::linger_close() {
    if (closed_)
        co_return;
    transport::expires_after(stream_, detail::linger_time);
    if constexpr (requires(Stream & s) { transport::close_notify(s); }) {
        // TLS: say that the response is complete (a client reading to EOF can tell it
        // from a truncation). Within linger_time too.
        co_await transport::close_notify(stream_);
        if (closed_)
            co_return;
    }
    beast::error_code ec;
    transport::shutdown_send(stream_, ec);
    if (ec)
        co_return;
    // What still arrives is dropped unread: below TLS, so no record need be decrypted.
    auto& raw = beast::get_lowest_layer(stream_);
    std::array<char, 16 * 1024> scratch;
    for (std::size_t total = 0; total < detail::linger_max_bytes;) {
        auto [rec, n] = co_await raw.async_read_some(net::buffer(scratch), detail::use_tuple);
        if (rec || closed_)
            break;
        total += n;
    }
}

} // namespace fk::proxy
