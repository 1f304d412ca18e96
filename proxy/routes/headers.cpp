// The fencing headers of a request (Fencing-Token, Fencing-Lock, If-Match,
// If-None-Match) and the Idempotency-Key's syntax: what the session's refusal from the
// head and every handler read the same way (docs/api.md#headers).
#include "proxy/routes/pipeline.hpp"

#include "fence/names.hpp"
#include "fence/token.hpp"
#include "proxy/detail/excerpt.hpp"

namespace fk::proxy::routes {

namespace {

// `"N"` as sent in If-Match; nullopt for anything else, which can never match an ETag
// this proxy sends (weak tags never match under If-Match's strong comparison).
std::optional<std::int64_t> parse_etag_version(std::string_view tag) noexcept {
    if (tag.size() < 3 || tag.front() != '"' || tag.back() != '"')
        return std::nullopt;
    auto digits = tag.substr(1, tag.size() - 2);
    if (digits.size() > 18 || (digits.size() > 1 && digits[0] == '0'))
        return std::nullopt;
    std::int64_t v = 0;
    for (char c : digits) {
        if (c < '0' || c > '9')
            return std::nullopt;
        v = v * 10 + (c - '0');
    }
    return v;
}

} // namespace

field_values fields_named(const request& req, std::string_view name) {
    field_values out;
    auto [it, end] = req.equal_range(name);
    for (; it != end; ++it)
        if (out.count++ == 0)
            out.first = std::string_view{it->value()};
    return out;
}

checked<token_t> token_of(const request& req) {
    auto primary = fields_named(req, fencing_token_field);
    auto alias = fields_named(req, fencing_token_alias);
    auto t = fence::token_from_headers(primary.count, primary.first, alias.count, alias.first);
    if (t.error == errc::ok)
        return {t.value, std::nullopt};
    if (t.error == errc::missing_token)
        return {std::nullopt,
                make_error_response(errc::missing_token, "a write needs a Fencing-Token header")};
    if (primary.count + alias.count > 1)
        return {std::nullopt,
                make_error_response(errc::invalid_token,
                                    "give exactly one Fencing-Token (or X-Fencing-Token) field")};
    auto text = primary.first ? *primary.first : alias.first.value_or("");
    return {std::nullopt,
            make_error_response(errc::invalid_token,
                                "invalid fencing token '" + detail::excerpt(text) +
                                    "': 1 to 19 digits, no sign or leading zeros, at most "
                                    "9223372036854775807")};
}

checked<std::optional<token_t>> optional_token_of(const request& req) {
    if (fields_named(req, fencing_token_field).count == 0 &&
        fields_named(req, fencing_token_alias).count == 0)
        return {std::optional<token_t>{}, std::nullopt};
    auto t = token_of(req);
    if (t.failure)
        return {std::nullopt, std::move(t.failure)};
    return {std::optional<token_t>{*t.value}, std::nullopt};
}

checked<std::string> lock_of(const request& req, std::optional<std::string_view> fallback) {
    auto field = fields_named(req, fencing_lock_field);
    if (field.count == 0) {
        if (fallback)
            return {std::string{*fallback}, std::nullopt};
        return {std::nullopt, make_error_response(errc::invalid_request,
                                                  "this request needs a Fencing-Lock header")};
    }
    if (field.count > 1)
        return {std::nullopt,
                make_error_response(errc::invalid_name, "Fencing-Lock given more than once")};
    auto lock = fence::lock_from_header(*field.first);
    if (lock.error != errc::ok)
        return {std::nullopt,
                make_error_response(errc::invalid_name,
                                    "invalid Fencing-Lock: 1 to 1024 bytes of UTF-8 without "
                                    "control characters")};
    return {std::move(lock.value), std::nullopt};
}

checked<fence::preconditions> preconditions_of(const request& req) {
    fence::preconditions pre;
    auto if_match = fields_named(req, "If-Match");
    if (if_match.count == 1 && *if_match.first == "*") {
        pre.if_match_any = true;
    } else if (if_match.count > 0) {
        // A value that cannot match still goes to the store, so that the fence and the
        // lock are checked first, in the contract's order; -1 is no version.
        auto v = if_match.count == 1 ? parse_etag_version(*if_match.first) : std::nullopt;
        pre.if_match = v.value_or(-1);
    }
    auto if_none_match = fields_named(req, "If-None-Match");
    if (if_none_match.count > 0) {
        if (if_none_match.count > 1 || *if_none_match.first != "*")
            return {std::nullopt,
                    make_error_response(errc::invalid_request,
                                        "only 'If-None-Match: *' is supported on writes")};
        pre.if_none_match_any = true;
    }
    return {pre, std::nullopt};
}

checked<write_headers> write_headers_of(const request& req, std::string_view key) {
    auto token = token_of(req);
    if (token.failure)
        return {std::nullopt, std::move(token.failure)};
    auto lock = lock_of(req, key);
    if (lock.failure)
        return {std::nullopt, std::move(lock.failure)};
    auto pre = preconditions_of(req);
    if (pre.failure)
        return {std::nullopt, std::move(pre.failure)};
    return {write_headers{*token.value, std::move(*lock.value), *pre.value}, std::nullopt};
}

std::optional<response> idempotency_key_problem(const request& req) {
    auto field = fields_named(req, idempotency_key_field);
    if (field.count == 0 || (field.count == 1 && valid_idempotency_key(*field.first)))
        return std::nullopt;
    return make_error_response(errc::invalid_request,
                               field.count > 1 ? "give Idempotency-Key at most once"
                                               : "invalid Idempotency-Key: 1 to 255 characters "
                                                 "from '!' to '~' (visible ASCII, no spaces)");
}

} // namespace fk::proxy::routes
