#include "backends/postgres/sql.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace fk::store::pg;

namespace {

// The test's own path locates the repository, so no build-time definition is needed.
std::filesystem::path bench_sql_path() {
    return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path() / "scripts" /
           "bench" / "pg_fenced_upsert.sql";
}

} // namespace

TEST_CASE("the pgbench statement is the store's put statement with named variables") {
    const auto bench = sql::bench_single_write_sql("fencekeeper");
    auto back = bench.substr(0, bench.size() - 2); // ";\n"
    CHECK(bench.substr(bench.size() - 2) == ";\n");
    const char* vars[] = {"key",          "lock",     "token",        "body",
                          "content_type", "if_match", "if_match_any", "if_none_match"};
    // Longest names first, so that :if_match does not eat into :if_match_any.
    const int order[] = {7, 6, 4, 5, 3, 2, 1, 0};
    for (int i : order) {
        const std::string from = std::string(":") + vars[i];
        const std::string to = "$" + std::to_string(i + 1);
        for (std::size_t pos = 0; (pos = back.find(from, pos)) != std::string::npos;)
            back.replace(pos, from.size(), to);
    }
    CHECK(back == sql::put_sql("fencekeeper"));
    CHECK(bench.find('$' + std::string("1")) == std::string::npos);
}

TEST_CASE("scripts/bench/pg_fenced_upsert.sql is what the store prepares") {
    const auto expected = sql::bench_pgbench_script("fencekeeper");
    const auto path = bench_sql_path();
    if (std::getenv("FK_UPDATE_BENCH_SQL")) {
        std::ofstream(path, std::ios::binary | std::ios::trunc) << expected;
        MESSAGE("rewrote " << path.string());
    }
    std::ifstream in(path, std::ios::binary);
    REQUIRE_MESSAGE(in.good(), "missing " << path.string());
    std::ostringstream text;
    text << in.rdbuf();
    CHECK_MESSAGE(text.str() == expected,
                  path.string() << " is out of date: run FK_UPDATE_BENCH_SQL=1 ./unit_postgres");
}
