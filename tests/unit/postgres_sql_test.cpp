#include "backends/postgres/sql.hpp"

#include <doctest/doctest.h>

using namespace fk::store::pg;

TEST_CASE("quote_ident doubles quotes") {
    CHECK(sql::quote_ident("fencekeeper") == "\"fencekeeper\"");
    CHECK(sql::quote_ident("a\"b") == "\"a\"\"b\"");
}

TEST_CASE("schema names") {
    CHECK(sql::valid_schema_name("fencekeeper"));
    CHECK(sql::valid_schema_name("Weird \"name\""));
    CHECK_FALSE(sql::valid_schema_name(""));
    CHECK_FALSE(sql::valid_schema_name("a$b"));
    CHECK_FALSE(sql::valid_schema_name(std::string(64, 'a')));
    CHECK_FALSE(sql::valid_schema_name(std::string("a\0b", 3)));
}

TEST_CASE("prefix_successor bounds exactly the strings with the prefix") {
    CHECK_FALSE(sql::prefix_successor("").has_value());
    CHECK(sql::prefix_successor("abc") == "abd");
    CHECK(sql::prefix_successor("a/") == "a0");
    CHECK(sql::prefix_successor("\x7e") == "\x7f");
    CHECK(sql::prefix_successor("\x7f") == "\xc2\x80");                 // U+007F → U+0080
    CHECK(sql::prefix_successor("\xc3\xbf") == "\xc4\x80");             // ÿ → Ā
    CHECK(sql::prefix_successor("\xed\x9f\xbf") == "\xee\x80\x80");     // U+D7FF → U+E000
    CHECK(sql::prefix_successor("\xef\xbf\xbf") == "\xf0\x90\x80\x80"); // U+FFFF → U+10000
    CHECK(sql::prefix_successor("a\xf4\x8f\xbf\xbf") == "b");           // U+10FFFF dropped
    CHECK_FALSE(sql::prefix_successor("\xf4\x8f\xbf\xbf").has_value());
    // Every string with the prefix sorts below the successor, bytewise.
    const std::string p = "r\xc3\xa9sum";
    const auto s = *sql::prefix_successor(p);
    for (std::string tail : {"", "\xf4\x8f\xbf\xbf", "zzz", "\xc3\xbf"})
        CHECK(p + tail < s);
    CHECK(s > p);
}

TEST_CASE("put statement: one CTE, fence step before the data, checks in the fence WHERE") {
    const auto s = sql::put_sql("fk");
    CHECK(s.rfind("WITH k AS MATERIALIZED", 0) == 0);
    CHECK(s.find("FOR UPDATE") != std::string::npos);
    CHECK(s.find("INSERT INTO \"fk\".fences AS fe") != std::string::npos);
    CHECK(s.find("WHERE NOT c.mismatch AND NOT c.pre_failed") != std::string::npos);
    CHECK(s.find("WHERE fe.token <= EXCLUDED.token") != std::string::npos);
    // The data write reads from the fence step, so it happens only when that returned a row.
    CHECK(s.find("FROM f\n  ON CONFLICT (key)") != std::string::npos);
    CHECK(s.find("$4::bytea") != std::string::npos);
    CHECK(s.find("fk_raise('FKR01'") != std::string::npos);
    CHECK(s.find("$9") == std::string::npos);
    // Exactly one statement.
    CHECK(s.find(';') == std::string::npos);
}

TEST_CASE("delete statement tombstones and keeps the version") {
    const auto s = sql::delete_sql("fk");
    CHECK(s.find("UPDATE \"fk\".resources r SET deleted = true") != std::string::npos);
    CHECK(s.find("version = r.version + 1") == std::string::npos);
    CHECK(s.find("$6::boolean") != std::string::npos);
    CHECK(s.find("$7") == std::string::npos);
    CHECK(s.find("$4::bytea") == std::string::npos);
}

TEST_CASE("advance and op fence step") {
    CHECK(sql::advance_sql("s").find("ON CONFLICT (lock) DO UPDATE") != std::string::npos);
    CHECK(sql::op_fence_sql("s") == "SELECT \"s\".fk_fence_step($1::text, $2::bigint)");
}

TEST_CASE("migration is versioned, locked and idempotent") {
    const auto m = sql::migration_script("my\"schema");
    CHECK(m.find("pg_advisory_xact_lock") < m.find("CREATE SCHEMA IF NOT EXISTS"));
    CHECK(m.find("\"my\"\"schema\".fences") != std::string::npos);
    CHECK(m.find("hashtext('my\"schema')") != std::string::npos);
    CHECK(m.find("lock text COLLATE \"C\" PRIMARY KEY") != std::string::npos);
    CHECK(m.find("key text COLLATE \"C\" PRIMARY KEY") != std::string::npos);
    CHECK(m.find("IF v < 1 THEN") != std::string::npos);
    CHECK(m.find("ERRCODE = 'FKV01'") != std::string::npos);
    CHECK(m.find("BEGIN;") == std::string::npos); // one implicit transaction
}

TEST_CASE("prepared statements have distinct names and the right parameter counts") {
    const auto all = sql::prepared_statements("fk");
    for (const auto& st : all) {
        INFO(st.name);
        if (st.nparams > 0)
            CHECK(st.text.find("$" + std::to_string(st.nparams)) != std::string::npos);
        CHECK(st.text.find("$" + std::to_string(st.nparams + 1)) == std::string::npos);
    }
    CHECK(sql::op_statement_name(3) == "fk_op_3");
}

TEST_CASE("put params: text except the binary body, If-Match 0 when absent") {
    fk::store::put_request req;
    req.key = "k";
    req.lock = "L";
    req.token = 42;
    req.body = std::string("a\0b", 3);
    req.content_type = "text/plain";
    auto p = sql::put_params(req);
    REQUIRE(p.size() == 8);
    CHECK(*p[0].text == "k");
    CHECK(*p[2].text == "42");
    CHECK(p[3].is_binary);
    CHECK(p[3].binary.size() == 3);
    CHECK(p[3].binary.data() == req.body.data()); // viewed, not copied
    CHECK(*p[5].text == "0");                     // no If-Match (pgbench cannot send NULL)
    CHECK(*p[6].text == "false");
    req.pre.if_match = 7;
    req.pre.if_none_match_any = true;
    p = sql::put_params(req);
    CHECK(*p[5].text == "7");
    CHECK(*p[7].text == "true");
    // An If-Match that can never match (versions start at 1) stays a failing one.
    req.pre.if_match = 0;
    CHECK(*sql::put_params(req)[5].text == "-1");
}

TEST_CASE("list params: bounded by the prefix successor, limit + 1") {
    fk::store::list_request req;
    req.prefix = "jobs/";
    req.limit = 10;
    auto q = sql::list_params(req);
    CHECK(std::string(q.statement) == sql::name::list_bounded);
    REQUIRE(q.params.size() == 4);
    CHECK(*q.params[0].text == "jobs/");
    CHECK(*q.params[1].text == "");
    CHECK(*q.params[2].text == "jobs0");
    CHECK(*q.params[3].text == "11");
    req.prefix.clear();
    req.after = "m";
    q = sql::list_params(req);
    CHECK(std::string(q.statement) == sql::name::list_open);
    REQUIRE(q.params.size() == 3);
    CHECK(*q.params[1].text == "m");
}
