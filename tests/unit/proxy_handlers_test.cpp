#include "proxy/handlers.hpp"

#include "backends/log/logging.hpp"
#include "proxy/scopes.hpp"
#include "tests/support/memory_store.hpp"

#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/beast/http/field.hpp>

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace net = boost::asio;
namespace http = boost::beast::http;
using fk::errc;
using fk::proxy::request;
using fk::proxy::response;
using verb = http::verb;
using headers = std::vector<std::pair<std::string, std::string>>;

namespace {

// An operation's parameters as the store received them.
std::vector<std::optional<std::string>> as_vector(const fk::store::text_params& params) {
    std::vector<std::optional<std::string>> out;
    for (auto v : params)
        out.push_back(v ? std::optional<std::string>{*v} : std::nullopt);
    return out;
}

struct fixture {
    fk::test::memory_store store;
    fk::config::settings settings;
    std::shared_ptr<const fk::proxy::client_scope> scope; // null: no scoped clients

    fixture() {
        // Stale writes and injected store errors log by design; keep test output quiet.
        fk::logging::set_level(fk::logging::level::error);
        store.set_clock([] { return std::int64_t{1'795'946'400'123}; });
    }

    response send(request req) {
        net::io_context io;
        fk::proxy::handler_context ctx{store, settings, "127.0.0.1:4242", {}};
        ctx.scope = scope;
        std::optional<response> out;
        net::co_spawn(io, fk::proxy::handle_request(ctx, std::move(req)),
                      [&](std::exception_ptr e, response r) {
                          if (e)
                              std::rethrow_exception(e);
                          out = std::move(r);
                      });
        io.run();
        REQUIRE(out);
        return std::move(*out);
    }

    response send(verb method, std::string target, headers fields = {}, std::string body = {}) {
        request req{method, target, 11};
        for (auto& [name, value] : fields)
            req.insert(name, value);
        req.body() = std::move(body);
        req.prepare_payload();
        return send(std::move(req));
    }

    response put(std::string key, std::string token, std::string body = "data",
                 headers extra = {}) {
        extra.emplace_back("Fencing-Token", std::move(token));
        return send(verb::put, "/v1/resources/" + key, std::move(extra), std::move(body));
    }
};

nlohmann::json json_of(const response& res) {
    return nlohmann::json::parse(res.body());
}

std::string error_of(const response& res) {
    auto j = json_of(res);
    return j.value("error", "");
}

bool contains(const std::string& s, std::string_view part) {
    return s.find(part) != std::string::npos;
}

std::string field(const response& res, std::string_view name) {
    return std::string{std::string_view{res[name]}};
}

} // namespace

TEST_CASE("handlers: PUT creates, replaces and counts versions") {
    fixture f;
    auto r1 = f.put("a", "5", "one", {{"Content-Type", "text/csv"}});
    CHECK(r1.result_int() == 201);
    CHECK(field(r1, "Content-Type") == "application/json");
    CHECK(field(r1, "ETag") == "\"1\"");
    auto j1 = json_of(r1);
    CHECK(j1["key"] == "a");
    CHECK(j1["lock"] == "a");
    CHECK(j1["token"] == 5);
    CHECK(j1["version"] == 1);

    auto r2 = f.put("a", "5", "two");
    CHECK(r2.result_int() == 200);
    CHECK(json_of(r2)["version"] == 2);
    CHECK(field(r2, "ETag") == "\"2\"");

    auto r3 = f.put("a", "9", "three");
    CHECK(r3.result_int() == 200);
    CHECK(json_of(r3)["version"] == 3);
    CHECK(json_of(r3)["token"] == 9);
    CHECK(f.store.body_of("a") == "three");
    CHECK(f.store.fence_of("a") == 9);
}

TEST_CASE("handlers: GET and HEAD return the body and the write's metadata") {
    fixture f;
    f.put("dir/file.csv", "7", "a,b\n", {{"Content-Type", "text/csv"}, {"Fencing-Lock", "L"}});
    auto get = f.send(verb::get, "/v1/resources/dir/file.csv");
    CHECK(get.result_int() == 200);
    CHECK(get.body() == "a,b\n");
    CHECK(field(get, "Content-Type") == "text/csv");
    CHECK(field(get, "ETag") == "\"1\"");
    CHECK(field(get, "Fencing-Token") == "7");
    CHECK(field(get, "Fencing-Lock") == "L");
    CHECK(field(get, "Content-Length") == "4");

    auto head = f.send(verb::head, "/v1/resources/dir/file.csv");
    CHECK(head.result_int() == 200);
    CHECK(head.body().empty());
    CHECK(field(head, "Content-Length") == "4");
    CHECK(field(head, "Content-Type") == "text/csv");
    CHECK(field(head, "ETag") == "\"1\"");
    CHECK(field(head, "Fencing-Token") == "7");

    SUBCASE("default content type") {
        f.put("b", "1", "x");
        CHECK(field(f.send(verb::get, "/v1/resources/b"), "Content-Type") ==
              "application/octet-stream");
    }
    SUBCASE("Fencing-Token on GET is ignored") {
        auto r = f.send(verb::get, "/v1/resources/dir/file.csv", {{"Fencing-Token", "junk"}});
        CHECK(r.result_int() == 200);
    }
    SUBCASE("missing key") {
        auto r = f.send(verb::get, "/v1/resources/nope");
        CHECK(r.result_int() == 404);
        CHECK(error_of(r) == "not_found");
        auto h = f.send(verb::head, "/v1/resources/nope");
        CHECK(h.result_int() == 404);
        CHECK(h.body().empty());
        CHECK(field(h, "Content-Length") != "0");
    }
}

TEST_CASE("handlers: malformed tokens are 400 invalid_token and write nothing") {
    fixture f;
    for (const char* bad : {"", "+5", "-1", "0x2A", "1e3", "007", "4 2", "5,6", "1.0", "abc",
                            "9223372036854775808", "99999999999999999999", "\xff"}) {
        CAPTURE(bad);
        auto r = f.put("k", bad);
        CHECK(r.result_int() == 400);
        CHECK(error_of(r) == "invalid_token");
    }
    SUBCASE("the same via X-Fencing-Token") {
        auto r = f.send(verb::put, "/v1/resources/k", {{"X-Fencing-Token", "-1"}}, "x");
        CHECK(r.result_int() == 400);
        CHECK(error_of(r) == "invalid_token");
    }
    SUBCASE("given twice") {
        auto r = f.send(verb::put, "/v1/resources/k",
                        {{"Fencing-Token", "5"}, {"Fencing-Token", "5"}}, "x");
        CHECK(r.result_int() == 400);
        CHECK(error_of(r) == "invalid_token");
    }
    SUBCASE("both headers") {
        auto r = f.send(verb::put, "/v1/resources/k",
                        {{"Fencing-Token", "5"}, {"X-Fencing-Token", "5"}}, "x");
        CHECK(r.result_int() == 400);
        CHECK(error_of(r) == "invalid_token");
    }
    CHECK_FALSE(f.store.body_of("k"));
    CHECK_FALSE(f.store.fence_of("k"));
}

TEST_CASE("handlers: token edge values") {
    fixture f;
    CHECK(f.put("k", "0").result_int() == 201);
    CHECK(f.put("k", " 12 ").result_int() == 200);
    CHECK(f.put("k", "9223372036854775807").result_int() == 200);
    CHECK(f.store.fence_of("k") == INT64_MAX);
    auto r = f.send(verb::put, "/v1/resources/j", {{"X-Fencing-Token", "3"}}, "x");
    CHECK(r.result_int() == 201);
    CHECK(json_of(r)["token"] == 3);
}

TEST_CASE("handlers: writes without a token are 428") {
    fixture f;
    auto put = f.send(verb::put, "/v1/resources/k", {}, "x");
    CHECK(put.result_int() == 428);
    CHECK(error_of(put) == "missing_token");
    auto del = f.send(verb::delete_, "/v1/resources/k");
    CHECK(del.result_int() == 428);
    auto fence = f.send(verb::put, "/v1/fences/k");
    CHECK(fence.result_int() == 428);
    CHECK(f.store.calls() == 0);
}

TEST_CASE("handlers: a stale token is 409 and nothing is written") {
    fixture f;
    REQUIRE(f.put("k", "5", "good").result_int() == 201);
    auto r = f.put("k", "3", "zombie");
    CHECK(r.result_int() == 409);
    auto j = json_of(r);
    CHECK(j["error"] == "stale_token");
    CHECK(j["lock"] == "k");
    CHECK(j["token"] == 3);
    CHECK(j["current_token"] == 5);
    CHECK(f.store.body_of("k") == "good");
    CHECK(f.store.fence_of("k") == 5);
    auto get = f.send(verb::get, "/v1/resources/k");
    CHECK(field(get, "ETag") == "\"1\"");

    SUBCASE("a delete with a stale token") {
        auto d = f.send(verb::delete_, "/v1/resources/k", {{"Fencing-Token", "4"}});
        CHECK(d.result_int() == 409);
        CHECK(json_of(d)["current_token"] == 5);
        CHECK(f.store.body_of("k") == "good");
    }
    SUBCASE("a fence fenced by another key under the same lock") {
        auto other = f.put("other", "8", "x", {{"Fencing-Lock", "k"}});
        CHECK(other.result_int() == 201);
        auto stale = f.put("k", "6", "y");
        CHECK(stale.result_int() == 409);
        CHECK(json_of(stale)["current_token"] == 8);
    }
}

TEST_CASE("handlers: a key belongs to its lock") {
    fixture f;
    REQUIRE(f.put("k", "1", "x", {{"Fencing-Lock", "owner"}}).result_int() == 201);
    auto r = f.put("k", "100", "y", {{"Fencing-Lock", "intruder"}});
    CHECK(r.result_int() == 409);
    auto j = json_of(r);
    CHECK(j["error"] == "lock_mismatch");
    CHECK(j["key"] == "k");
    CHECK(j["lock"] == "owner");
    CHECK(f.store.body_of("k") == "x");
    CHECK_FALSE(f.store.fence_of("intruder"));
    // Without Fencing-Lock the lock is the key, which is another lock too.
    CHECK(error_of(f.put("k", "100", "y")) == "lock_mismatch");
    auto d = f.send(verb::delete_, "/v1/resources/k", {{"Fencing-Token", "100"}});
    CHECK(error_of(d) == "lock_mismatch");
}

TEST_CASE("handlers: a lock the scoped caller may not read is never named") {
    fixture f;
    REQUIRE(f.put("s/k", "7", "x", {{"Fencing-Lock", "g/private"}}).result_int() == 201);
    // delta writes s/ only: the key is its to read and write, the key's lock is not.
    f.scope = std::make_shared<const fk::proxy::client_scope>(
        fk::proxy::make_scope("delta", {"s/"}, {}, false, false));
    for (auto method : {verb::get, verb::head}) {
        auto r = f.send(method, "/v1/resources/s/k");
        CHECK(r.result_int() == 200);
        CHECK(r.find("Fencing-Lock") == r.end());
        CHECK(r.find("Fencing-Token") == r.end());
        CHECK(field(r, "ETag") == "\"1\"");
    }
    auto writes = {f.put("s/k", "8"), f.put("s/k", "8", "y", {{"Fencing-Lock", "s/mine"}}),
                   f.send(verb::delete_, "/v1/resources/s/k", {{"Fencing-Token", "8"}})};
    for (const auto& r : writes) {
        CHECK(r.result_int() == 409);
        auto j = json_of(r);
        CHECK(j["error"] == "lock_mismatch");
        CHECK(j["key"] == "s/k");
        CHECK_FALSE(j.contains("lock"));
        CHECK_FALSE(contains(r.body(), "g/private"));
    }
    // A caller that may read the lock sees it, as without scopes.
    f.scope = std::make_shared<const fk::proxy::client_scope>(
        fk::proxy::make_scope("gamma", {"s/", "g/"}, {}, false, false));
    auto r = f.send(verb::get, "/v1/resources/s/k");
    CHECK(field(r, "Fencing-Lock") == "g/private");
    CHECK(field(r, "Fencing-Token") == "7");
    CHECK(json_of(f.put("s/k", "8"))["lock"] == "g/private");
    CHECK(f.store.body_of("s/k") == "x");
}

TEST_CASE("handlers: Fencing-Lock validation") {
    fixture f;
    auto twice = f.put("k", "1", "x", {{"Fencing-Lock", "a"}, {"Fencing-Lock", "a"}});
    CHECK(twice.result_int() == 400);
    CHECK(error_of(twice) == "invalid_name");
    auto control = f.put("k", "1", "x", {{"Fencing-Lock", std::string("a\x01", 2)}});
    CHECK(error_of(control) == "invalid_name");
    auto bad_utf8 = f.put("k", "1", "x", {{"Fencing-Lock", "\xff"}});
    CHECK(error_of(bad_utf8) == "invalid_name");
    auto literal = f.put("k", "1", "x", {{"Fencing-Lock", "a%20b"}});
    CHECK(literal.result_int() == 201);
    CHECK(json_of(literal)["lock"] == "a%20b");
}

TEST_CASE("handlers: bad names") {
    fixture f;
    for (const char* target : {"/v1/resources/%zz", "/v1/resources/a%2", "/v1/resources/../x",
                               "/v1/resources/a//b", "/v1/resources/%00"}) {
        CAPTURE(target);
        auto r = f.send(verb::put, target, {{"Fencing-Token", "1"}}, "x");
        CHECK(r.result_int() == 400);
        CHECK(error_of(r) == "invalid_name");
    }
    CHECK(f.store.calls() == 0);
}

TEST_CASE("handlers: conditional writes") {
    fixture f;
    SUBCASE("If-None-Match: * creates only") {
        CHECK(f.put("k", "1", "a", {{"If-None-Match", "*"}}).result_int() == 201);
        auto r = f.put("k", "2", "b", {{"If-None-Match", "*"}});
        CHECK(r.result_int() == 412);
        CHECK(error_of(r) == "precondition_failed");
        CHECK(f.store.body_of("k") == "a");
        CHECK(f.store.fence_of("k") == 1);
    }
    SUBCASE("If-Match: \"version\"") {
        f.put("k", "1", "a");
        auto ok = f.put("k", "1", "b", {{"If-Match", "\"1\""}});
        CHECK(ok.result_int() == 200);
        auto r = f.put("k", "2", "c", {{"If-Match", "\"1\""}});
        CHECK(r.result_int() == 412);
        CHECK(f.store.body_of("k") == "b");
        CHECK(f.store.fence_of("k") == 1);
    }
    SUBCASE("If-Match on an absent key") {
        CHECK(f.put("k", "1", "a", {{"If-Match", "\"1\""}}).result_int() == 412);
        CHECK(f.put("k", "1", "a", {{"If-Match", "*"}}).result_int() == 412);
        CHECK_FALSE(f.store.body_of("k"));
    }
    SUBCASE("If-Match: * needs the key") {
        f.put("k", "1", "a");
        CHECK(f.put("k", "1", "b", {{"If-Match", "*"}}).result_int() == 200);
    }
    SUBCASE("If-Match values that can never match") {
        f.put("k", "1", "a");
        for (const char* tag : {"1", "W/\"1\"", "\"01\"", "\"1\", \"2\"", "\"x\"", "\"\""}) {
            CAPTURE(tag);
            CHECK(f.put("k", "1", "b", {{"If-Match", tag}}).result_int() == 412);
        }
        CHECK(f.store.body_of("k") == "a");
    }
    SUBCASE("a stale token is reported before a failed precondition") {
        f.put("k", "5", "a");
        CHECK(error_of(f.put("k", "1", "b", {{"If-Match", "\"9\""}})) == "stale_token");
    }
    SUBCASE("If-None-Match other than *") {
        auto r = f.put("k", "1", "a", {{"If-None-Match", "\"1\""}});
        CHECK(r.result_int() == 400);
        CHECK(error_of(r) == "invalid_request");
    }
    SUBCASE("conditional delete") {
        f.put("k", "1", "a");
        auto r = f.send(verb::delete_, "/v1/resources/k",
                        {{"Fencing-Token", "1"}, {"If-Match", "\"2\""}});
        CHECK(r.result_int() == 412);
        CHECK(f.store.body_of("k") == "a");
    }
}

TEST_CASE("handlers: DELETE") {
    fixture f;
    f.put("k", "3", "a");
    auto d = f.send(verb::delete_, "/v1/resources/k", {{"Fencing-Token", "4"}});
    CHECK(d.result_int() == 204);
    CHECK(d.body().empty());
    CHECK(d.find(http::field::content_length) == d.end());
    CHECK(f.send(verb::get, "/v1/resources/k").result_int() == 404);
    CHECK(f.store.fence_of("k") == 4);

    SUBCASE("the fence outlives the data") {
        CHECK(f.put("k", "3", "b").result_int() == 409);
    }
    SUBCASE("a deleted key is created again, continuing the version count") {
        auto r = f.put("k", "4", "b");
        CHECK(r.result_int() == 201);
        CHECK(json_of(r)["version"] == 2);
    }
    SUBCASE("a deleted key is free for another lock") {
        CHECK(f.put("k", "1", "b", {{"Fencing-Lock", "other"}}).result_int() == 201);
    }
    SUBCASE("deleting a missing key checks and advances the fence") {
        auto r = f.send(verb::delete_, "/v1/resources/never", {{"Fencing-Token", "7"}});
        CHECK(r.result_int() == 204);
        CHECK(f.store.fence_of("never") == 7);
        auto stale = f.send(verb::delete_, "/v1/resources/never", {{"Fencing-Token", "6"}});
        CHECK(stale.result_int() == 409);
    }
}

TEST_CASE("handlers: fences") {
    fixture f;
    auto missing = f.send(verb::get, "/v1/fences/L");
    CHECK(missing.result_int() == 404);
    CHECK(error_of(missing) == "not_found");

    auto put = f.send(verb::put, "/v1/fences/L", {{"Fencing-Token", "10"}});
    CHECK(put.result_int() == 200);
    CHECK(json_of(put) == nlohmann::json{{"lock", "L"}, {"token", 10}});

    auto get = f.send(verb::get, "/v1/fences/L");
    CHECK(get.result_int() == 200);
    auto j = json_of(get);
    CHECK(j["lock"] == "L");
    CHECK(j["token"] == 10);
    CHECK(j["updated_at"] == "2026-11-29T10:00:00.123Z");

    auto head = f.send(verb::head, "/v1/fences/L");
    CHECK(head.result_int() == 200);
    CHECK(head.body().empty());
    CHECK(field(head, "Content-Length") == std::to_string(get.body().size()));

    auto stale = f.send(verb::put, "/v1/fences/L", {{"Fencing-Token", "9"}});
    CHECK(stale.result_int() == 409);
    CHECK(json_of(stale)["current_token"] == 10);
    CHECK(json_of(stale)["lock"] == "L");
    auto same = f.send(verb::put, "/v1/fences/L", {{"Fencing-Token", "10"}});
    CHECK(same.result_int() == 200);

    // A new holder fences out the old one before writing anything.
    f.put("data", "10", "x", {{"Fencing-Lock", "L"}});
    f.send(verb::put, "/v1/fences/L", {{"Fencing-Token", "11"}});
    CHECK(f.put("data", "10", "zombie", {{"Fencing-Lock", "L"}}).result_int() == 409);
    CHECK(f.store.body_of("data") == "x");

    auto bad = f.send(verb::put, "/v1/fences/L", {{"Fencing-Token", "x"}});
    CHECK(error_of(bad) == "invalid_token");
}

TEST_CASE("handlers: fence listing pages through locks in byte order") {
    fixture f;
    for (const char* lock : {"a/3", "a/1", "b/1", "a/2", "a/4", "a/5", "\xc3\xa9"}) {
        auto target = std::string{"/v1/fences/"} +
                      (lock[0] == 'a' ? "a%2F" + std::string{lock + 2} : std::string{lock});
        REQUIRE(f.send(verb::put, target, {{"Fencing-Token", "1"}}).result_int() == 200);
    }
    auto page = [&](std::string query) { return json_of(f.send(verb::get, "/v1/fences" + query)); };

    auto all = page("");
    REQUIRE(all["fences"].size() == 7);
    CHECK(all["next"].is_null());
    CHECK(all["fences"][0]["lock"] == "a/1");
    CHECK(all["fences"][6]["lock"] == "\xc3\xa9");
    CHECK(all["fences"][0]["token"] == 1);
    CHECK(all["fences"][0]["updated_at"] == "2026-11-29T10:00:00.123Z");

    auto p1 = page("?prefix=a%2F&limit=2");
    REQUIRE(p1["fences"].size() == 2);
    CHECK(p1["fences"][0]["lock"] == "a/1");
    CHECK(p1["fences"][1]["lock"] == "a/2");
    CHECK(p1["next"] == "a/2");
    auto p2 = page("?prefix=a%2F&limit=2&after=a%2F2");
    REQUIRE(p2["fences"].size() == 2);
    CHECK(p2["fences"][0]["lock"] == "a/3");
    CHECK(p2["next"] == "a/4");
    auto p3 = page("?prefix=a%2F&limit=2&after=a%2F4");
    REQUIRE(p3["fences"].size() == 1);
    CHECK(p3["fences"][0]["lock"] == "a/5");
    CHECK(p3["next"].is_null());

    auto exact = page("?prefix=a%2F&limit=5");
    CHECK(exact["fences"].size() == 5);
    CHECK(exact["next"].is_null());

    auto none = page("?prefix=zzz");
    CHECK(none["fences"].empty());
    CHECK(none["next"].is_null());

    auto bad = f.send(verb::get, "/v1/fences?limit=1001");
    CHECK(bad.result_int() == 400);
    CHECK(error_of(bad) == "invalid_request");
}

TEST_CASE("handlers: operations") {
    fixture f;
    auto req = [&](std::string body, headers h) {
        return f.send(verb::post, "/v1/operations/credit", std::move(h), std::move(body));
    };
    const headers fenced{{"Fencing-Lock", "acct"}, {"Fencing-Token", "4"}};

    SUBCASE("404 on a store without operations") {
        auto r = req(R"({"params":[]})", fenced);
        CHECK(r.result_int() == 404);
        CHECK(error_of(r) == "not_found");
        CHECK(f.store.calls() == 0);
    }

    std::vector<std::optional<std::string>> seen;
    f.store.add_operation("credit", [&](const fk::store::operation_request& o) {
        seen = as_vector(o.params);
        fk::store::operation_result r;
        r.rows_affected = 1;
        r.rows_json = R"([{"balance":10}])";
        return r;
    });
    f.store.add_operation("fails", [](const fk::store::operation_request&) {
        fk::store::operation_result r;
        r.error = errc::operation_failed;
        r.sqlstate = "23505";
        r.message = "duplicate key value";
        return r;
    });
    f.store.add_operation("throws",
                          [](const fk::store::operation_request&) -> fk::store::operation_result {
                              throw std::runtime_error("bug");
                          });

    SUBCASE("parameters become text") {
        auto r =
            req(R"({"params":[1, -2.5, "s", null, true, false, [1,"a"], {"k":1}, ""]})", fenced);
        CHECK(r.result_int() == 200);
        CHECK(json_of(r) ==
              nlohmann::json::parse(R"({"token":4,"rows_affected":1,"rows":[{"balance":10}]})"));
        REQUIRE(seen.size() == 9);
        CHECK(seen[0] == "1");
        CHECK(seen[1] == "-2.5");
        CHECK(seen[2] == "s");
        CHECK_FALSE(seen[3]);
        CHECK(seen[4] == "true");
        CHECK(seen[5] == "false");
        CHECK(seen[6] == R"([1,"a"])");
        CHECK(seen[7] == R"({"k":1})");
        CHECK(seen[8] == "");
        CHECK(f.store.fence_of("acct") == 4);
    }
    SUBCASE("headers") {
        auto no_lock = req(R"({"params":[]})", {{"Fencing-Token", "4"}});
        CHECK(no_lock.result_int() == 400);
        CHECK(error_of(no_lock) == "invalid_request");
        auto no_token = req(R"({"params":[]})", {{"Fencing-Lock", "acct"}});
        CHECK(no_token.result_int() == 428);
        auto bad_token =
            req(R"({"params":[]})", {{"Fencing-Lock", "acct"}, {"Fencing-Token", "x"}});
        CHECK(error_of(bad_token) == "invalid_token");
    }
    SUBCASE("bad bodies") {
        for (const char* body :
             {"", "x", "[]", "{}", R"({"params":{}})", R"({"params":1})", R"({"params":[],"x":1})",
              R"({"params":[1]} trailing)", "{\"params\":[\"a\\u0000b\"]}"}) {
            CAPTURE(body);
            auto r = req(body, fenced);
            CHECK(r.result_int() == 400);
            CHECK(error_of(r) == "invalid_request");
        }
        std::string deep = R"({"params":[)" + std::string(100, '[') + std::string(100, ']') + "]}";
        CHECK(error_of(req(deep, fenced)) == "invalid_request");
        CHECK(seen.empty());
        CHECK_FALSE(f.store.fence_of("acct"));
    }
    SUBCASE("numbers reach the store as written") {
        auto r = req(R"({"params":[123456789012345678901234567890, 0.30000000000000000001,
                                   1e-400, 18446744073709551616, -0, [1.10]]})",
                     fenced);
        CHECK(r.result_int() == 200);
        CHECK(seen == std::vector<std::optional<std::string>>{
                          "123456789012345678901234567890", "0.30000000000000000001", "1e-400",
                          "18446744073709551616", "-0", "[1.10]"});
    }
    SUBCASE("a duplicate key is refused") {
        for (const char* body :
             {R"({"params":[1],"params":["x"]})", R"({"params":[{"a":1,"a":2}]})"}) {
            CAPTURE(body);
            auto r = req(body, fenced);
            CHECK(r.result_int() == 400);
            CHECK(error_of(r) == "invalid_request");
            CHECK(contains(json_of(r)["message"].get<std::string>(), "duplicate key"));
        }
        CHECK(seen.empty());
        CHECK_FALSE(f.store.fence_of("acct"));
    }
    SUBCASE("far more parameters than the statement takes: 400 naming its count") {
        f.store.add_operation(
            "one",
            [&](const fk::store::operation_request& o) {
                seen = as_vector(o.params);
                return fk::store::operation_result{};
            },
            1);
        std::string body = R"({"params":["a")";
        for (int i = 0; i < 1'000'000; ++i)
            body += ",1";
        body += "]}";
        auto r = f.send(verb::post, "/v1/operations/one", fenced, body);
        CHECK(r.result_int() == 400);
        CHECK(error_of(r) == "invalid_request");
        CHECK(json_of(r)["message"] == "operation 'one' takes 1 parameter, got more than 1");
        CHECK(seen.empty());
        CHECK_FALSE(f.store.fence_of("acct"));
        auto fine = f.send(verb::post, "/v1/operations/one", fenced, R"({"params":["a"]})");
        CHECK(fine.result_int() == 200);
        CHECK(seen == std::vector<std::optional<std::string>>{"a"});
        // A large body (parsed off the request's thread) gives the same answer.
        const std::string large(200'000, 'x');
        fine = f.send(verb::post, "/v1/operations/one", fenced, R"({"params":[")" + large + "\"]}");
        CHECK(fine.result_int() == 200);
        CHECK(seen == std::vector<std::optional<std::string>>{large});
    }
    SUBCASE("the database's text is logged, not returned") {
        f.store.add_operation("leaks", [](const fk::store::operation_request&) {
            fk::store::operation_result r;
            r.error = errc::operation_failed;
            r.sqlstate = "22P02";
            r.message = "the statement failed: SQLSTATE 22P02";
            r.server_message = "invalid input syntax for type integer: \"s3cret\"";
            return r;
        });
        auto r = f.send(verb::post, "/v1/operations/leaks", fenced, R"({"params":[]})");
        CHECK(r.result_int() == 422);
        CHECK(json_of(r)["sqlstate"] == "22P02");
        CHECK(json_of(r)["message"] == "the statement failed: SQLSTATE 22P02");
        CHECK_FALSE(contains(r.body(), "s3cret"));
    }
    SUBCASE("stale") {
        f.send(verb::put, "/v1/fences/acct", {{"Fencing-Token", "9"}});
        auto r = req(R"({"params":[]})", fenced);
        CHECK(r.result_int() == 409);
        CHECK(json_of(r)["current_token"] == 9);
        CHECK(json_of(r)["lock"] == "acct");
        CHECK(seen.empty());
    }
    SUBCASE("failed statement") {
        auto r = f.send(verb::post, "/v1/operations/fails", fenced, R"({"params":[]})");
        CHECK(r.result_int() == 422);
        CHECK(json_of(r)["sqlstate"] == "23505");
        CHECK_FALSE(f.store.fence_of("acct"));
    }
    SUBCASE("unknown operation") {
        auto r = f.send(verb::post, "/v1/operations/nope", fenced, R"({"params":[]})");
        CHECK(r.result_int() == 404);
    }
    SUBCASE("an exception in a handler is 500 for that request only") {
        auto r = f.send(verb::post, "/v1/operations/throws", fenced, R"({"params":[]})");
        CHECK(r.result_int() == 500);
        CHECK(error_of(r) == "internal");
        CHECK(f.send(verb::get, "/healthz").result_int() == 200);
    }
}

TEST_CASE("handlers: store failures") {
    fixture f;
    struct row {
        errc injected;
        unsigned status;
    };
    // Not a structured binding: clang 14 cannot capture one (CAPTURE is a lambda).
    for (const row& c :
         {row{errc::unavailable, 503}, row{errc::outcome_unknown, 504}, row{errc::internal, 500}}) {
        const errc injected = c.injected;
        const unsigned status = c.status;
        CAPTURE(status);
        f.store.fail_next(injected);
        auto r = f.put("k", "1");
        CHECK(r.result_int() == status);
        CHECK(error_of(r) == std::string{to_string(injected)});
        // A 504 tells the client how to learn the outcome, whatever the store said.
        if (injected == errc::outcome_unknown)
            CHECK(contains(json_of(r)["message"].get<std::string>(),
                           "retry it with the same Idempotency-Key"));
        f.store.fail_next(injected);
        CHECK(f.send(verb::get, "/v1/resources/k").result_int() == status);
        f.store.fail_next(injected);
        CHECK(f.send(verb::get, "/v1/fences/k").result_int() == status);
        f.store.fail_next(injected);
        CHECK(f.send(verb::get, "/v1/fences").result_int() == status);
        f.store.fail_next(injected);
        CHECK(f.send(verb::put, "/v1/fences/k", {{"Fencing-Token", "1"}}).result_int() == status);
        f.store.fail_next(injected);
        CHECK(f.send(verb::delete_, "/v1/resources/k", {{"Fencing-Token", "1"}}).result_int() ==
              status);
    }
    f.store.fail_next(errc::unavailable);
    CHECK(field(f.put("k", "1"), "Retry-After") == "1");
    CHECK_FALSE(f.store.fence_of("k"));
}

TEST_CASE("handlers: health and readiness") {
    fixture f;
    auto h = f.send(verb::get, "/healthz");
    CHECK(h.result_int() == 200);
    CHECK(json_of(h) == nlohmann::json{{"status", "ok"}});
    auto r = f.send(verb::get, "/readyz");
    CHECK(r.result_int() == 200);
    CHECK(json_of(r) == nlohmann::json{{"status", "ready"}});
    f.store.set_ready(false);
    auto nr = f.send(verb::get, "/readyz");
    CHECK(nr.result_int() == 503);
    CHECK(error_of(nr) == "unavailable");
    CHECK(field(nr, "Retry-After") == "1");
    CHECK(f.send(verb::get, "/healthz").result_int() == 200);
    CHECK(f.put("k", "1").result_int() == 503);
}

TEST_CASE("handlers: unknown routes and methods") {
    fixture f;
    auto nf = f.send(verb::get, "/nope");
    CHECK(nf.result_int() == 404);
    CHECK(error_of(nf) == "not_found");
    CHECK(field(nf, "Content-Type") == "application/json");
    auto na = f.send(verb::post, "/v1/resources/k", {{"Fencing-Token", "1"}}, "x");
    CHECK(na.result_int() == 405);
    CHECK(field(na, "Allow") == "GET, HEAD, PUT, DELETE");
    CHECK(error_of(na) == "method_not_allowed");
    CHECK(f.store.calls() == 0);
}

TEST_CASE("handlers: X-Request-Id") {
    fixture f;
    // A generated id: 16 lowercase hex digits. (Checked without std::regex, whose
    // libstdc++ 12 code draws a false -Wmaybe-uninitialized under ASan.)
    auto generated = [](std::string_view id) {
        return id.size() == 16 &&
               id.find_first_not_of("0123456789abcdef") == std::string_view::npos;
    };
    auto echoed = f.send(verb::get, "/healthz", {{"X-Request-Id", "abc-123"}});
    CHECK(field(echoed, "X-Request-Id") == "abc-123");
    auto max = std::string(128, 'x');
    CHECK(field(f.send(verb::get, "/healthz", {{"X-Request-Id", max}}), "X-Request-Id") == max);

    auto none = f.send(verb::get, "/healthz");
    CHECK(generated(field(none, "X-Request-Id")));
    auto other = f.send(verb::get, "/healthz");
    CHECK(field(other, "X-Request-Id") != field(none, "X-Request-Id"));
    for (std::string bad :
         {std::string(129, 'x'), std::string{"caf\xc3\xa9"}, std::string{"a\tb"}}) {
        auto r = f.send(verb::get, "/healthz", {{"X-Request-Id", bad}});
        CHECK(generated(field(r, "X-Request-Id")));
    }
    auto twice = f.send(verb::get, "/healthz", {{"X-Request-Id", "a"}, {"X-Request-Id", "b"}});
    CHECK(generated(field(twice, "X-Request-Id")));
    // Errors carry it too.
    auto err = f.send(verb::get, "/nope", {{"X-Request-Id", "e1"}});
    CHECK(field(err, "X-Request-Id") == "e1");
}

TEST_CASE("handlers: HTTP version and keep-alive follow the request") {
    fixture f;
    request req{verb::get, "/healthz", 10};
    auto r10 = f.send(std::move(req));
    CHECK(r10.version() == 10);
    CHECK_FALSE(r10.keep_alive());

    request close{verb::get, "/healthz", 11};
    close.set(http::field::connection, "close");
    auto rc = f.send(std::move(close));
    CHECK(rc.version() == 11);
    CHECK_FALSE(rc.keep_alive());

    auto r11 = f.send(verb::get, "/healthz");
    CHECK(r11.keep_alive());
}
