#pragma once
// The request handlers (docs/api.md#routes): one request in, one response out, against a store.
// No sockets here: the session reads and writes, so the handlers are unit-tested by
// calling handle_request in an io_context.

#include "backends/net.hpp"
#include "backends/store.hpp"
#include "config/settings.hpp"
#include "proxy/error_response.hpp"
#include "proxy/router.hpp"

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace fk::proxy {

using request = http::request<http::string_body>;

class metrics;
class inflight_keys;
struct client_scope;

struct handler_context {
    store::store& store;
    const config::settings& settings;
    std::string peer;       // "ip:port" of the client, for logs
    std::string request_id; // set by handle_request: the client's X-Request-Id or a new one
    // Where store calls, writes and stale gaps are counted, and what GET /metrics renders;
    // null: nothing is counted and /metrics is 404 (unit tests, fuzzers).
    metrics* stats = nullptr;
    route matched = route::not_found; // set by handle_request, for requests_total{route}
    // Idempotency-Keys in flight on this process (a second request with one → 409); null:
    // not checked here (unit tests, fuzzers), the store still never applies a key twice.
    inflight_keys* idempotency_keys = nullptr;
    // The client certificate's identity on a mutual TLS connection (a SAN or the subject
    // CN, proxy/tls.hpp); empty otherwise. In the log lines about this request.
    std::string client = {};
    // The scoped client's scope (proxy/scopes.hpp), already checked against the head by
    // the session; the handlers filter listings with it and check each transaction op.
    // Null: every name and route (no scoped clients).
    std::shared_ptr<const client_scope> scope = {};
};

// Routes and answers one request. Never throws: a bug (an exception escaping a handler)
// becomes 500 internal for this request only. The response is final: version,
// keep-alive, X-Request-Id and payload framing are set (see finish_response).
net::awaitable<response> handle_request(handler_context& ctx, request&& req);
// The same, for a request whose target the caller has already matched (the session
// matches it once, for admission and for the handler).
net::awaitable<response> handle_request(handler_context& ctx, request&& req, route_match match);

// The refusal that a request's head alone decides, as handle_request would answer it:
// steps 8 and 9 of docs/api.md's order of checks (the route's match, then the route's own
// headers in the handler's order) up to the first check that needs the body, the store's
// state or another request (an Idempotency-Key in flight). nullopt: nothing in the head
// refuses it. The session asks before it answers `100 Continue`, so that a client never
// uploads a body that is bound to be refused. Pure: no I/O.
std::optional<response> refusal_from_head(const store::store& store, const request& head,
                                          const route_match& match);

// Waits for the thread that parses large operation bodies to finish what it has; no
// request may run afterwards. Call after the I/O threads have stopped and before their
// io_contexts' pending work is destroyed: a parse still running then completes into its
// (stopped) io_context, never into a destroyed one.
void join_parse_thread();

// The client's X-Request-Id when acceptable (one field, 1..128 printable ASCII), else a
// generated one.
std::string request_id_of(const request& req);

// Makes a response ready for the wire: HTTP version 1.0 or 1.1 like the request,
// keep-alive, X-Request-Id, and Content-Length. For HEAD the body is dropped but
// Content-Length stays that of the GET body (a handler that already set Content-Length
// with an empty body keeps it).
void finish_response(response& res, bool head, unsigned request_version, bool keep_alive,
                     std::string_view request_id);

} // namespace fk::proxy
