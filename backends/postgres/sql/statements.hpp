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
inline constexpr int schema_version = 1;

// SQLSTATEs raised by our own functions (class "FK" is unused by Postgres).
inline constexpr std::string_view sqlstate_retry = "FKR01"; // a concurrent create raced us
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
inline constexpr const char* write_batch = "fk_write_batch";
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
std::string read_fence_sql(std::string_view schema);
std::string list_sql(std::string_view schema, bool bounded);
std::string op_fence_sql(std::string_view schema);

// Group commit (the lock-order argument is in sql/batch.cpp and docs/postgres.md). A
// batch of writes to distinct keys and distinct locks is one pipeline in one implicit
// transaction: [batch_begin_sql, write_batch_sql, Sync].
//   batch_begin_sql: index-only generic plans in this transaction (see sql/batch.cpp).
//   write_batch_sql($1 key[], $2 lock[], $3 token[], $4 body[], $5 content_type[],
//     $6 if_match[] (0 = none), $7 if_match_any[], $8 if_none_match[], $9 is_delete[]):
//     per row, the same checks and fence step as put_sql/delete_sql, each row fenced on
//     its own; updates the keys that have a row and inserts the others; one result row
//     per input row, in input order (map_batch).
std::string batch_begin_sql();
std::string write_batch_sql(std::string_view schema);

} // namespace fk::store::pg::sql
