#pragma once
// Every SQL text the Postgres store sends, built by pure functions so that tests (and the
// upcoming group commit, issue 6) can inspect and reuse them without a database.
//
// The write statements are single data-modifying CTEs; see docs/postgres.md for why one
// statement is atomic under READ COMMITTED with any number of proxies. Their result
// columns are mapped by backends/postgres/result.hpp.

#include "backends/store.hpp"
#include "fence/rule.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
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
} // namespace name

// "fk_op_<index>": user operations are named by their position in the sorted config map,
// so any operation name (even one that is not an SQL identifier) is safe.
std::string op_statement_name(std::size_t index);

// A double-quoted SQL identifier.
std::string quote_ident(std::string_view ident);
// Schema names we accept: 1..63 bytes, no NUL and no '$' (the migration uses dollar
// quoting).
bool valid_schema_name(std::string_view schema) noexcept;

// The smallest string that is bytewise greater than every string starting with `prefix`
// and still valid UTF-8 (the last code point incremented, skipping surrogates); nullopt
// when there is none (empty prefix, or only U+10FFFF). Bytewise order of UTF-8 equals code
// point order, so [prefix, successor) is exactly the set of strings with that prefix.
std::optional<std::string> prefix_successor(std::string_view prefix);

// One simple-query string (several statements in one transaction) that creates or
// migrates the schema. Serialized across concurrently starting proxies by a
// transaction-level advisory lock; idempotent; fails (SQLSTATE FKV01) when the database
// holds a newer schema version than this binary knows.
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

// The texts, exposed for tests and for the benchmark (pgbench runs the same put).
std::string put_sql(std::string_view schema);
std::string delete_sql(std::string_view schema);
std::string advance_sql(std::string_view schema);
std::string get_sql(std::string_view schema, bool with_body);
std::string read_fence_sql(std::string_view schema);
std::string list_sql(std::string_view schema, bool bounded);
std::string op_fence_sql(std::string_view schema);

// For the benchmark (issue 6, scripts/bench/pg_fenced_upsert.sql): put_sql with $1..$8
// written as the pgbench variables :key :lock :token :body :content_type :if_match
// :if_match_any :if_none_match and a closing ';'. pgbench -M prepared turns them back into
// parameters, so the baseline prepares and runs the very statement the store does.
std::string bench_single_write_sql(std::string_view schema);
// The whole pgbench script: a header saying how to run it, \set lines for one key per
// lock and an always-accepted token, then bench_single_write_sql.
std::string bench_pgbench_script(std::string_view schema);

// One statement parameter. Text parameters own their value; binary ones (the body) view
// the request's storage, which outlives the query.
struct param {
    std::optional<std::string> text; // nullopt and !binary → SQL NULL
    std::string_view binary;
    bool is_binary = false;

    static param null() { return {}; }
    static param of(std::string v) { return param{std::move(v), {}, false}; }
    static param bytes(std::string_view v) { return param{std::nullopt, v, true}; }
};
using param_list = std::vector<param>;

// Parameters, in the order the statements above expect them.
param_list put_params(const put_request& req);
param_list delete_params(const delete_request& req);
param_list advance_params(std::string_view lock, token_t token);
param_list key_params(std::string_view key);
param_list lock_params(std::string_view lock);
// Listing: lower bound (>= prefix), exclusive `after`, upper bound (bounded only), limit.
// Fetches limit + 1 rows so that the caller knows whether there is a next page.
struct list_query {
    const char* statement;
    param_list params;
};
list_query list_params(const list_request& req);
param_list op_fence_params(std::string_view lock, token_t token);
param_list op_params(const std::vector<std::optional<std::string>>& values);

} // namespace fk::store::pg::sql
