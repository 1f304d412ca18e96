#pragma once
// Transactions (POST /v1/transactions, docs/api.md#post-v1transactions): several writes,
// fence advances, guards and (Postgres) named operations, committed together or not at
// all. The HTTP side parses and validates the body into a txn_request (validate_txn);
// a store decides every op against the index or the database inside one atomic step
// (the file store's committer batch, one Postgres transaction) and answers a txn_result.
// The results are rendered once, by render_txn_results, so that an Idempotency-Key record
// can keep the very text a replay returns.

#include "backends/text_params.hpp"
#include "fence/error.hpp"
#include "fence/rule.hpp"
#include "fence/token.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fk::store {

using fence::token_t;

// The most ops a transaction may hold, unless configured otherwise (limits.max_txn_ops).
inline constexpr std::size_t default_max_txn_ops = 100;

struct txn_op {
    enum class kind { put, remove, fence, check, check_version, operation };
    kind op = kind::put;
    std::string key;          // put, remove, check_version
    std::string lock;         // put, remove (defaulted to the key by the caller), fence, check,
                              // operation
    token_t token = 0;        // put, remove, fence, check, operation
    std::string content_type; // put
    std::string body;         // put: the bytes to store (body, or body_base64 decoded)
    fence::preconditions pre; // put (if_match, if_none_match), remove (if_match)
    // check_version: the version the key must have now (> 0), or nullopt for "absent":
    // the key has no row or is deleted.
    std::optional<std::int64_t> version;
    std::string name;   // operation: the configured name
    text_params params; // operation: $1..$n as text, nullopt NULL
};

std::string_view to_string(txn_op::kind k) noexcept;

// One op's outcome, in op order, when the transaction commits.
struct txn_op_result {
    // put, remove, check_version: the key's version after the transaction (put: the new
    // one; remove: the deleted version, 0 when the key did not exist, never written or
    // already deleted; check_version: the version found, 0 when absent).
    std::int64_t version = 0;
    bool created = false; // put: the key did not exist or was deleted
    // put, remove, fence, operation: the lock's fence after the transaction; check: the
    // lock's effective fence that the token was checked against, in op order (after an
    // earlier op of the transaction on that lock: the transaction's token; 0: none).
    token_t token = 0;
    std::int64_t rows_affected = 0; // operation
    std::string rows_json;          // operation: a JSON array of objects
};

// The validation the HTTP side runs before a transaction reaches a store (all of it
// without I/O): the op count (1..max_ops), each key at most once, and each lock with one
// token (a transaction acts as one holder of each lock it names: two ops on one lock with
// different tokens are refused rather than decided in an order-dependent way). Empty when
// valid; else the message and the index of the first offending op.
struct txn_shape_error {
    std::size_t op_index = 0;
    std::string message;
};
std::optional<txn_shape_error> validate_txn(const std::vector<txn_op>& ops, std::size_t max_ops);

// The "results" array of a committed transaction, as JSON text: one object per op, in op
// order (docs/api.md#post-v1transactions). Both stores render with this, and keep the
// text in the transaction's Idempotency-Key record, so a replay returns the same bytes.
std::string render_txn_results(const std::vector<txn_op>& ops,
                               const std::vector<txn_op_result>& results);

} // namespace fk::store
