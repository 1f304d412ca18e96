#pragma once
// Transactions on the Postgres store (POST /v1/transactions; docs/postgres.md,
// "Transactions"): one explicit database transaction on one pooled connection, in the
// pipelines sql/statements.hpp lists. run_txn_on runs on the connection's strand and never
// acquires or releases a connection, nor touches the fence cache: the caller
// (postgres_store) does that, looks up the Idempotency-Key record first and re-runs the
// whole transaction when an attempt asks for it. map_txn_checks and replay_txn are pure.

#include "backends/postgres/detail/connection.hpp"
#include "backends/postgres/operations.hpp"
#include "backends/postgres/result.hpp"
#include "backends/store.hpp"

#include <chrono>
#include <string_view>
#include <vector>

namespace fk::store::pg {

// sql::txn_sql's answer (text format, one row per op in op order): every op passed
// (`results` holds each op's outcome; an operation's rows come later), or the first
// failing op in op order decided (`refusal`, with its op_index), or the answer cannot be
// trusted and the transaction must be re-run: a stale op whose snapshot shows a fence at
// or below its token (a fence committed after the snapshot refused it; a re-run reports
// it), or a malformed answer (internal).
struct txn_checks {
    enum class outcome { passed, refused, rerun };
    outcome what = outcome::refused;
    txn_result refusal;
    std::vector<txn_op_result> results;
};
txn_checks map_txn_checks(const result_table& t, const std::vector<txn_op>& ops);

// One attempt. `rerun`: rolled back, nothing applied; run the whole transaction again
// (a create race, a deadlock, a serialization failure, a record under the
// Idempotency-Key committed meanwhile: the caller looks the record up again first).
// Else `result` is the answer; with ok, `results` holds every op's outcome.
struct txn_attempt {
    bool rerun = false;
    txn_result result;
    std::vector<txn_op_result> results;
};

// On `c`'s strand. `entries[i]` is the operation of ops[i] when it is an operation op
// (null otherwise; the caller has refused unknown names). Prepares those operations on
// `c` first, outside the transaction; then [BEGIN, plan settings, txn_sql, Sync], the
// operations' statements, and [the record (with req.idem), COMMIT, Sync]. Any failure
// before COMMIT was sent is definite (unavailable, or the op's refusal): the transaction
// is rolled back, or the connection is lost and the server rolls it back. A failure after
// the COMMIT was sent, without a server error, is outcome_unknown.
net::awaitable<txn_attempt> run_txn_on(detail::connection& c, operations& ops,
                                       const std::vector<const operations::entry*>& entries,
                                       const txn_request& req, std::chrono::seconds retention,
                                       detail::millis timeout);

// The answer of a transaction's Idempotency-Key record: ok + replayed with the recorded
// results text when the fingerprints match, else idempotency_key_reused.
txn_result replay_txn(const idem_record& rec, std::string_view fingerprint);

} // namespace fk::store::pg
