#include "backends/postgres/sql/pgbench.hpp"

#include "backends/postgres/sql/quoting.hpp"
#include "backends/postgres/sql/statements.hpp"

#include <iterator>

namespace fk::store::pg::sql {

std::string bench_single_write_sql(std::string_view schema) {
    static constexpr std::string_view vars[] = {"key",          "lock",         "token",
                                                "body",         "content_type", "if_match",
                                                "if_match_any", "if_none_match"};
    std::string s = put_sql(schema);
    std::string from, to;
    for (std::size_t i = 0; i < std::size(vars); ++i) {
        // Built by append: GCC 12 at -O3 warns (-Wrestrict, falsely) about "$" + string.
        from.assign(1, '$');
        from.append(std::to_string(i + 1));
        to.assign(1, ':');
        to.append(vars[i]);
        s = replace_all(std::move(s), from, to);
    }
    s.append(";\n");
    return s;
}

std::string bench_pgbench_script(std::string_view schema) {
    std::string s =
        "-- The fenced single-row upsert fencekeeper prepares as \"fk_put\" for every PUT\n"
        "-- (backends/postgres/sql/statements.cpp, put_sql), with $1..$8 written as pgbench "
        "variables.\n"
        "-- GENERATED: do not edit. tests/unit/postgres_bench_sql_test.cpp checks that it equals\n"
        "-- sql::bench_pgbench_script(\"" +
        std::string(schema) +
        "\"); FK_UPDATE_BENCH_SQL=1 ./unit_postgres rewrites it.\n"
        "--\n"
        "-- The schema must exist: start fencekeeper once against the database (it migrates\n"
        "-- at start), then stop it. Run, for example:\n"
        "--   pgbench -n -M prepared -c 32 -j 4 -T 20 -D body=0123456789abcdef \\\n"
        "--           -D content_type=application/octet-stream -f pg_fenced_upsert.sql DB\n"
        "-- Many locks, one key per lock (key = lock); token 1 equals the fence after the\n"
        "-- first write, so every write is accepted and rewrites its row (an equal token\n"
        "-- passes the fence). if_match 0 means no If-Match (pgbench cannot send NULL).\n"
        "\\set key random(1, 1000000)\n"
        "\\set lock :key\n"
        "\\set token 1\n"
        "\\set if_match 0\n"
        "\\set if_match_any false\n"
        "\\set if_none_match false\n";
    return s + bench_single_write_sql(schema);
}

} // namespace fk::store::pg::sql
