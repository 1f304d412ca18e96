#include "proxy/admission.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/field.hpp>

#include <string_view>

namespace fk::proxy {

bool is_open_route(route r) noexcept {
    return r == route::healthz || r == route::readyz;
}

std::optional<std::string> framing_problem(const request& head) {
    const auto content_lengths = head.count(http::field::content_length);
    const auto transfer_encodings = head.count(http::field::transfer_encoding);
    if (transfer_encodings > 0 && head.version() < 11)
        return "Transfer-Encoding in an HTTP/1.0 request";
    if (content_lengths > 0 && transfer_encodings > 0)
        return "both Content-Length and Transfer-Encoding";
    // Beast accepts identical duplicates, as separate fields or as a list in one field.
    if (content_lengths > 1 ||
        (content_lengths == 1 &&
         std::string_view{head[http::field::content_length]}.find(',') != std::string_view::npos))
        return "Content-Length given more than once";
    if (transfer_encodings > 1)
        return "Transfer-Encoding given more than once";
    if (transfer_encodings == 1 && !beast::iequals(head[http::field::transfer_encoding], "chunked"))
        return "unsupported Transfer-Encoding (only 'chunked' is accepted)";
    return std::nullopt;
}

admission admit(const admission_input& in) {
    admission a;
    auto refuse = [&](errc code, std::string message, bool close) {
        a.refusal = code;
        a.message = std::move(message);
        a.close = close;
        a.needs_permit = false;
        return a;
    };

    // 1. Framing: the message boundaries cannot be trusted, so nothing after this
    //    request can be either.
    if (auto problem = framing_problem(in.head))
        return refuse(errc::invalid_request, std::move(*problem), true);

    // 2. Target: parsed once, by the caller; its result decides 3 and 4. An unknown or
    //    malformed target is not an open route, so it needs credentials like any other.
    const route r = in.target.kind;

    // 3. Credentials, before any body byte is read.
    if (!is_open_route(r) && !in.authorized)
        return refuse(errc::unauthorized, "missing or wrong bearer token", in.body_follows);

    // 3b. Scope: the caller is known; the key, lock or route is outside what it may touch.
    //     Still before any body byte is read, so nothing is written and no fence moves.
    if (!is_open_route(r) && !in.forbidden.empty())
        return refuse(errc::forbidden, std::string{in.forbidden}, in.body_follows);

    // 4. Body rules: open routes take none (they are served without credentials, so a
    //    body there would be memory a stranger holds); a declared length over the limit
    //    is refused before it is read.
    if (is_open_route(r) && in.body_follows && in.target.error == errc::method_not_allowed) {
        // POST /healthz with a body: the method is the more useful answer.
        a.allow = in.target.allow;
        return refuse(errc::method_not_allowed, in.target.message, true);
    }
    if (is_open_route(r) && in.body_follows)
        return refuse(errc::invalid_request,
                      "this route takes no request body (no Content-Length above 0, no "
                      "Transfer-Encoding)",
                      true);
    if (in.body_follows) {
        if (in.content_length && *in.content_length > in.max_body_bytes)
            return refuse(errc::body_too_large,
                          "request body exceeds " + std::to_string(in.max_body_bytes) + " bytes",
                          true);
    }

    // 5. The in-flight permit (taken by the session).
    a.needs_permit = in.body_follows || !(is_open_route(r) || r == route::metrics);
    return a;
}

} // namespace fk::proxy
