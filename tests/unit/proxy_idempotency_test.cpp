// Idempotency-Key, the proxy's part: the header's syntax, the fingerprint, the in-flight
// registry, and the handlers' replies over the in-memory store (which keeps records as
// the real stores do, minus expiry; the real stores' records are tested in their own
// suites and in tests/integration/test_idempotency.py).
#include "proxy/idempotency.hpp"

#include "backends/log/logging.hpp"
#include "proxy/handlers.hpp"
#include "proxy/metrics.hpp"
#include "tests/support/memory_store.hpp"

#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace net = boost::asio;
namespace http = boost::beast::http;
using fk::errc;
using fk::proxy::request;
using fk::proxy::request_identity;
using fk::proxy::response;
using verb = http::verb;
using headers = std::vector<std::pair<std::string, std::string>>;

TEST_CASE("idempotency: key syntax is 1 to 255 bytes of 0x21..0x7E") {
    using fk::proxy::valid_idempotency_key;
    CHECK(valid_idempotency_key("a"));
    CHECK(valid_idempotency_key("!~"));
    CHECK(valid_idempotency_key("8e03978e-40d5-43e8-bc93-6894a57f9324"));
    CHECK(valid_idempotency_key(std::string(255, 'k')));
    CHECK_FALSE(valid_idempotency_key(""));
    CHECK_FALSE(valid_idempotency_key(std::string(256, 'k')));
    CHECK_FALSE(valid_idempotency_key("a b"));
    CHECK_FALSE(valid_idempotency_key("a\tb"));
    CHECK_FALSE(valid_idempotency_key("a\x7f"));
    CHECK_FALSE(valid_idempotency_key("caf\xc3\xa9"));
    CHECK_FALSE(valid_idempotency_key(std::string("a\0b", 3)));
}

TEST_CASE("idempotency: the fingerprint changes with every member, and only with them") {
    request_identity base;
    base.method = "PUT";
    base.route = "resource";
    base.name = "k";
    base.lock = "k";
    base.token = 5;
    base.content_type = "text/plain";
    base.body = "hello";
    const auto fp = fk::proxy::fingerprint(base);
    CHECK(fp.size() == 32);
    CHECK(fk::proxy::fingerprint(base) == fp);

    std::vector<request_identity> variants;
    auto vary = [&](auto change) {
        auto v = base;
        change(v);
        variants.push_back(v);
    };
    vary([](auto& v) { v.method = "DELETE"; });
    vary([](auto& v) { v.route = "fence"; });
    vary([](auto& v) { v.name = "k2"; });
    vary([](auto& v) { v.lock = "other"; });
    vary([](auto& v) { v.token = 6; });
    vary([](auto& v) { v.pre.if_match_any = true; });
    vary([](auto& v) { v.pre.if_match = 0; }); // "0" is not "no If-Match"
    vary([](auto& v) { v.pre.if_match = 1; });
    vary([](auto& v) { v.pre.if_none_match_any = true; });
    vary([](auto& v) { v.content_type = ""; });
    vary([](auto& v) { v.body = "hello!"; });
    // Length-prefixed: moving a byte from one member to the next changes the hash.
    vary([](auto& v) {
        v.name = "k";
        v.lock = "kk";
        v.content_type = "ext/plain";
    });
    vary([](auto& v) {
        v.content_type = "text/plainh";
        v.body = "ello";
    });
    std::set<std::string> seen{fp};
    for (const auto& v : variants)
        CHECK(seen.insert(fk::proxy::fingerprint(v)).second);
}

TEST_CASE("idempotency: a key is in flight once per scope until its claim ends") {
    fk::proxy::inflight_keys keys;
    {
        auto a = keys.try_claim("", "k");
        REQUIRE(a);
        CHECK_FALSE(keys.try_claim("", "k"));
        CHECK(keys.try_claim("other", "k")); // another caller's key (released at once)
        CHECK(keys.size() == 1);
        auto moved = std::move(*a);
        CHECK(keys.size() == 1);
    }
    CHECK(keys.size() == 0);
    CHECK(keys.try_claim("", "k"));
}

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
};

std::string field(const response& res, std::string_view name) {
    return std::string{std::string_view{res[name]}};
}

std::string error_of(const response& res) {
    return nlohmann::json::parse(res.body()).value("error", "");
}

// Every header but X-Request-Id and Idempotent-Replayed, and the body: what a replay
// must reproduce byte for byte.
std::string wire_of(const response& res) {
    std::string out = std::to_string(res.result_int()) + "\n";
    for (const auto& f : res)
        if (f.name_string() != "X-Request-Id" && f.name_string() != "Idempotent-Replayed")
            out += std::string{f.name_string()} + ": " + std::string{f.value()} + "\n";
    return out + "\n" + res.body();
}

double writes_counted(fk::proxy::metrics& m, std::string_view result) {
    const std::string text = m.render();
    const std::string series = "fencekeeper_writes_total{result=\"" + std::string{result} + "\"} ";
    auto at = text.find(series);
    REQUIRE(at != std::string::npos);
    return std::stod(text.substr(at + series.size()));
}

} // namespace

TEST_CASE("idempotency: a keyed PUT replays its reply byte for byte and applies once") {
    fixture f;
    const headers h{
        {"Fencing-Token", "5"}, {"Idempotency-Key", "req-1"}, {"Content-Type", "text/csv"}};
    auto first = f.send(verb::put, "/v1/resources/a", h, "one");
    CHECK(first.result_int() == 201);
    CHECK(field(first, "Idempotent-Replayed").empty());

    // The fence moves on, and another write bumps the version: the replay still tells
    // what happened then.
    CHECK(f.send(verb::put, "/v1/resources/a", {{"Fencing-Token", "9"}}, "two").result_int() ==
          200);
    auto again = f.send(verb::put, "/v1/resources/a", h, "one");
    CHECK(again.result_int() == 201);
    CHECK(field(again, "Idempotent-Replayed") == "true");
    CHECK(wire_of(again) == wire_of(first));
    CHECK(field(again, "ETag") == "\"1\"");
    CHECK(f.store.body_of("a") == "two");
    CHECK(*f.store.fence_of("a") == 9);
    CHECK(writes_counted(f.stats, "applied") == 2);
    CHECK(writes_counted(f.stats, "replayed") == 1);
}

TEST_CASE("idempotency: the same key with another request is 422, nothing applied") {
    fixture f;
    auto put = [&](std::string token, std::string body, headers extra = {}) {
        extra.emplace_back("Fencing-Token", std::move(token));
        extra.emplace_back("Idempotency-Key", "k1");
        return f.send(verb::put, "/v1/resources/a", std::move(extra), std::move(body));
    };
    REQUIRE(put("5", "one").result_int() == 201);
    for (auto res :
         {put("5", "other body"), put("6", "one"), put("5", "one", {{"Fencing-Lock", "L"}}),
          put("5", "one", {{"Content-Type", "text/plain"}}),
          put("5", "one", {{"If-Match", "\"1\""}}),
          f.send(verb::delete_, "/v1/resources/a",
                 {{"Fencing-Token", "5"}, {"Idempotency-Key", "k1"}}),
          f.send(verb::put, "/v1/fences/a", {{"Fencing-Token", "5"}, {"Idempotency-Key", "k1"}})}) {
        CHECK(res.result_int() == 422);
        CHECK(error_of(res) == "idempotency_key_reused");
    }
    CHECK(f.store.body_of("a") == "one");
    CHECK(*f.store.fence_of("a") == 5);
    CHECK_FALSE(f.store.fence_of("L"));
}

TEST_CASE("idempotency: a refused keyed write records nothing; its retry is decided afresh") {
    fixture f;
    REQUIRE(f.send(verb::put, "/v1/fences/a", {{"Fencing-Token", "7"}}).result_int() == 200);
    const headers stale{{"Fencing-Token", "5"}, {"Idempotency-Key", "z"}};
    auto r1 = f.send(verb::put, "/v1/resources/a", stale, "zombie");
    CHECK(r1.result_int() == 409);
    CHECK(error_of(r1) == "stale_token");
    // The same key on a good request is new, not "reused".
    auto r2 = f.send(verb::put, "/v1/resources/a",
                     {{"Fencing-Token", "7"}, {"Idempotency-Key", "z"}}, "live");
    CHECK(r2.result_int() == 201);
    CHECK(f.store.body_of("a") == "live");
}

TEST_CASE("idempotency: DELETE, fence advance and operations replay too") {
    fixture f;
    int runs = 0;
    f.store.add_operation("count", [&](const fk::store::operation_request&) {
        fk::store::operation_result r;
        r.rows_affected = 1;
        r.rows_json = "[{\"n\":" + std::to_string(++runs) + "}]";
        return r;
    });
    const headers op{{"Fencing-Token", "3"}, {"Fencing-Lock", "L"}, {"Idempotency-Key", "op-1"}};
    auto o1 = f.send(verb::post, "/v1/operations/count", op, R"({"params": []})");
    auto o2 = f.send(verb::post, "/v1/operations/count", op, R"({"params": []})");
    CHECK(o1.result_int() == 200);
    CHECK(wire_of(o2) == wire_of(o1));
    CHECK(field(o2, "Idempotent-Replayed") == "true");
    CHECK(runs == 1);

    const headers fence{{"Fencing-Token", "4"}, {"Idempotency-Key", "f-1"}};
    auto f1 = f.send(verb::put, "/v1/fences/L", fence);
    CHECK(f.send(verb::put, "/v1/fences/L", {{"Fencing-Token", "8"}}).result_int() == 200);
    auto f2 = f.send(verb::put, "/v1/fences/L", fence);
    CHECK(f1.result_int() == 200);
    CHECK(wire_of(f2) == wire_of(f1));
    CHECK(*f.store.fence_of("L") == 8);

    REQUIRE(f.send(verb::put, "/v1/resources/d", {{"Fencing-Token", "1"}}).result_int() == 201);
    const headers del{{"Fencing-Token", "1"}, {"Idempotency-Key", "d-1"}};
    auto d1 = f.send(verb::delete_, "/v1/resources/d", del);
    REQUIRE(f.send(verb::put, "/v1/resources/d", {{"Fencing-Token", "1"}}).result_int() == 201);
    auto d2 = f.send(verb::delete_, "/v1/resources/d", del);
    CHECK(d1.result_int() == 204);
    CHECK(wire_of(d2) == wire_of(d1));
    CHECK(field(d2, "Idempotent-Replayed") == "true");
    CHECK(f.store.body_of("d")); // the replay deleted nothing
}

TEST_CASE("idempotency: malformed keys are 400, a key in flight here is 409") {
    fixture f;
    for (const auto& bad : {std::string{}, std::string(256, 'x'), std::string{"a b"}}) {
        auto res = f.send(verb::put, "/v1/resources/a",
                          {{"Fencing-Token", "1"}, {"Idempotency-Key", bad}}, "x");
        CHECK(res.result_int() == 400);
        CHECK(error_of(res) == "invalid_request");
    }
    auto twice =
        f.send(verb::put, "/v1/resources/a",
               {{"Fencing-Token", "1"}, {"Idempotency-Key", "a"}, {"Idempotency-Key", "a"}}, "x");
    CHECK(twice.result_int() == 400);
    CHECK_FALSE(f.store.body_of("a"));

    auto held = f.keys.try_claim("", "busy");
    REQUIRE(held);
    auto res = f.send(verb::put, "/v1/resources/a",
                      {{"Fencing-Token", "1"}, {"Idempotency-Key", "busy"}}, "x");
    CHECK(res.result_int() == 409);
    CHECK(error_of(res) == "idempotency_in_progress");
    CHECK(field(res, "Retry-After") == "1");
    CHECK_FALSE(f.store.body_of("a"));
    // Reads ignore the header.
    CHECK(f.send(verb::get, "/v1/resources/a", {{"Idempotency-Key", "a b"}}).result_int() == 404);
}

TEST_CASE("idempotency: a large keyed body is hashed off the I/O thread, same fingerprint") {
    fixture f;
    const std::string big(200 * 1024, 'b');
    const headers h{{"Fencing-Token", "1"}, {"Idempotency-Key", "big"}};
    auto r1 = f.send(verb::put, "/v1/resources/big", h, big);
    auto r2 = f.send(verb::put, "/v1/resources/big", h, big);
    CHECK(r1.result_int() == 201);
    CHECK(field(r2, "Idempotent-Replayed") == "true");
    auto r3 = f.send(verb::put, "/v1/resources/big", h, big + "!");
    CHECK(r3.result_int() == 422);
}
