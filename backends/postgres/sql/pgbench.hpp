#pragma once
// The pgbench baseline of scripts/bench.sh: the store's own single-row put as a pgbench
// script, so that the baseline prepares and runs the very statement the store does. Pure.

#include <string>
#include <string_view>

namespace fk::store::pg::sql {

// put_sql with $1..$8 written as the pgbench variables :key :lock :token :body
// :content_type :if_match :if_match_any :if_none_match and a closing ';'. pgbench
// -M prepared turns them back into parameters.
std::string bench_single_write_sql(std::string_view schema);
// The whole pgbench script (scripts/bench/pg_fenced_upsert.sql): a header saying how to
// run it, \set lines for one key per lock and an always-accepted token, then
// bench_single_write_sql.
std::string bench_pgbench_script(std::string_view schema);

} // namespace fk::store::pg::sql
