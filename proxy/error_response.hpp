#pragma once
// The one place that turns an fk::errc into an HTTP status and a JSON error body
// (docs/api.md#errors): {"error": CODE, "message": TEXT, ...fields}. Every other part of the
// proxy reports failures as errc values and calls this.

#include "backends/net.hpp"
#include "fence/error.hpp"
#include "fence/token.hpp"

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fk::proxy {

using response = http::response<http::string_body>;

struct error_reply {
    errc code = errc::internal;
    std::string message;                              // empty → a generic text for the code
    nlohmann::json fields = nlohmann::json::object(); // extra body members
    std::string allow;                                // 405 only: the Allow header
};

http::status status_for(errc e) noexcept;

// A status, headers and body for the error; version and keep-alive are the caller's.
// errc::ok is a bug and yields 500 internal.
response make_error_response(const error_reply& reply);
response make_error_response(errc code, std::string message);

// The errors whose bodies carry more than error and message.
// A write below the lock's effective fence: {lock, token, current_token}, plus
// "floor": PREFIX when a fence floor set that fence (docs/api.md#fence-floors).
response stale_token_response(std::string_view lock, fence::token_t token,
                              fence::token_t current_token,
                              std::optional<std::string_view> floor = std::nullopt);
// PUT /v1/floors with a token not above the prefix's floor: {prefix, token, current_token}.
response stale_floor_response(std::string_view prefix, fence::token_t token,
                              fence::token_t current_token);
// A write of a key that belongs to another lock: {key, lock}; {key} alone when the caller
// may not read that lock (key_lock nullopt: docs/api.md#redacted-locks).
response lock_mismatch_response(std::string_view key, std::optional<std::string_view> key_lock);
response precondition_failed_response(std::string_view key);
response operation_failed_response(std::string_view sqlstate, std::string message);
response method_not_allowed_response(std::string_view allow, std::string message);

// Adds a member to an error response's JSON body (made by the functions above), keeping
// the body's form: members in sorted order, as make_error_response writes them. For
// replies that name more than the error itself, e.g. the failing op of a transaction
// ("op_index", docs/api.md#post-v1transactions). A member "error" or "message" is not
// replaced; a body that is not a JSON object (never made here) is left as it is.
void add_error_field(response& res, std::string_view name, const nlohmann::json& value);

// Serialises JSON for the wire; invalid UTF-8 (never expected) is replaced, not thrown.
std::string dump_json(const nlohmann::json& j);

// A 2xx/404/503 JSON reply: status, Content-Type: application/json, the body.
response json_response(http::status status, const nlohmann::json& body);

// The 200/201 reply to an applied PUT (every accepted write), written without a JSON tree:
// the same bytes as json_response with {key, lock, token, version}.
response applied_put_response(bool created, std::string_view key, std::string_view lock,
                              fence::token_t token, std::int64_t version);

} // namespace fk::proxy
