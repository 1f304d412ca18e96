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
inline constexpr const char* batch_begin = "fk_batch_begin";
inline constexpr const char* write_batch = "fk_write_batch";
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

// Group commit (issue 6; the lock-order argument is in sql.cpp and docs/postgres.md). A
// batch of writes to distinct keys and distinct locks is one pipeline in one implicit
// transaction: [batch_begin_sql, write_batch_sql, Sync].
//   batch_begin_sql: index-only generic plans in this transaction (see sql.cpp for why).
//   write_batch_sql($1 key[], $2 lock[], $3 token[], $4 body[], $5 content_type[],
//     $6 if_match[] (0 = none), $7 if_match_any[], $8 if_none_match[], $9 is_delete[]):
//     per row, the same checks and fence step as put_sql/delete_sql, each row fenced on
//     its own; updates the keys that have a row and inserts the others; one result row
//     per input row, in input order (map_batch).
std::string batch_begin_sql();
std::string write_batch_sql(std::string_view schema);

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
    std::optional<std::string> text; // nullopt and !binary → SQL NULL; owned binary value
    std::string_view binary;         // binary value viewed (when text is nullopt)
    bool is_binary = false;

    static param null() { return {}; }
    static param of(std::string v) { return param{std::move(v), {}, false}; }
    static param bytes(std::string_view v) { return param{std::nullopt, v, true}; }
    static param owned_bytes(std::string v) { return param{std::move(v), {}, true}; }
    std::string_view binary_value() const noexcept { return text ? *text : binary; }
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

// One write of a batch, viewing the request (which outlives the exchange).
struct batch_item {
    std::string_view key;
    std::string_view lock;
    token_t token = 0;
    bool is_delete = false;
    std::string_view body;
    std::string_view content_type;
    fence::preconditions pre;
};
// Arrays in binary format (no quoting, bodies as raw bytes).
param_list write_batch_params(const std::vector<batch_item>& items);
// A batch of one goes out as the single-row statement (put_sql / delete_sql): measured,
// it costs the database a third of the batch pipeline's CPU for one row.
param_list single_write_params(const batch_item& item);

// Binary array encoding (one dimension, lower bound 1), exposed for tests.
inline constexpr unsigned oid_bool = 16, oid_bytea = 17, oid_int8 = 20, oid_text = 25;
class array_builder {
public:
    array_builder(unsigned elem_oid, std::size_t count);
    void add(std::string_view bytes);
    void add_int8(std::int64_t v);
    void add_bool(bool v);
    std::string finish() &&;

private:
    std::string out_;
};

} // namespace fk::store::pg::sql
