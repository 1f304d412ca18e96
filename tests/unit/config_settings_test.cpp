#include "config/settings.hpp"

#include "config/parse.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

using namespace fk::config;

TEST_CASE("effective_threads: 0 means the number of cores, never less than 1") {
    settings s;
    s.threads = 0;
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    CHECK(effective_threads(s) == std::max(1, cores));
    s.threads = 3;
    CHECK(effective_threads(s) == 3);
    s.threads = -2; // not reachable through the parser; still at least one
    CHECK(effective_threads(s) >= 1);
}

TEST_CASE("effective_pool_size: 0 means twice the threads, at least 16") {
    settings s;
    s.threads = 3;
    CHECK(effective_pool_size(s) == 16);
    s.threads = 8;
    CHECK(effective_pool_size(s) == 16);
    s.threads = 12;
    CHECK(effective_pool_size(s) == 24);
    s.postgres.pool_size = 5;
    CHECK(effective_pool_size(s) == 5);
    s.threads = 0;
    s.postgres.pool_size = 0;
    CHECK(effective_pool_size(s) == std::max(16, 2 * effective_threads(s)));
}

TEST_CASE("parse_store_url") {
    auto file = parse_store_url("file:./data");
    REQUIRE(file);
    CHECK(file->kind == store_kind::file);
    CHECK(file->path_or_uri == "./data");

    auto abs = parse_store_url("file:/var/lib/fencekeeper");
    REQUIRE(abs);
    CHECK(abs->path_or_uri == "/var/lib/fencekeeper");

    for (auto uri : {"postgresql://user:pw@db:5432/app?sslmode=require", "postgres://db/app",
                     "postgresql://", "postgresql:///app?host=/var/run/postgresql"}) {
        CAPTURE(uri);
        auto pg = parse_store_url(uri);
        REQUIRE(pg);
        CHECK(pg->kind == store_kind::postgres);
        CHECK(pg->path_or_uri == uri);
    }

    for (auto bad :
         {"", "file:", "./data", "/var/lib/x", "File:/x", "FILE:/x", "pg://db", "postgresql:/db",
          "Postgresql://db", "mysql://db", "s3://b", "host=db dbname=app"}) {
        CAPTURE(bad);
        CHECK_FALSE(parse_store_url(bad));
    }
    // A NUL or newline would cut or corrupt the path or connection string.
    CHECK_FALSE(parse_store_url(std::string("file:/a\0b", 9)));
    CHECK_FALSE(parse_store_url("file:/a\nb"));
    CHECK_FALSE(parse_store_url("postgresql://db/app\r"));
}

namespace {

std::string read_example(const std::string& name) {
    const std::string path = std::string(FK_SOURCE_DIR) + "/config/examples/" + name;
    std::ifstream in(path, std::ios::binary);
    REQUIRE_MESSAGE(in, "cannot open " << path);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

} // namespace

TEST_CASE("the example configs parse") {
    SUBCASE("file-store.json") {
        settings s;
        const auto e = apply_json(read_example("file-store.json"), s);
        CHECK_MESSAGE(!e, (e ? e->message : ""));
        auto where = parse_store_url(s.store);
        REQUIRE(where);
        CHECK(where->kind == store_kind::file);
    }
    SUBCASE("postgres.json") {
        settings s;
        const auto e = apply_json(read_example("postgres.json"), s);
        CHECK_MESSAGE(!e, (e ? e->message : ""));
        auto where = parse_store_url(s.store);
        REQUIRE(where);
        CHECK(where->kind == store_kind::postgres);
        REQUIRE(s.operations.count("credit") == 1);
        CHECK(s.operations.at("credit").sql ==
              "UPDATE accounts SET balance = balance + $1 WHERE id = $2 RETURNING balance");
        CHECK_FALSE(s.operations.at("credit").expose_errors);
    }
    SUBCASE("through --config") {
        const auto r = parse_command_line(
            {"--config", std::string(FK_SOURCE_DIR) + "/config/examples/postgres.json"});
        REQUIRE(std::holds_alternative<command_line>(r));
        CHECK(std::get<command_line>(r).values.threads == 4);
    }
}
