#include "fence/error.hpp"

#include <string>

namespace fk {

std::string_view to_string(errc e) noexcept {
    switch (e) {
    case errc::ok:
        return "ok";
    case errc::invalid_token:
        return "invalid_token";
    case errc::invalid_name:
        return "invalid_name";
    case errc::invalid_request:
        return "invalid_request";
    case errc::unauthorized:
        return "unauthorized";
    case errc::forbidden:
        return "forbidden";
    case errc::not_found:
        return "not_found";
    case errc::method_not_allowed:
        return "method_not_allowed";
    case errc::stale_token:
        return "stale_token";
    case errc::lock_mismatch:
        return "lock_mismatch";
    case errc::precondition_failed:
        return "precondition_failed";
    case errc::idempotency_in_progress:
        return "idempotency_in_progress";
    case errc::idempotency_key_reused:
        return "idempotency_key_reused";
    case errc::too_many_idempotency_records:
        return "too_many_idempotency_records";
    case errc::body_too_large:
        return "body_too_large";
    case errc::operation_failed:
        return "operation_failed";
    case errc::missing_token:
        return "missing_token";
    case errc::headers_too_large:
        return "headers_too_large";
    case errc::internal:
        return "internal";
    case errc::unavailable:
        return "unavailable";
    case errc::outcome_unknown:
        return "outcome_unknown";
    }
    return "internal";
}

namespace {
class category final : public std::error_category {
public:
    const char* name() const noexcept override { return "fencekeeper"; }
    std::string message(int ev) const override { return std::string(to_string(errc(ev))); }
};
} // namespace

const std::error_category& fencekeeper_category() noexcept {
    static const category instance;
    return instance;
}

std::error_code make_error_code(errc e) noexcept {
    return {static_cast<int>(e), fencekeeper_category()};
}

} // namespace fk
