#pragma once
// The body of POST /v1/transactions (docs/api.md#post-v1transactions), {"ops": [...]}, as
// the store's ops: every field checked, header defaults applied, then store::validate_txn.
// Pure and thread-agnostic. One pass of the JSON reader (json_reader.hpp) and no JSON tree, so a
// duplicate key is seen (a tree keeps the last one silently), numbers in an operation's
// params keep their own text (proxy/detail/operation_params.hpp, param_value), and
// parsing stops at the first op beyond the op limit. What it keeps is a small multiple of
// the body (docs/operations.md, "Memory"): parameters packed (store::text_params), and
// none at all of an op whose parameter count is already wrong, nor of any op once one
// names an operation the store does not have: such a transaction is refused, and the
// rest of the body is only read for the refusals that come first.

#include "backends/txn.hpp"
#include "fence/error.hpp"
#include "fence/token.hpp"

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fk::proxy::detail {

// The most bytes of a `content_type` field: a header value fencekeeper sends back on GET.
inline constexpr std::size_t max_txn_content_type_bytes = 1024;

struct txn_body_rules {
    std::size_t max_ops = store::default_max_txn_ops;
    // A put's body (after base64 decoding) above this: body_too_large with the op's index.
    std::size_t max_op_body_bytes = 1024 * 1024;
    // The request's Fencing-Token and Fencing-Lock, when present: the token and lock of
    // ops that leave theirs out.
    std::optional<fence::token_t> token;
    std::optional<std::string> lock;
    // `operation` ops: refused unless the store has operations; when param_count knows
    // the operation's parameter count (store::operation_param_count), another count is
    // refused too. param_count is called from the parsing thread.
    bool operations = false;
    std::function<std::optional<std::size_t>(const std::string&)> param_count;
    // Whether the store has operation `name` (store::has_operation); unset: every name
    // counts as known. Called from the parsing thread.
    std::function<bool(const std::string&)> known;
};

struct txn_body {
    std::vector<store::txn_op> ops; // when error == ok
    errc error = errc::ok;          // ok, invalid_request or body_too_large
    std::string message;
    // The op the error is about (absent: the body as a whole, e.g. not JSON).
    std::optional<std::size_t> op_index;
    // When error == ok: the first op naming an operation that rules.known does not know.
    // The store refuses such a transaction before anything else (400 invalid_request,
    // "no operation 'NAME'", this op_index); the ops hold no parameters then.
    std::optional<std::size_t> unknown_operation;
    // The bytes the ops hold (their strings' and parameters' capacity, and the vector).
    std::size_t held_bytes = 0;
};

// Refused, with op_index when one op is at fault: anything but an object whose one key
// "ops" holds an array of objects; in an op, a missing or unknown "op", a field its kind
// does not take, a field of the wrong type, a duplicate key (at any depth), an invalid
// key or lock name, a token that is not a non-negative integer or a Fencing-Token string,
// a missing token or lock (neither in the op nor in the headers), not exactly one of
// body / body_base64 (put) or version / absent (check_version), malformed base64, a
// content_type with control characters; nesting deeper than max_params_depth; more than
// max_ops ops; then whatever store::validate_txn refuses. An operation naming a name
// rules.known does not know is not refused here (the checks that come before the store's,
// scopes and Idempotency-Key, still answer first): see unknown_operation.
txn_body parse_txn_body(std::string_view body, const txn_body_rules& rules);

// Strict base64 (RFC 4648 §4, the standard alphabet): padded to a multiple of 4, no
// whitespace, the unused bits of the last character zero. nullopt when malformed.
std::optional<std::string> decode_base64(std::string_view text);

} // namespace fk::proxy::detail
