#pragma once
// What the session does with a request once its head is read, as a pure function: no
// socket, no store, no clock. The order of the checks is the one docs/operations.md
// ("The order of checks on a request") states, and tests/unit/proxy_admission_test.cpp
// pins it:
//
//   framing → target → credentials → scope → body rules → in-flight permit → body
//
// The target is parsed once (match_route), and that one result decides both the route
// and whether credentials are needed, so the two can never disagree. A request that is
// refused here has read no body byte and holds no in-flight permit.

#include "fence/error.hpp"
#include "proxy/handlers.hpp"
#include "proxy/router.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fk::proxy {

// /healthz and /readyz: served without credentials, never with a body.
bool is_open_route(route r) noexcept;

// Framing the server refuses on top of what Beast's parser refuses: Content-Length
// together with Transfer-Encoding, either given twice, a Transfer-Encoding other than
// "chunked", and any Transfer-Encoding in an HTTP/1.0 request (RFC 9112 §6.1: such
// framing is faulty). nullopt when the framing is acceptable.
std::optional<std::string> framing_problem(const request& head);

struct admission_input {
    const request& head;
    const route_match& target;                   // match_route of the head's method and target
    bool body_follows;                           // the parser is not done once the head is read
    bool authorized;                             // the credentials check passed, or auth is off
    std::optional<std::uint64_t> content_length; // as the parser read it
    std::uint64_t max_body_bytes;
    // Non-empty: the caller's scope does not allow this request (proxy/scopes.hpp,
    // forbidden_by_head): why, for the 403.
    std::string_view forbidden = {};
};

struct admission {
    errc refusal = errc::ok; // ok: go on to the permit and the body
    std::string message;     // why, for the JSON error body
    std::string_view allow;  // method_not_allowed: the route's methods, for Allow
    // Refused with a body still on the wire: answer, then close without reading it.
    bool close = false;
    // Go on: whether the request takes a process-wide in-flight permit before its body
    // is read. Probes and scrapes without a body take none, so that overload never
    // fails liveness and metrics stay readable.
    bool needs_permit = true;
};

admission admit(const admission_input& in);

} // namespace fk::proxy
