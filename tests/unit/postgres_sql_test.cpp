// The pure encoders of backends/postgres/sql/, checked by value. What the statements do is
// checked against a real database (tests/integration/test_postgres_*.py, test_contract.py).
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

TEST_CASE("quote_literal doubles single quotes only") {
    CHECK(sql::quote_literal("it's") == "'it''s'");
    CHECK(sql::quote_literal("a\\b\"c") == "'a\\b\"c'");
}

TEST_CASE("binary arrays: header, then each element with its length, big-endian") {
    sql::array_builder b(sql::oid_int8, 2);
    b.add_int8(1);
    b.add_int8(-2);
    const std::string want("\0\0\0\1"                                    // one dimension
                           "\0\0\0\0"                                    // no NULLs
                           "\0\0\0\x14"                                  // int8
                           "\0\0\0\2"                                    // two elements
                           "\0\0\0\1"                                    // lower bound 1
                           "\0\0\0\x08\0\0\0\0\0\0\0\1"                  // 1
                           "\0\0\0\x08\xff\xff\xff\xff\xff\xff\xff\xfe", // -2
                           44);
    CHECK(std::move(b).finish() == want);
    sql::array_builder t(sql::oid_bool, 1);
    t.add_bool(true);
    CHECK(std::move(t).finish().substr(20) == std::string("\0\0\0\1\1", 5));
}

TEST_CASE("batch params: twelve binary arrays and the retention (keyed shape), nine (plain); "
          "a delete carries no body") {
    std::vector<sql::batch_item> items(2);
    items[0] = {"k1", "L1", 7, false, std::string_view("a\0b", 3), "text/plain", {}};
    items[1] = {"k2", "L2", 8, true, "ignored", "ignored", {}};
    items[1].pre.if_match = 0;
    const auto plain =
        sql::write_batch_params(items, sql::batch_shape::plain, std::chrono::seconds(1));
    REQUIRE(plain.size() == 9);
    for (const auto& q : plain)
        CHECK(q.is_binary);
    const auto p =
        sql::write_batch_params(items, sql::batch_shape::keyed, std::chrono::seconds(86'400));
    REQUIRE(p.size() == 13);
    for (std::size_t i = 0; i < 12; ++i)
        CHECK(p[i].is_binary);
    for (std::size_t i = 0; i < 9; ++i)
        CHECK(p[i].binary_value() == plain[i].binary_value());
    CHECK(*p[12].text == "86400");
    sql::array_builder body(sql::oid_bytea, 2);
    body.add(std::string_view("a\0b", 3));
    body.add({});
    CHECK(p[3].binary_value() == std::move(body).finish());
    sql::array_builder if_match(sql::oid_int8, 2);
    if_match.add_int8(0);  // none
    if_match.add_int8(-1); // can never match
    CHECK(p[5].binary_value() == std::move(if_match).finish());
}
