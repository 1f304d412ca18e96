#pragma once
// Every expected failure in fencekeeper is one of these codes. They travel as values
// (never exceptions) from fence/, config/ and backends/ up to proxy/, where exactly one
// place (proxy/error_response.cpp) turns them into HTTP statuses and JSON bodies.

#include <string_view>
#include <system_error>

namespace fk {

enum class errc {
    ok = 0,
    invalid_token,                // 400
    invalid_name,                 // 400
    invalid_request,              // 400
    unauthorized,                 // 401
    forbidden,                    // 403: the caller's scope does not cover the key, lock or route
    not_found,                    // 404
    method_not_allowed,           // 405
    stale_token,                  // 409
    lock_mismatch,                // 409
    idempotency_in_progress,      // 409: a write with this Idempotency-Key is still running
    precondition_failed,          // 412
    body_too_large,               // 413
    operation_failed,             // 422
    idempotency_key_reused,       // 422: the Idempotency-Key was used for a different request
    missing_token,                // 428
    too_many_idempotency_records, // 429: the caller holds as many records as it may
    headers_too_large,            // 431
    internal,                     // 500: a bug; never expected
    unavailable,                  // 503: store down, failed or overloaded; nothing written
    outcome_unknown,              // 504: the write may or may not have been applied
};

// The wire name of a code ("stale_token"), as used in JSON error bodies.
std::string_view to_string(errc e) noexcept;

const std::error_category& fencekeeper_category() noexcept;
std::error_code make_error_code(errc e) noexcept;

} // namespace fk

template <> struct std::is_error_code_enum<fk::errc> : std::true_type {};
