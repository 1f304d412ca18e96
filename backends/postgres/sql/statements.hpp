#pragma once
// Every SQL text the Postgres store prepares or sends, built by pure functions so that
// tests and the benchmark (scripts/bench/pg_batch_ceiling.cpp) reuse them without a
// database. Safe from any thread.
//
// The write statements are single data-modifying CTEs; see docs/postgres.md for why one
// statement is atomic under READ COMMITTED with any number of proxies. Their result
// columns are mapped by backends/postgres/result.hpp; their parameters are built by
// sql/params.hpp, in the order given here.

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace fk::store::pg::sql {

// The schema version this binary creates and understands (table schema_version).
inline constexpr int schema_version = 4;

// SQLSTATEs raised by our own functions (class "FK" is unused by Postgres).
// FKR01: a concurrent create raced us, or a concurrent write committed a record under the
// same Idempotency-Key first; nothing of the statement (or batch) was applied.
inline constexpr std::string_view sqlstate_retry = "FKR01";
inline constexpr std::string_view sqlstate_stale = "FKST1"; // operation fence step: stale

// Prepared statement names (per connection).
namespace name {
inline constexpr const char* put = "fk_put";
inline constexpr const char* remove = "fk_delete";
inline constexpr const char* advance = "fk_advance";
inline constexpr const char* get_body = "fk_get_body";
inline constexpr const char* get_meta = "fk_get_meta";
inline constexpr const char* read_fence = "fk_read_fence";
inline constexpr const char* list_bounded = "fk_list_bounded";
inline constexpr const char* list_open = "fk_list_open";
inline constexpr const char* op_fence = "fk_op_fence";
inline constexpr const char* batch_begin = "fk_batch_begin";
inline constexpr const char* write_batch = "fk_write_batch";             // plain shape
inline constexpr const char* write_batch_keyed = "fk_write_batch_keyed"; // keyed shape
inline constexpr const char* batch_lock_timeout = "fk_batch_lock_timeout";
// Idempotency-Key records (schema version 2).
inline constexpr const char* idem_get = "fk_idem_get";
inline constexpr const char* advance_idem = "fk_advance_idem";
inline constexpr const char* begin = "fk_begin";
inline constexpr const char* commit = "fk_commit";
inline constexpr const char* op_record = "fk_op_record";
inline constexpr const char* idem_expire = "fk_idem_expire";
inline constexpr const char* idem_usage = "fk_idem_usage";
// Fence floors (schema version 3).
inline constexpr const char* floor_lock_floors = "fk_floor_lock_floors";
inline constexpr const char* floor_lock_fences = "fk_floor_lock_fences";
inline constexpr const char* raise_floor = "fk_raise_floor";
inline constexpr const char* list_floors = "fk_list_floors";
// Transactions (POST /v1/transactions).
inline constexpr const char* txn = "fk_txn";
inline constexpr const char* txn_restore_settings = "fk_txn_restore_settings";
} // namespace name

// "fk_op_<index>": user operations are named by their position in the sorted config map,
// so any operation name (even one that is not an SQL identifier) is safe.
std::string op_statement_name(std::size_t index);

// One simple-query string (several statements in one transaction) that creates or
// migrates the schema. Serialized across concurrently starting proxies by a
// transaction-level advisory lock; idempotent; fails (SQLSTATE FKV01) when the database
// holds a newer schema version than this binary knows. (sql/migration.cpp)
std::string migration_script(std::string_view schema);

// Per session, after connect: our statement_timeout (the server cancels a statement that
// runs longer; our own timer on top of it catches a dead network).
std::string session_setup(std::chrono::milliseconds statement_timeout);

struct statement {
    const char* name;
    std::string text;
    int nparams;
};
// All statements prepared on every connection.
std::vector<statement> prepared_statements(std::string_view schema);

// put($1 key, $2 lock, $3 token, $4 body, $5 content_type, $6 if_match (0 = none),
// $7 if_match_any, $8 if_none_match); delete: the same without body and content type.
std::string put_sql(std::string_view schema);
std::string delete_sql(std::string_view schema);
std::string advance_sql(std::string_view schema);
std::string get_sql(std::string_view schema, bool with_body);
// read_fence_sql($1 lock): one row: the lock's own fence (token, updated_ms; NULL when
// none), then the floor that matches it (floor, floor_token, floor_updated_ms; NULL when
// none; fragments.hpp, floor_for).
std::string read_fence_sql(std::string_view schema);
std::string list_sql(std::string_view schema, bool bounded);
std::string op_fence_sql(std::string_view schema);

// Group commit (the lock-order argument is in sql/batch.cpp and docs/postgres.md). A
// batch of writes to distinct keys and distinct locks is one pipeline in one implicit
// transaction: [batch_begin_sql, write_batch_sql, Sync].
//   batch_begin_sql: index-only generic plans, no JIT, in this transaction (see
//     sql/batch.cpp).
//   write_batch_sql(schema, batch_shape::keyed) ($1 key[], $2 lock[], $3 token[],
//     $4 body[], $5 content_type[], $6 if_match[] (0 = none), $7 if_match_any[],
//     $8 if_none_match[], $9 is_delete[], $10 idem_scope[], $11 idem_key[],
//     $12 fingerprint[] (NULL for an unkeyed row), $13 retention_s): per row, the same
//     checks and fence step as put_sql/delete_sql, each row fenced on its own; updates
//     the keys that have a row and inserts the others; a keyed row with an unexpired
//     record is answered from it and not applied, an applied keyed row gets its record;
//     a row below the floor over its lock is refused (the fence floors, below); one
//     result row per input row, in input order (map_batch). Also used for a lone keyed
//     put or delete.
//   write_batch_sql(schema, batch_shape::plain) ($1..$9 as above): the same for a batch
//     in which no row carries an Idempotency-Key, without reading or writing the
//     idempotency table; the same result columns (the record's always NULL). Each batch
//     goes out in the shape write_batch_statement picks (sql/params.hpp).
enum class batch_shape { plain, keyed };
std::string batch_begin_sql();
std::string write_batch_sql(std::string_view schema, batch_shape shape);
// A batch that carries transactions (write_batcher.cpp, run_mixed_on):
// [batch_begin_sql, write_batch_sql (when it has single writes; either shape),
// batch_lock_timeout_sql, txn_sql for each transaction, Sync], one implicit transaction,
// one commit.
//   batch_lock_timeout_sql(): lock_timeout batch_lock_timeout_ms for the rest of this
//     transaction: the statements after the first take their row locks out of the one
//     lock order (sql/batch.cpp), so their waits are bounded instead.
inline constexpr int batch_lock_timeout_ms = 100;
std::string batch_lock_timeout_sql();

// Idempotency-Key records (table idempotency, schema version 2; docs/postgres.md). A
// record is unexpired while committed_at > now() - retention; every statement takes the
// retention in seconds as a parameter, so that it is the config's, not the schema's.
//   idem_get_sql($1 scope, $2 key, $3 retention_s): the unexpired record, if any:
//     fingerprint, created, version, token, rows_affected, rows. A plain read.
//   advance_idem_sql($1 lock, $2 token, $3 scope, $4 key, $5 fingerprint,
//     $6 retention_s): advance_sql's columns (applied, seen_fence), then raced, then the
//     record found before applying (rec_same: NULL when none, else whether the
//     fingerprint is the same; rec_token). With a record nothing is applied; else the
//     fence step and the record commit together, and a record another transaction
//     committed meanwhile raises FKR01 (re-run: it then answers).
//   op_record_sql($1 scope, $2 key, $3 fingerprint, $4 token, $5 rows_affected,
//     $6 rows, $7 retention_s): a named operation's record, inside its transaction
//     (between the user's statement and COMMIT); FKR01 when an unexpired record exists.
//   idem_expire_sql($1 retention_s, $2 limit): deletes up to `limit` expired records,
//     oldest first, skipping rows another transaction holds; returns how many.
//   idem_usage_sql($1 retention_s): per scope with an unexpired record: scope, records,
//     bytes (store::idem_record_bytes summed), the oldest commit in Unix ms. One pass
//     over the table in primary-key order, no lock (backends/idem_quota.hpp).
std::string idem_get_sql(std::string_view schema);
std::string advance_idem_sql(std::string_view schema);
std::string op_record_sql(std::string_view schema);
std::string idem_expire_sql(std::string_view schema);
std::string idem_usage_sql(std::string_view schema);

// Fence floors (table floors, schema version 3; docs/postgres.md, "Fence floors"). Every
// write statement above checks the effective fence, max(own fence, the highest floor
// whose prefix the lock starts with), in its fence step, and reports it as seen_fence,
// with a last column `floor`: the floor's prefix when the floor is above the own fence
// (or there is none), else NULL. A floor is raised by one transaction, the pipeline
//   [BEGIN, floor_lock_floors_sql, floor_lock_fences_sql, raise_floor_sql, COMMIT, Sync]
// (sql/floors.cpp says why the locks).
//   raise_floor_sql($1 prefix, $2 token, $3 scope, $4 key, $5 fingerprint (NULL for an
//     unkeyed raise), $6 retention_s): applied (the new floor; NULL when not raised),
//     floor_token (the prefix's floor before, if any), raced (FKR01 when another
//     transaction committed a record under the key meanwhile), rec_same and rec_token
//     (the unexpired record found, as advance_idem_sql), floor_count (how many floors
//     exist). Raises only above the prefix's floor, and a new prefix only while fewer
//     than store::max_floors floors exist.
//   list_floors_sql(): prefix, token, updated_ms, sorted bytewise by prefix.
std::string floor_lock_floors_sql(std::string_view schema);
std::string floor_lock_fences_sql(std::string_view schema);
std::string raise_floor_sql(std::string_view schema);
std::string list_floors_sql(std::string_view schema);

// Transactions (docs/postgres.md, "Transactions"; sql/txn.cpp has the lock-order
// argument). One explicit transaction on one connection, in pipelines:
//   [BEGIN, batch_begin_sql, txn_sql, Sync]; when every op passed and there are named
//   operations, [txn_restore_settings_sql, each operation's statement in op order, Sync];
//   then [op_record_sql (with an Idempotency-Key: the results as its rows), COMMIT, Sync].
//   txn_sql($1 kind[] (txn.hpp's to_string), $2 key[], $3 lock[], $4 token[], $5 body[],
//     $6 content_type[], $7 if_match[] (0 = none), $8 if_match_any[], $9 if_none_match[],
//     $10 want[] (check_version: the version required, NULL = absent)), one element per
//     op (an operation op is its fence step): one row per op, in op order: n, mismatch,
//     key_lock, stale, current_token, floor, pre_failed, token, version, created,
//     unwritten (raises FKR01 on a create race). Writes data only when every op passed.
//   txn_restore_settings_sql(): the session's plan settings back, for the operations.
std::string txn_sql(std::string_view schema);
std::string txn_restore_settings_sql();

} // namespace fk::store::pg::sql
