// POST /v1/transactions through handle_request against the memory store: the reply's
// shape, each refusal with its op_index, the header defaults, Idempotency-Key, metrics.
#include "proxy/handlers.hpp"

#include "backends/log/logging.hpp"
#include "proxy/idempotency.hpp"
#include "proxy/metrics.hpp"
#include "tests/support/memory_store.hpp"

#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <optional>
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
using json = nlohmann::json;

namespace {

struct fixture {
    fk::test::memory_store store;
    fk::config::settings settings;
    fk::proxy::inflight_keys keys;
    fk::proxy::metrics stats;

    fixture() {
        fk::logging::set_level(fk::logging::level::error);
        store.set_clock([] { return std::int64_t{1'795'946'400'123}; });
    }

    response send(verb method, std::string target, headers fields = {}, std::string body = {}) {
        request req{method, target, 11};
        for (auto& [name, value] : fields)
            req.insert(name, value);
        req.body() = std::move(body);
        req.prepare_payload();
        net::io_context io;
        fk::proxy::handler_context ctx{store, settings, "127.0.0.1:4242", {}, &stats};
        ctx.idempotency_keys = &keys;
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

    response txn(const std::string& ops, headers fields = {}) {
        return send(verb::post, "/v1/transactions", std::move(fields), R"({"ops": [)" + ops + "]}");
    }

    response put(const std::string& key, const std::string& token, const std::string& body,
                 headers extra = {}) {
        extra.emplace_back("Fencing-Token", token);
        return send(verb::put, "/v1/resources/" + key, std::move(extra), body);
    }
};

json json_of(const response& res) {
    return json::parse(res.body());
}

std::string field(const response& res, std::string_view name) {
    return std::string{std::string_view{res[name]}};
}

double metric(fk::proxy::metrics& m, std::string_view series) {
    const std::string text = m.render();
    const std::string line = "\n" + std::string{series} + " ";
    auto at = text.find(line);
    REQUIRE(at != std::string::npos);
    return std::stod(text.substr(at + line.size()));
}

// The refusal's status, code and op_index.
void check_error(const response& res, unsigned status, std::string_view code,
                 std::optional<std::size_t> op_index) {
    CAPTURE(res.body());
    CHECK(res.result_int() == status);
    auto j = json_of(res);
    CHECK(j["error"] == code);
    if (op_index)
        CHECK(j["op_index"] == *op_index);
    else
        CHECK_FALSE(j.contains("op_index"));
}

} // namespace

TEST_CASE("transactions: every op applies, and the results come in op order") {
    fixture f;
    REQUIRE(f.put("old", "3", "x").result_int() == 201);
    REQUIRE(f.put("kept", "1", "k").result_int() == 201);
    auto res = f.txn(R"(
        {"op": "put", "key": "a", "lock": "L", "token": 5, "body": "one", "content_type": "text/csv"},
        {"op": "put", "key": "b", "lock": "L", "token": 5, "body_base64": "AP8="},
        {"op": "delete", "key": "old", "token": 3},
        {"op": "fence", "lock": "F", "token": 7},
        {"op": "check", "lock": "kept", "token": 1},
        {"op": "check_version", "key": "kept", "version": 1},
        {"op": "check_version", "key": "none", "absent": true})");
    REQUIRE_MESSAGE(res.result_int() == 200, res.body());
    CHECK(field(res, "Content-Type") == "application/json");
    CHECK(field(res, "Idempotent-Replayed").empty());
    const auto j = json_of(res);
    REQUIRE(j.size() == 1);
    const auto& r = j.at("results");
    REQUIRE(r.size() == 7);
    CHECK(r[0] == json{{"op", "put"},
                       {"key", "a"},
                       {"lock", "L"},
                       {"token", 5},
                       {"version", 1},
                       {"created", true}});
    CHECK(r[1]["key"] == "b");
    CHECK(r[2] ==
          json{{"op", "delete"}, {"key", "old"}, {"lock", "old"}, {"token", 3}, {"version", 1}});
    CHECK(r[3] == json{{"op", "fence"}, {"lock", "F"}, {"token", 7}});
    CHECK(r[4] == json{{"op", "check"}, {"lock", "kept"}, {"token", 1}});
    CHECK(r[5] == json{{"op", "check_version"}, {"key", "kept"}, {"version", 1}});
    CHECK(r[6] == json{{"op", "check_version"}, {"key", "none"}, {"version", 0}});

    CHECK(f.store.body_of("a") == "one");
    CHECK(f.store.body_of("b") == std::string("\x00\xff", 2));
    CHECK_FALSE(f.store.body_of("old"));
    CHECK(f.store.fence_of("L") == 5);
    CHECK(f.store.fence_of("F") == 7);
    auto get = f.send(verb::get, "/v1/resources/a");
    CHECK(field(get, "Content-Type") == "text/csv");
    CHECK(field(get, "Fencing-Lock") == "L");
    CHECK(field(f.send(verb::get, "/v1/resources/b"), "Content-Type") ==
          "application/octet-stream");

    CHECK(metric(f.stats, "fencekeeper_writes_total{result=\"applied\"}") == 3); // 2 PUTs + 1
    CHECK(metric(f.stats, "fencekeeper_store_duration_seconds_count{op=\"transaction\"}") == 1);
}

TEST_CASE("transactions: the headers give ops without token or lock theirs") {
    fixture f;
    auto res = f.txn(R"({"op": "put", "key": "a", "body": "1"},
                        {"op": "fence"},
                        {"op": "put", "key": "b", "body": "2", "lock": "M", "token": 9})",
                     {{"Fencing-Token", "4"}, {"Fencing-Lock", "H"}});
    REQUIRE_MESSAGE(res.result_int() == 200, res.body());
    const auto r = json_of(res)["results"];
    CHECK(r[0]["lock"] == "H");
    CHECK(r[0]["token"] == 4);
    CHECK(r[1]["lock"] == "H");
    CHECK(r[2]["lock"] == "M");
    CHECK(f.store.fence_of("H") == 4);
    CHECK(f.store.fence_of("M") == 9);
    CHECK_FALSE(f.store.fence_of("a"));

    // X-Fencing-Token is the alias, as on single writes.
    CHECK(f.txn(R"({"op": "fence", "lock": "x"})", {{"X-Fencing-Token", "1"}}).result_int() == 200);
    // A malformed header is refused as on single writes, whatever the ops carry.
    check_error(f.txn(R"({"op": "fence", "lock": "x", "token": 1})", {{"Fencing-Token", "01"}}),
                400, "invalid_token", std::nullopt);
    check_error(f.txn(R"({"op": "fence", "lock": "x", "token": 1})",
                      {{"Fencing-Token", "1"}, {"X-Fencing-Token", "1"}}),
                400, "invalid_token", std::nullopt);
    check_error(f.txn(R"({"op": "fence", "token": 1})", {{"Fencing-Lock", ""}}), 400,
                "invalid_name", std::nullopt);
    // Without a token anywhere: 400 naming the op (not 428: the body is what lacks it).
    check_error(f.txn(R"({"op": "fence", "lock": "x", "token": 1}, {"op": "fence", "lock": "y"})"),
                400, "invalid_request", 1);
}

TEST_CASE("transactions: one stale token refuses all five ops, and the reply names it") {
    fixture f;
    REQUIRE(f.put("a", "1", "a0").result_int() == 201);
    REQUIRE(f.put("b", "1", "b0").result_int() == 201);
    REQUIRE(f.send(verb::put, "/v1/fences/Z", {{"Fencing-Token", "10"}}).result_int() == 200);
    auto res = f.txn(R"({"op": "put", "key": "a", "token": 2, "body": "a1"},
                        {"op": "put", "key": "b", "token": 2, "body": "b1"},
                        {"op": "fence", "lock": "F", "token": 3},
                        {"op": "check", "lock": "Z", "token": 9},
                        {"op": "put", "key": "c", "token": 2, "body": "c1"})");
    check_error(res, 409, "stale_token", 3);
    const auto j = json_of(res);
    CHECK(j["lock"] == "Z");
    CHECK(j["token"] == 9);
    CHECK(j["current_token"] == 10);
    CHECK(f.store.body_of("a") == "a0");
    CHECK(f.store.body_of("b") == "b0");
    CHECK_FALSE(f.store.body_of("c"));
    CHECK(f.store.fence_of("a") == 1);
    CHECK_FALSE(f.store.fence_of("F"));
    CHECK(f.store.fence_of("Z") == 10);
    CHECK(json_of(f.send(verb::get, "/v1/fences/a"))["token"] == 1);
    CHECK(field(f.send(verb::get, "/v1/resources/a"), "ETag") == "\"1\"");
    CHECK(metric(f.stats, "fencekeeper_writes_total{result=\"stale\"}") == 1);
}

TEST_CASE("transactions: a floor's refusal names the floor") {
    fixture f;
    REQUIRE(f.send(verb::put, "/v1/floors?prefix=jobs/", {{"Fencing-Token", "50"}}).result_int() ==
            200);
    auto res = f.txn(R"({"op": "fence", "lock": "jobs/1", "token": 49})");
    check_error(res, 409, "stale_token", 0);
    CHECK(json_of(res)["floor"] == "jobs/");
    CHECK(json_of(res)["current_token"] == 50);
}

TEST_CASE("transactions: lock_mismatch and precondition_failed name their op") {
    fixture f;
    REQUIRE(f.put("a", "1", "a0", {{"Fencing-Lock", "A"}}).result_int() == 201);
    auto mismatch = f.txn(R"({"op": "fence", "lock": "B", "token": 1},
                             {"op": "put", "key": "a", "lock": "B", "token": 1, "body": "x"})");
    check_error(mismatch, 409, "lock_mismatch", 1);
    CHECK(json_of(mismatch)["key"] == "a");
    CHECK(json_of(mismatch)["lock"] == "A");

    auto pre = f.txn(R"({"op": "put", "key": "a", "lock": "A", "token": 1, "body": "x",
                         "if_match": 2})");
    check_error(pre, 412, "precondition_failed", 0);
    CHECK(json_of(pre)["key"] == "a");

    auto created = f.txn(R"({"op": "put", "key": "a", "lock": "A", "token": 1, "body": "x",
                             "if_none_match": "*"})");
    check_error(created, 412, "precondition_failed", 0);

    auto version = f.txn(R"({"op": "put", "key": "n", "token": 1, "body": "x"},
                            {"op": "check_version", "key": "a", "absent": true})");
    check_error(version, 412, "precondition_failed", 1);
    CHECK(json_of(version)["message"].get<std::string>().find("check_version") !=
          std::string::npos);
    CHECK_FALSE(f.store.body_of("n"));

    // The right preconditions apply.
    CHECK(f.txn(R"({"op": "put", "key": "a", "lock": "A", "token": 1, "body": "y", "if_match": 1},
                   {"op": "check_version", "key": "n", "absent": true})")
              .result_int() == 200);
    CHECK(f.store.body_of("a") == "y");
    CHECK(metric(f.stats, "fencekeeper_writes_total{result=\"precondition_failed\"}") == 3);
    CHECK(metric(f.stats, "fencekeeper_lock_mismatch_total") == 1);
}

TEST_CASE("transactions: operations run after every other op's checks") {
    fixture f;
    int runs = 0;
    f.store.add_operation(
        "ledger",
        [&](const fk::store::operation_request& o) {
            ++runs;
            fk::store::operation_result r;
            if (o.params.at(0) == "fail") {
                r.error = errc::operation_failed;
                r.sqlstate = "23505";
                r.message = "the operation failed (SQLSTATE 23505)";
                r.server_message = "duplicate key value";
                return r;
            }
            r.rows_affected = 1;
            r.rows_json = R"([{"id":1}])";
            return r;
        },
        1);
    REQUIRE(f.send(verb::put, "/v1/fences/S", {{"Fencing-Token", "5"}}).result_int() == 200);

    // The operation is op 0, but the stale check of op 1 decides: the statement never runs.
    auto stale = f.txn(R"({"op": "operation", "name": "ledger", "params": ["ok"], "lock": "acct",
                           "token": 1},
                          {"op": "check", "lock": "S", "token": 4})");
    check_error(stale, 409, "stale_token", 1);
    CHECK(runs == 0);

    auto failed = f.txn(R"({"op": "operation", "name": "ledger", "params": ["fail"],
                            "lock": "acct", "token": 1},
                           {"op": "put", "key": "receipt", "token": 1, "body": "r"})");
    check_error(failed, 422, "operation_failed", 0);
    CHECK(json_of(failed)["sqlstate"] == "23505");
    CHECK_FALSE(f.store.body_of("receipt"));
    CHECK_FALSE(f.store.fence_of("acct"));

    auto ok = f.txn(R"({"op": "operation", "name": "ledger", "params": ["ok"], "lock": "acct",
                        "token": 1},
                       {"op": "put", "key": "receipt", "token": 1, "body": "r"})");
    REQUIRE_MESSAGE(ok.result_int() == 200, ok.body());
    CHECK(json_of(ok)["results"][0] == json{{"op", "operation"},
                                            {"name", "ledger"},
                                            {"lock", "acct"},
                                            {"token", 1},
                                            {"rows_affected", 1},
                                            {"rows", json::array({{{"id", 1}}})}});
    CHECK(f.store.body_of("receipt") == "r");

    // The parameter count, known, is checked before the store.
    const auto before = runs;
    check_error(f.txn(R"({"op": "operation", "name": "ledger", "params": [], "lock": "acct",
                          "token": 1})"),
                400, "invalid_request", 0);
    // An operation the store does not know: 400, naming the op.
    auto unknown = f.txn(R"({"op": "fence", "lock": "q", "token": 1},
                            {"op": "operation", "name": "nope", "params": [], "lock": "acct",
                             "token": 1})");
    check_error(unknown, 400, "invalid_request", 1);
    CHECK(runs == before);
}

TEST_CASE("transactions: operation ops need a store with operations") {
    fixture f;
    auto res = f.txn(R"({"op": "fence", "lock": "l", "token": 1},
                        {"op": "operation", "name": "n", "params": [], "lock": "l", "token": 1})");
    check_error(res, 400, "invalid_request", 1);
    CHECK(json_of(res)["message"] == "op 1: operation ops need the postgres store");
    CHECK_FALSE(f.store.fence_of("l"));
    CHECK(f.store.calls() == 0);
}

TEST_CASE("transactions: malformed bodies are 400 before the store, naming the op") {
    fixture f;
    check_error(f.send(verb::post, "/v1/transactions", {}, "not json"), 400, "invalid_request",
                std::nullopt);
    check_error(f.send(verb::post, "/v1/transactions", {}, R"({"ops": []})"), 400,
                "invalid_request", 0);
    check_error(f.txn(R"({"op": "fence", "lock": "l", "token": 1},
                         {"op": "put", "key": "a/../b", "token": 1, "body": ""})"),
                400, "invalid_request", 1);
    check_error(f.txn(R"({"op": "put", "key": "a", "token": 1, "body": ""},
                         {"op": "delete", "key": "a", "token": 1})"),
                400, "invalid_request", 1);
    check_error(f.txn(R"({"op": "fence", "lock": "l", "token": 1},
                         {"op": "check", "lock": "l", "token": 2})"),
                400, "invalid_request", 1);
    CHECK(f.store.calls() == 0);
    CHECK(metric(f.stats, "fencekeeper_writes_total{result=\"error\"}") == 0);
}

TEST_CASE("transactions: the limits") {
    fixture f;
    f.settings.http.max_txn_ops = 2;
    f.settings.http.max_txn_op_body_bytes = 4;
    const std::string op = R"({"op": "fence", "lock": "l", "token": 1})";
    CHECK(f.txn(op + "," + op).result_int() == 200);
    auto many = f.txn(op + "," + op + "," + op);
    check_error(many, 400, "invalid_request", 2);
    CHECK(json_of(many)["message"].get<std::string>().find("limits.max_txn_ops") !=
          std::string::npos);

    CHECK(f.txn(R"({"op": "put", "key": "a", "token": 1, "body": "abcd"})").result_int() == 200);
    check_error(f.txn(R"({"op": "fence", "lock": "m", "token": 1},
                         {"op": "put", "key": "b", "token": 1, "body": "abcde"})"),
                413, "body_too_large", 1);
    CHECK_FALSE(f.store.body_of("b"));
}

TEST_CASE("transactions: Idempotency-Key covers the whole transaction") {
    fixture f;
    const std::string body =
        R"({"ops": [{"op": "put", "key": "a", "body": "one"}, {"op": "fence", "lock": "F"}]})";
    const headers h{{"Fencing-Token", "5"}, {"Idempotency-Key", "t-1"}};
    auto first = f.send(verb::post, "/v1/transactions", h, body);
    REQUIRE_MESSAGE(first.result_int() == 200, first.body());
    CHECK(field(first, "Idempotent-Replayed").empty());

    // Later writes move the key on; the replay still tells what the transaction did.
    REQUIRE(f.put("a", "9", "two").result_int() == 200);
    auto again = f.send(verb::post, "/v1/transactions", h, body);
    CHECK(again.result_int() == 200);
    CHECK(field(again, "Idempotent-Replayed") == "true");
    CHECK(again.body() == first.body());
    CHECK(f.store.body_of("a") == "two");
    CHECK(f.store.fence_of("a") == 9);
    CHECK(metric(f.stats, "fencekeeper_writes_total{result=\"replayed\"}") == 1);

    // Another body, or other header defaults, under the same key: reused.
    for (auto res :
         {f.send(verb::post, "/v1/transactions", h,
                 R"({"ops": [{"op": "put", "key": "a", "body": "other"}]})"),
          f.send(verb::post, "/v1/transactions",
                 {{"Fencing-Token", "6"}, {"Idempotency-Key", "t-1"}}, body),
          f.send(verb::post, "/v1/transactions",
                 {{"Fencing-Token", "5"}, {"Fencing-Lock", "a"}, {"Idempotency-Key", "t-1"}},
                 body)}) {
        CHECK(res.result_int() == 422);
        CHECK(json_of(res)["error"] == "idempotency_key_reused");
    }
    CHECK(f.store.body_of("a") == "two");
}

TEST_CASE("transactions: a refused keyed transaction records nothing") {
    fixture f;
    REQUIRE(f.send(verb::put, "/v1/fences/a", {{"Fencing-Token", "7"}}).result_int() == 200);
    const std::string body = R"({"ops": [{"op": "put", "key": "a", "body": "x"}]})";
    auto r1 = f.send(verb::post, "/v1/transactions",
                     {{"Fencing-Token", "5"}, {"Idempotency-Key", "z"}}, body);
    check_error(r1, 409, "stale_token", 0);
    auto r2 = f.send(verb::post, "/v1/transactions",
                     {{"Fencing-Token", "7"}, {"Idempotency-Key", "z"}}, body);
    CHECK(r2.result_int() == 200);
    CHECK(f.store.body_of("a") == "x");
    // A key in flight on this process: 409, without reaching the store.
    auto claim = f.keys.try_claim("", "busy");
    REQUIRE(claim);
    check_error(f.send(verb::post, "/v1/transactions",
                       {{"Fencing-Token", "7"}, {"Idempotency-Key", "busy"}}, body),
                409, "idempotency_in_progress", std::nullopt);
    check_error(f.send(verb::post, "/v1/transactions",
                       {{"Fencing-Token", "7"}, {"Idempotency-Key", "bad key"}}, body),
                400, "invalid_request", std::nullopt);
}

TEST_CASE("transactions: store failures") {
    fixture f;
    const std::string op = R"({"op": "fence", "lock": "l", "token": 1})";
    f.store.fail_next(errc::unavailable);
    auto unavailable = f.txn(op);
    check_error(unavailable, 503, "unavailable", std::nullopt);
    CHECK(field(unavailable, "Retry-After") == "1");
    f.store.fail_next(errc::outcome_unknown);
    check_error(f.txn(op), 504, "outcome_unknown", std::nullopt);
    f.store.fail_next(errc::internal);
    auto internal = f.txn(op);
    check_error(internal, 500, "internal", std::nullopt);
    CHECK(json_of(internal)["message"] == "internal error");
    CHECK_FALSE(f.store.fence_of("l"));
    CHECK(metric(f.stats, "fencekeeper_store_errors_total{kind=\"unavailable\"}") == 1);
    CHECK(metric(f.stats, "fencekeeper_store_errors_total{kind=\"outcome_unknown\"}") == 1);
}

TEST_CASE("transactions: only POST") {
    fixture f;
    auto res = f.send(verb::get, "/v1/transactions");
    CHECK(res.result_int() == 405);
    CHECK(field(res, "Allow") == "POST");
}

TEST_CASE("transactions: the config's default op limit is the store's") {
    CHECK(fk::config::settings{}.http.max_txn_ops == fk::store::default_max_txn_ops);
}
