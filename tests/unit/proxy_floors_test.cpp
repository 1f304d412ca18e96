// Fence floors over HTTP (docs/api.md#fence-floors): the routes, the PUT and GET bodies, the
// 409s a floor causes on every write route, the effective fence in GET /v1/fences/{lock},
// the metric, and Idempotency-Key on PUT /v1/floors, over the in-memory store (which keeps
// floors with fence::floor_set, as the file store does).
#include "proxy/handlers.hpp"

#include "backends/log/logging.hpp"
#include "proxy/idempotency.hpp"
#include "proxy/metrics.hpp"
#include "proxy/router.hpp"
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
using fk::proxy::match_route;
using fk::proxy::request;
using fk::proxy::response;
using fk::proxy::route;
using verb = http::verb;
using headers = std::vector<std::pair<std::string, std::string>>;

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

    response floor(std::string query, std::string token, headers extra = {}) {
        extra.emplace_back("Fencing-Token", std::move(token));
        return send(verb::put, "/v1/floors" + query, std::move(extra));
    }
};

nlohmann::json json_of(const response& res) {
    return nlohmann::json::parse(res.body());
}

std::string error_of(const response& res) {
    return json_of(res).value("error", "");
}

std::string field(const response& res, std::string_view name) {
    return std::string{std::string_view{res[name]}};
}

// A series' value from the exposition: `series` is the name with its labels, if any.
double metric(fk::proxy::metrics& m, std::string_view series) {
    const std::string text = m.render();
    const std::string line = "\n" + std::string{series} + " ";
    auto at = text.find(line);
    REQUIRE(at != std::string::npos);
    return std::stod(text.substr(at + line.size()));
}

bool contains(const std::string& s, std::string_view part) {
    return s.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("floors: routes, methods and the prefix parameter") {
    SUBCASE("PUT needs prefix=, decoded strictly; GET takes none") {
        auto m = match_route(verb::put, "/v1/floors?prefix=jobs%2F");
        CHECK(m.kind == route::floors);
        REQUIRE(m.error == errc::ok);
        CHECK(m.name == "jobs/");

        auto every = match_route(verb::put, "/v1/floors?prefix=");
        REQUIRE(every.error == errc::ok);
        CHECK(every.name.empty());
        CHECK(match_route(verb::put, "/v1/floors?prefix").error == errc::ok);
        // '+' stays '+'; unknown parameters are ignored, as on the listing.
        CHECK(match_route(verb::put, "/v1/floors?x=1&prefix=a+b").name == "a+b");

        auto missing = match_route(verb::put, "/v1/floors");
        CHECK(missing.error == errc::invalid_request);
        CHECK(contains(missing.message, "prefix="));
        CHECK(match_route(verb::put, "/v1/floors?limit=5").error == errc::invalid_request);

        for (const char* bad :
             {"/v1/floors?prefix=%zz", "/v1/floors?prefix=a%00", "/v1/floors?prefix=%FF",
              "/v1/floors?prefix=a&prefix=b", "/v1/floors?prefix=a%2"}) {
            CAPTURE(bad);
            auto r = match_route(verb::put, bad);
            CHECK(r.kind == route::floors);
            CHECK(r.error == errc::invalid_request);
            CHECK_FALSE(r.message.empty());
        }
        CHECK(match_route(verb::put, "/v1/floors?prefix=" + std::string(1024, 'p')).error ==
              errc::ok);
        CHECK(match_route(verb::put, "/v1/floors?prefix=" + std::string(1025, 'p')).error ==
              errc::invalid_request);

        auto get = match_route(verb::get, "/v1/floors?prefix=%zz");
        CHECK(get.error == errc::ok);
        CHECK(match_route(verb::head, "/v1/floors").error == errc::ok);
        CHECK(match_route(verb::get, "http://h:1/v1/floors").kind == route::floors);
    }
    SUBCASE("other methods are 405 with Allow; other paths are not floors") {
        for (verb v : {verb::post, verb::delete_, verb::patch, verb::unknown}) {
            auto m = match_route(v, "/v1/floors?prefix=a");
            CHECK(m.kind == route::floors);
            CHECK(m.error == errc::method_not_allowed);
            CHECK(m.allow == "GET, HEAD, PUT");
        }
        CHECK(match_route(verb::get, "/v1/floors/a").error == errc::not_found);
        CHECK(match_route(verb::get, "/v1/floor").error == errc::not_found);
        CHECK(to_string(route::floors) == "floors");
    }
    SUBCASE("over HTTP") {
        fixture f;
        auto post = f.send(verb::post, "/v1/floors?prefix=a", {{"Fencing-Token", "1"}});
        CHECK(post.result_int() == 405);
        CHECK(field(post, "Allow") == "GET, HEAD, PUT");
        auto missing = f.floor("", "5");
        CHECK(missing.result_int() == 400);
        CHECK(error_of(missing) == "invalid_request");
        CHECK(contains(json_of(missing)["message"].get<std::string>(), "prefix="));
        CHECK(f.floor("?prefix=%zz", "5").result_int() == 400);
        CHECK(json_of(f.send(verb::get, "/v1/floors"))["floors"].empty());
        CHECK(f.store.calls() == 1); // only the GET reached the store
    }
}

TEST_CASE("floors: PUT raises, GET lists sorted by prefix, floors only go up") {
    fixture f;
    auto put = f.floor("?prefix=jobs%2F", "100");
    CHECK(put.result_int() == 200);
    CHECK(field(put, "Content-Type") == "application/json");
    CHECK(json_of(put) == nlohmann::json{{"prefix", "jobs/"}, {"token", 100}});

    auto every = f.floor("?prefix=", "7");
    CHECK(every.result_int() == 200);
    CHECK(json_of(every) == nlohmann::json{{"prefix", ""}, {"token", 7}});
    CHECK(f.floor("?prefix=B", "3").result_int() == 200);

    auto list = f.send(verb::get, "/v1/floors");
    CHECK(list.result_int() == 200);
    const nlohmann::json want = {
        {"floors",
         {{{"prefix", ""}, {"token", 7}, {"updated_at", "2026-11-29T10:00:00.123Z"}},
          {{"prefix", "B"}, {"token", 3}, {"updated_at", "2026-11-29T10:00:00.123Z"}},
          {{"prefix", "jobs/"}, {"token", 100}, {"updated_at", "2026-11-29T10:00:00.123Z"}}}}};
    CHECK(json_of(list) == want);
    auto head = f.send(verb::head, "/v1/floors");
    CHECK(head.result_int() == 200);
    CHECK(head.body().empty());
    CHECK(field(head, "Content-Length") == std::to_string(list.body().size()));

    SUBCASE("equal and lower tokens are 409 stale_token with the prefix's floor") {
        for (const char* token : {"100", "99", "0"}) {
            auto res = f.floor("?prefix=jobs%2F", token);
            CHECK(res.result_int() == 409);
            auto b = json_of(res);
            CHECK(b["error"] == "stale_token");
            CHECK(b["prefix"] == "jobs/");
            CHECK(b["token"] == std::stoll(token));
            CHECK(b["current_token"] == 100);
            CHECK_FALSE(b.contains("lock"));
            CHECK(contains(b["message"].get<std::string>(), "floors only go up"));
        }
        CHECK(f.store.floor_of("jobs/") == 100);
        CHECK(f.floor("?prefix=jobs%2F", "101").result_int() == 200);
        CHECK(f.store.floor_of("jobs/") == 101);
    }
    SUBCASE("token errors as on PUT /v1/fences/{lock}; the body is ignored") {
        CHECK(f.send(verb::put, "/v1/floors?prefix=x").result_int() == 428);
        auto bad = f.floor("?prefix=x", "-1");
        CHECK(bad.result_int() == 400);
        CHECK(error_of(bad) == "invalid_token");
        auto twice = f.send(verb::put, "/v1/floors?prefix=x",
                            {{"Fencing-Token", "1"}, {"X-Fencing-Token", "1"}});
        CHECK(error_of(twice) == "invalid_token");
        CHECK_FALSE(f.store.floor_of("x"));
        auto with_body =
            f.send(verb::put, "/v1/floors?prefix=x", {{"Fencing-Token", "4"}}, "ignored");
        CHECK(with_body.result_int() == 200);
        CHECK(f.store.floor_of("x") == 4);
    }
    SUBCASE("store failures") {
        f.store.fail_next(errc::unavailable);
        CHECK(f.floor("?prefix=y", "1").result_int() == 503);
        f.store.fail_next(errc::outcome_unknown);
        auto unknown = f.floor("?prefix=y", "1");
        CHECK(unknown.result_int() == 504);
        CHECK(contains(json_of(unknown)["message"].get<std::string>(), "Idempotency-Key"));
        f.store.fail_next(errc::internal);
        CHECK(f.send(verb::get, "/v1/floors").result_int() == 500);
        CHECK_FALSE(f.store.floor_of("y"));
    }
}

TEST_CASE("floors: the 1001st prefix is 400 invalid_request; raising an existing one is not") {
    fixture f;
    for (std::size_t i = 0; i < fk::store::max_floors; ++i)
        REQUIRE(f.floor("?prefix=p" + std::to_string(i), "1").result_int() == 200);
    auto full = f.floor("?prefix=one-more", "1");
    CHECK(full.result_int() == 400);
    CHECK(error_of(full) == "invalid_request");
    CHECK(contains(json_of(full)["message"].get<std::string>(), "1000"));
    CHECK(f.floor("?prefix=p7", "2").result_int() == 200);
    CHECK(json_of(f.send(verb::get, "/v1/floors"))["floors"].size() == fk::store::max_floors);
}

TEST_CASE("floors: a write below a floor is 409 stale_token naming the floor, on every route") {
    fixture f;
    f.store.add_operation("op", [](const fk::store::operation_request& o) {
        fk::store::operation_result r;
        r.token = o.token;
        return r;
    });
    // An own fence below the floor: the floor decides.
    REQUIRE(f.send(verb::put, "/v1/resources/jobs/a", {{"Fencing-Token", "5"}}, "x").result_int() ==
            201);
    REQUIRE(f.floor("?prefix=jobs%2F", "50").result_int() == 200);

    auto check_stale = [](const response& res, std::string_view lock, std::int64_t token) {
        CHECK(res.result_int() == 409);
        auto b = json_of(res);
        CHECK(b["error"] == "stale_token");
        CHECK(b["lock"] == lock);
        CHECK(b["token"] == token);
        CHECK(b["current_token"] == 50);
        CHECK(b["floor"] == "jobs/");
        CHECK(contains(b["message"].get<std::string>(), "fence floor of prefix 'jobs/'"));
    };
    check_stale(f.send(verb::put, "/v1/resources/jobs/a", {{"Fencing-Token", "49"}}, "zombie"),
                "jobs/a", 49);
    check_stale(f.send(verb::delete_, "/v1/resources/jobs/a", {{"Fencing-Token", "6"}}), "jobs/a",
                6);
    // A lock never fenced is covered too.
    check_stale(f.send(verb::put, "/v1/resources/x",
                       {{"Fencing-Token", "1"}, {"Fencing-Lock", "jobs/new"}}, "z"),
                "jobs/new", 1);
    check_stale(f.send(verb::put, "/v1/fences/jobs/new", {{"Fencing-Token", "10"}}), "jobs/new",
                10);
    check_stale(f.send(verb::post, "/v1/operations/op",
                       {{"Fencing-Token", "3"}, {"Fencing-Lock", "jobs/op"}}, R"({"params":[]})"),
                "jobs/op", 3);
    CHECK(f.store.body_of("jobs/a") == "x");
    CHECK(f.store.fence_of("jobs/a") == 5);
    CHECK_FALSE(f.store.fence_of("jobs/new"));
    CHECK_FALSE(f.store.body_of("x"));

    SUBCASE("the floor counts: fencekeeper_stale_floor_total and writes_total{stale}") {
        CHECK(metric(f.stats, "fencekeeper_stale_floor_total") == 5);
        CHECK(metric(f.stats, "fencekeeper_writes_total{result=\"stale\"}") == 5);
        // A lock whose own fence is what rejects the write does not count as a floor's.
        REQUIRE(f.send(verb::put, "/v1/fences/jobs/high", {{"Fencing-Token", "80"}}).result_int() ==
                200);
        auto own = f.send(verb::put, "/v1/fences/jobs/high", {{"Fencing-Token", "60"}});
        CHECK(own.result_int() == 409);
        CHECK_FALSE(json_of(own).contains("floor"));
        CHECK(json_of(own)["current_token"] == 80);
        CHECK(metric(f.stats, "fencekeeper_stale_floor_total") == 5);
        CHECK(metric(f.stats, "fencekeeper_writes_total{result=\"stale\"}") == 6);
        CHECK(metric(f.stats, "fencekeeper_store_duration_seconds_count{op=\"floor_raise\"}") == 1);
        CHECK(metric(f.stats, "fencekeeper_writes_total{result=\"applied\"}") == 2);
    }
    SUBCASE("at or above the floor, writes apply and set the lock's own fence") {
        auto put = f.send(verb::put, "/v1/resources/jobs/a", {{"Fencing-Token", "50"}}, "live");
        CHECK(put.result_int() == 200);
        CHECK(json_of(put)["token"] == 50);
        CHECK(f.store.fence_of("jobs/a") == 50);
        CHECK(f.send(verb::put, "/v1/fences/jobs/new", {{"Fencing-Token", "51"}}).result_int() ==
              200);
        CHECK(f.send(verb::post, "/v1/operations/op",
                     {{"Fencing-Token", "50"}, {"Fencing-Lock", "jobs/op"}}, R"({"params":[]})")
                  .result_int() == 200);
        // Locks outside the prefix are not covered.
        CHECK(
            f.send(verb::put, "/v1/resources/other", {{"Fencing-Token", "1"}}, "o").result_int() ==
            201);
        CHECK(f.send(verb::put, "/v1/resources/jobs", {{"Fencing-Token", "1"}}, "o").result_int() ==
              201);
    }
}

TEST_CASE("floors: GET /v1/fences/{lock} shows the effective fence and names its floor") {
    fixture f;
    REQUIRE(f.send(verb::put, "/v1/fences/a/own", {{"Fencing-Token", "5"}}).result_int() == 200);
    REQUIRE(f.send(verb::put, "/v1/fences/a/high", {{"Fencing-Token", "90"}}).result_int() == 200);
    CHECK(f.send(verb::get, "/v1/fences/a/never").result_int() == 404);
    REQUIRE(f.floor("?prefix=a%2F", "20").result_int() == 200);

    auto floor_only = f.send(verb::get, "/v1/fences/a/never");
    CHECK(floor_only.result_int() == 200);
    CHECK(json_of(floor_only) == nlohmann::json{{"lock", "a/never"},
                                                {"token", 20},
                                                {"updated_at", "2026-11-29T10:00:00.123Z"},
                                                {"floor", "a/"}});
    auto below = json_of(f.send(verb::get, "/v1/fences/a/own"));
    CHECK(below["token"] == 20);
    CHECK(below["floor"] == "a/");
    auto above = json_of(f.send(verb::get, "/v1/fences/a/high"));
    CHECK(above["token"] == 90);
    CHECK_FALSE(above.contains("floor"));
    auto outside = f.send(verb::get, "/v1/fences/b");
    CHECK(outside.result_int() == 404);
    CHECK(contains(json_of(outside)["message"].get<std::string>(), "floor"));

    // The listing shows own fences only.
    auto list = json_of(f.send(verb::get, "/v1/fences?prefix=a%2F"));
    CHECK(list["fences"].size() == 2);
    CHECK(list["fences"][0]["lock"] == "a/high");
    CHECK(list["fences"][1]["token"] == 5);
}

TEST_CASE("floors: Idempotency-Key on PUT /v1/floors replays, and a reused key is 422") {
    fixture f;
    const headers h{{"Fencing-Token", "30"}, {"Idempotency-Key", "floor-1"}};
    auto first = f.send(verb::put, "/v1/floors?prefix=q", h);
    CHECK(first.result_int() == 200);
    CHECK(field(first, "Idempotent-Replayed").empty());
    REQUIRE(f.floor("?prefix=q", "40").result_int() == 200);

    // Replayed after the floor moved on: the first reply again, nothing applied.
    auto again = f.send(verb::put, "/v1/floors?prefix=q", h);
    CHECK(again.result_int() == 200);
    CHECK(field(again, "Idempotent-Replayed") == "true");
    CHECK(again.body() == first.body());
    CHECK(f.store.floor_of("q") == 40);

    // The fingerprint covers the route, the prefix and the token.
    for (auto res : {f.send(verb::put, "/v1/floors?prefix=r", h),
                     f.send(verb::put, "/v1/floors?prefix=q",
                            {{"Fencing-Token", "31"}, {"Idempotency-Key", "floor-1"}}),
                     f.send(verb::put, "/v1/fences/q", h)}) {
        CHECK(res.result_int() == 422);
        CHECK(error_of(res) == "idempotency_key_reused");
    }
    CHECK_FALSE(f.store.floor_of("r"));
    CHECK_FALSE(f.store.fence_of("q"));

    // A refused raise records nothing: the key's retry is decided afresh.
    const headers low{{"Fencing-Token", "5"}, {"Idempotency-Key", "floor-2"}};
    CHECK(f.send(verb::put, "/v1/floors?prefix=q", low).result_int() == 409);
    CHECK(f.send(verb::put, "/v1/floors?prefix=q",
                 {{"Fencing-Token", "50"}, {"Idempotency-Key", "floor-2"}})
              .result_int() == 200);

    // A key held by a request in flight here is 409 idempotency_in_progress.
    auto held = f.keys.try_claim("", "busy");
    REQUIRE(held);
    auto busy = f.send(verb::put, "/v1/floors?prefix=z",
                       {{"Fencing-Token", "1"}, {"Idempotency-Key", "busy"}});
    CHECK(busy.result_int() == 409);
    CHECK(error_of(busy) == "idempotency_in_progress");
    CHECK(f.send(verb::put, "/v1/floors?prefix=z",
                 {{"Fencing-Token", "1"}, {"Idempotency-Key", "a b"}})
              .result_int() == 400);
    CHECK_FALSE(f.store.floor_of("z"));
}
