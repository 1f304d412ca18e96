#include "proxy/error_response.hpp"

#include "fence/json_string.hpp"

#include <boost/beast/http/field.hpp>

#include <charconv>

namespace fk::proxy {

namespace {

std::string_view default_message(errc e) noexcept {
    switch (e) {
    case errc::ok:
    case errc::internal:
        return "internal error";
    case errc::invalid_token:
        return "invalid fencing token: 1 to 19 digits, no sign or leading zeros, at most "
               "9223372036854775807, given once";
    case errc::invalid_name:
        return "invalid key or lock name";
    case errc::invalid_request:
        return "invalid request";
    case errc::unauthorized:
        return "missing or wrong bearer token";
    case errc::forbidden:
        return "outside this client's scope; nothing was read or written";
    case errc::not_found:
        return "not found";
    case errc::method_not_allowed:
        return "method not allowed";
    case errc::stale_token:
        return "fencing token is below the lock's fence; nothing was written";
    case errc::lock_mismatch:
        return "the key belongs to another lock";
    case errc::precondition_failed:
        return "precondition failed";
    case errc::body_too_large:
        return "request body too large";
    case errc::operation_failed:
        return "the operation failed and was rolled back";
    case errc::missing_token:
        return "a write needs a Fencing-Token header";
    case errc::headers_too_large:
        return "request line and headers too large";
    case errc::unavailable:
        return "store unavailable; nothing was written, retry later";
    case errc::outcome_unknown:
        return "the write may or may not have been applied; retry it with the same "
               "Idempotency-Key to learn which, without applying it twice";
    case errc::idempotency_in_progress:
        return "a request with this Idempotency-Key is still in progress; retry later";
    case errc::idempotency_key_reused:
        return "this Idempotency-Key was used for a different request; nothing was written";
    case errc::too_many_idempotency_records:
        return "this client holds as many Idempotency-Key records as it may; nothing was "
               "written: retry after Retry-After, or send the write without a key";
    }
    return "internal error";
}

} // namespace

http::status status_for(errc e) noexcept {
    switch (e) {
    case errc::invalid_token:
    case errc::invalid_name:
    case errc::invalid_request:
        return http::status::bad_request;
    case errc::unauthorized:
        return http::status::unauthorized;
    case errc::forbidden:
        return http::status::forbidden;
    case errc::not_found:
        return http::status::not_found;
    case errc::method_not_allowed:
        return http::status::method_not_allowed;
    case errc::stale_token:
    case errc::lock_mismatch:
    case errc::idempotency_in_progress:
        return http::status::conflict;
    case errc::precondition_failed:
        return http::status::precondition_failed;
    case errc::body_too_large:
        return http::status::payload_too_large;
    case errc::operation_failed:
    case errc::idempotency_key_reused:
        return http::status::unprocessable_entity;
    case errc::missing_token:
        return http::status::precondition_required;
    case errc::too_many_idempotency_records:
        return http::status::too_many_requests;
    case errc::headers_too_large:
        return http::status::request_header_fields_too_large;
    case errc::unavailable:
        return http::status::service_unavailable;
    case errc::outcome_unknown:
        return http::status::gateway_timeout;
    case errc::ok:
    case errc::internal:
        break;
    }
    return http::status::internal_server_error;
}

std::string dump_json(const nlohmann::json& j) {
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

response json_reply(http::status status) {
    response res{status, 11};
    res.set(http::field::content_type, "application/json");
    return res;
}

void append_int(std::string& out, std::int64_t v) {
    char buf[24];
    out.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

} // namespace

response json_response(http::status status, const nlohmann::json& body) {
    response res = json_reply(status);
    res.body() = dump_json(body);
    return res;
}

response make_error_response(const error_reply& reply) {
    errc code = reply.code == errc::ok ? errc::internal : reply.code;
    nlohmann::json body = nlohmann::json::object();
    body["error"] = std::string{to_string(code)};
    body["message"] = reply.message.empty() ? std::string{default_message(code)} : reply.message;
    if (reply.fields.is_object())
        for (auto& [name, value] : reply.fields.items())
            if (name != "error" && name != "message")
                body[name] = value;

    response res = json_response(status_for(code), body);
    switch (code) {
    case errc::method_not_allowed:
        res.set(http::field::allow, reply.allow);
        break;
    case errc::unavailable:
    case errc::idempotency_in_progress:
        res.set(http::field::retry_after, "1");
        break;
    case errc::unauthorized:
        res.set(http::field::www_authenticate, "Bearer");
        break;
    default:
        break;
    }
    return res;
}

response make_error_response(errc code, std::string message) {
    return make_error_response(error_reply{code, std::move(message), nlohmann::json::object(), {}});
}

response applied_put_response(bool created, std::string_view key, std::string_view lock,
                              fence::token_t token, std::int64_t version) {
    response res = json_reply(created ? http::status::created : http::status::ok);
    std::string& body = res.body();
    body.reserve(64 + key.size() + lock.size());
    body += R"({"key":)";
    fence::append_json_string(body, key);
    body += R"(,"lock":)";
    fence::append_json_string(body, lock);
    body += R"(,"token":)";
    append_int(body, token);
    body += R"(,"version":)";
    append_int(body, version);
    body += '}';
    return res;
}

// The hot rejection (every stale write answered from the fence cache), so the body is
// written directly: the same bytes as make_error_response would produce (members in
// nlohmann's sorted order), without building a JSON tree.
response stale_token_response(std::string_view lock, fence::token_t token,
                              fence::token_t current_token, std::optional<std::string_view> floor) {
    response res = json_reply(http::status::conflict);
    std::string& body = res.body();
    const std::size_t floor_size = floor ? floor->size() : 0;
    body.reserve(160 + 2 * lock.size() + 3 * floor_size);
    body += R"({"current_token":)";
    append_int(body, current_token);
    body += R"(,"error":"stale_token",)";
    if (floor) {
        body += R"("floor":)";
        fence::append_json_string(body, *floor);
        body += ',';
    }
    body += R"("lock":)";
    fence::append_json_string(body, lock);
    body += R"(,"message":)";
    std::string message;
    message.reserve(120 + lock.size() + floor_size);
    message += "fencing token ";
    append_int(message, token);
    message += " is below the fence ";
    append_int(message, current_token);
    message += " of lock '";
    message += lock;
    message += '\'';
    if (floor) {
        message += " (the fence floor of prefix '";
        message += *floor;
        message += "')";
    }
    message += "; nothing was written";
    fence::append_json_string(body, message);
    body += R"(,"token":)";
    append_int(body, token);
    body += '}';
    return res;
}

response stale_floor_response(std::string_view prefix, fence::token_t token,
                              fence::token_t current_token) {
    return make_error_response(
        error_reply{errc::stale_token,
                    "fencing token " + std::to_string(token) + " is not above the floor " +
                        std::to_string(current_token) + " of prefix '" + std::string{prefix} +
                        "' (floors only go up); nothing was written",
                    {{"prefix", prefix}, {"token", token}, {"current_token", current_token}},
                    {}});
}

response lock_mismatch_response(std::string_view key, std::optional<std::string_view> key_lock) {
    if (!key_lock)
        return make_error_response(
            error_reply{errc::lock_mismatch,
                        "key '" + std::string{key} +
                            "' belongs to another lock, outside this client's read scope; "
                            "nothing was written",
                        {{"key", key}},
                        {}});
    return make_error_response(error_reply{errc::lock_mismatch,
                                           "key '" + std::string{key} + "' belongs to lock '" +
                                               std::string{*key_lock} + "'; nothing was written",
                                           {{"key", key}, {"lock", *key_lock}},
                                           {}});
}

response precondition_failed_response(std::string_view key) {
    return make_error_response(error_reply{errc::precondition_failed,
                                           "If-Match / If-None-Match does not hold for key '" +
                                               std::string{key} + "'; nothing was written",
                                           {{"key", key}},
                                           {}});
}

response operation_failed_response(std::string_view sqlstate, std::string message) {
    return make_error_response(
        error_reply{errc::operation_failed, std::move(message), {{"sqlstate", sqlstate}}, {}});
}

void add_error_field(response& res, std::string_view name, const nlohmann::json& value) {
    if (name == "error" || name == "message")
        return;
    auto body = nlohmann::json::parse(res.body(), nullptr, false);
    if (!body.is_object())
        return;
    body[std::string{name}] = value;
    res.body() = dump_json(body);
}

response method_not_allowed_response(std::string_view allow, std::string message) {
    return make_error_response(error_reply{errc::method_not_allowed, std::move(message),
                                           nlohmann::json::object(), std::string{allow}});
}

} // namespace fk::proxy
