#pragma once
// Pure mapping from what Postgres answered to the store's results. libpq results are
// copied into result_table (by detail/connection.cpp) so that everything here is testable
// without a database, and so that a batch maps one row per request.

#include "backends/store.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fk::store::pg {

struct column {
    std::string name;
    unsigned oid = 0;
};

// One PGresult, detached from libpq.
struct result_table {
    enum class status { command_ok, tuples_ok, error, pipeline_aborted, pipeline_sync, other };
    status st = status::other;
    std::string sqlstate; // error: from the server; empty for errors libpq made up
    std::string message;  // error: primary message
    std::string detail;   // error: DETAIL
    std::string hint;     // error: HINT (fk_fence_step: "floor:" and the floor's prefix)
    std::string cmd_tuples;
    bool binary = false; // values are in binary format
    std::vector<column> columns;
    std::vector<std::vector<std::optional<std::string>>> rows;

    bool ok() const noexcept { return st == status::command_ok || st == status::tuples_ok; }
    // A server-reported error: the statement (and its transaction) did not commit.
    bool server_error() const noexcept { return st == status::error && !sqlstate.empty(); }
};

// How one exchange (a statement, or a pipeline ending in Sync) went on the wire.
struct exec_outcome {
    enum class transport {
        ok,                // every result and the final ReadyForQuery arrived
        failed_unsent,     // lost (or refused) before the request was completely sent
        failed_after_send, // lost after the whole request (its Sync) was sent
        timeout_unsent,    // our deadline passed before the request was completely sent
        timeout_after_send // our deadline passed after it was sent
    };
    transport t = transport::ok;
    std::vector<result_table> results;
    std::string error; // libpq's message when the transport failed

    bool sent() const noexcept {
        return t == transport::ok || t == transport::failed_after_send ||
               t == transport::timeout_after_send;
    }
};

// What to do with an SQLSTATE from one of our own statements or a user operation.
// Connection, resource, shutdown, cancel/timeout, serialization and deadlock classes are
// transient (→ unavailable: rolled back, safe to retry); anything else from a user's
// operation is operation_failed, from our own statements internal.
bool transient_sqlstate(std::string_view sqlstate) noexcept;
// Errors that prove the transaction rolled back and that a re-run may well succeed:
// FKR01 (a create race, or a record committed meanwhile), a deadlock, a serialization
// failure.
bool rerun_sqlstate(std::string_view sqlstate) noexcept;

// How an exchange that ends an explicit transaction ([..., COMMIT, Sync]) ended, with
// `commit_at` the index of its COMMIT. The COMMIT's own result is the proof: the server
// commits before it sends COMMIT's CommandComplete, and a backend terminated after that
// reports its FATAL against the Sync (then closes), so a successful COMMIT result means
// committed whatever follows. Before it: a server error on an earlier step, or an ordinary
// error on the COMMIT with the session still alive (say 40001), rolled back; a lost
// connection, or a session-ending error (class 08 or 57P) on the COMMIT itself, leaves the
// outcome unknown. docs/api.md#durability-and-retries says what each promises.
struct commit_verdict {
    enum class kind { committed, rolled_back, unknown, malformed };
    kind what = kind::malformed;
    result_table error; // rolled_back: the server error that did it (a copy)
};
commit_verdict commit_verdict_of(const exec_outcome& o, std::size_t commit_at);

// ---- writes (put, delete, advance_fence) ----

// The result of mapping: either a final write_result, or "re-run the statement" when a
// concurrent transaction raced us in a way the single statement cannot report truthfully
// (nothing was written in that case).
struct write_mapping {
    bool retry = false;
    bool alone = false; // with retry: the whole batch aborted; re-run this write by itself
    write_result result;
};

// For put/delete: the row of sql::put_sql / sql::delete_sql (text format). A stale row
// carries the effective fence (seen_fence) and, from the column named `floor`, the floor
// that set it.
write_mapping map_write_row(const result_table& t, token_t token, bool is_put);
// For advance_fence: the row of sql::advance_sql, or of sql::advance_idem_sql (whose
// rec_same and rec_token columns answer from the record found).
write_mapping map_advance_row(const result_table& t, token_t token);

// A whole write exchange: transport and server errors, then the row. `is_write` false
// (never used for writes today) is kept for symmetry with reads.
write_mapping map_write(const exec_outcome& o, token_t token, bool is_put, bool is_advance);

// For a group-commit batch, the pipeline [`leading` statements (batch_begin_sql),
// write_batch_sql, Sync]: one mapping per row, in input order. A server error (a create
// race's FKR01 among them) aborted the whole transaction, so nothing was written: a batch
// of several rows is re-run one write at a time (retry + alone), a lone write is mapped
// like map_write. A transport failure is
// every row's (503 before the Sync left us, 504 outcome_unknown after).
// A write exchange's transport failure, if any: unavailable when the request never
// completely left us, outcome_unknown after it did.
std::optional<write_result> write_transport_failure(const exec_outcome& o);

struct batch_row {
    token_t token = 0;
    bool is_put = true;
};
std::vector<write_mapping> map_batch(const exec_outcome& o, const std::vector<batch_row>& rows,
                                     std::size_t leading);

// ---- Idempotency-Key records ----

// A record as stored (sql::idem_get_sql).
struct idem_record {
    std::string fingerprint;
    bool created = false;
    std::int64_t version = 0;
    token_t token = 0;
    std::int64_t rows_affected = 0;
    std::string rows_json;
};
// The lookup before a keyed write: error (unavailable, internal) or the record, if any.
struct idem_lookup {
    errc error = errc::ok;
    std::string message;
    std::optional<idem_record> record;
};
// sql::idem_get_sql's result, in binary format.
idem_lookup map_idem_get(const exec_outcome& o);
// sql::idem_usage_sql's result: the unexpired records per scope, or unavailable.
idem_usage_result map_idem_usage(const exec_outcome& o);
// The answer a record gives to a write with `fingerprint`: the recorded outcome
// (replayed) when it is the same request, else idempotency_key_reused. `is_put` keeps
// created and version (delete and fence: the token only).
write_result replay_write(const idem_record& rec, std::string_view fingerprint, bool is_put);
operation_result replay_operation(const idem_record& rec, std::string_view fingerprint);

// ---- reads ----

object_result map_get(const exec_outcome& o, bool with_body);
// sql::read_fence_sql's row: the effective fence; the floor's (named) when it is above
// the own fence or there is none; not_found when neither exists.
fence_result map_read_fence(const exec_outcome& o, std::string lock);
list_result map_list(const exec_outcome& o, std::size_t limit);

// ---- fence floors ----

// The pipeline [BEGIN, lock floors, lock fences, sql::raise_floor_sql, COMMIT, Sync]
// (`leading` = the 3 results before the statement's). A server error rolled the
// transaction back: a re-run for FKR01 (a record committed meanwhile), a deadlock or a
// serialization failure, else unavailable (transient) or internal; the caller must end
// the failed transaction (ROLLBACK). A transport failure: unavailable before the Sync
// left us, outcome_unknown after (the COMMIT may have run). Then, from the row: a
// record's answer (replayed with its token, or idempotency_key_reused), ok with the new
// floor, stale_token with current_token = the prefix's floor, or invalid_request when
// max_floors floors exist and the prefix has none.
write_mapping map_raise_floor(const exec_outcome& o, const floor_request& req);
// sql::list_floors_sql.
floors_result map_list_floors(const exec_outcome& o);

// ---- named operations ----

// The pipeline [fence step, user statement, Sync]. An error of the user's statement
// (422, or 503 when transient) carries the database's text in server_message, and in
// message only with `expose_errors` (the operation's config): it may quote data from any
// table, constraint or column names.
operation_result map_operation(const exec_outcome& o, token_t token, bool expose_errors = false);
// A server error `r` of the user's statement (a lone operation's, or one of a
// transaction's): operation_failed (422) with its SQLSTATE, or unavailable (503) when
// transient; server_message as above.
operation_result map_statement_failure(const result_table& r, bool expose_errors);
// The user's statement's result `t`, successful: token, rows_affected and rows.
operation_result map_statement_rows(const result_table& t, token_t token);
// The user's statement `name` did not prepare (`r` is the error): 422 with its SQLSTATE,
// or 503 when transient or the connection failed; the server's text as above.
operation_result map_prepare_failure(const result_table& r, std::string_view name,
                                     bool expose_errors);

// Rows as a JSON array of objects (column → value): int2/int4/int8/oid, float4/float8 and
// numeric as JSON numbers (NaN/Infinity as strings), bool as true/false, json/jsonb
// embedded, NULL as null, everything else as a string. Text format only.
std::string rows_to_json(const result_table& t);

// A result_table's cells, in text or binary format, for every mapping of rows (here and
// in transactions.cpp). Out of range or NULL: nullptr, nullopt, false, "".
const std::optional<std::string>* cell(const result_table& t, std::size_t row, std::size_t col);
std::optional<std::int64_t> int_at(const result_table& t, std::size_t row, std::size_t col);
bool bool_at(const result_table& t, std::size_t row, std::size_t col);
std::string text_at(const result_table& t, std::size_t row, std::size_t col);
std::optional<std::string> optional_text_at(const result_table& t, std::size_t row,
                                            std::size_t col);
// The value of the column named `name` (NULL, or no such column: nullopt).
std::optional<std::string> named_at(const result_table& t, std::size_t row, std::string_view name);

// Binary-format helpers (network byte order), exposed for tests.
std::optional<std::int64_t> decode_int8(std::string_view bytes) noexcept;
std::optional<std::int64_t> parse_int(std::string_view text) noexcept;

// A result of type R (write_result, operation_result, ...) carrying error `e`.
template <class R> R failure(errc e, std::string message) {
    R r;
    r.error = e;
    r.message = std::move(message);
    return r;
}
// A refusal before anything was sent (no connection, the store stopping): 503.
template <class R> R unavailable(std::string message) {
    return failure<R>(errc::unavailable, std::move(message));
}

} // namespace fk::store::pg
