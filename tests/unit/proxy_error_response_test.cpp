#include "proxy/error_response.hpp"

#include <doctest/doctest.h>

#include <boost/beast/http/field.hpp>

#include <optional>
#include <string>

using fk::errc;
namespace http = boost::beast::http;
using namespace fk::proxy;

namespace {

nlohmann::json body_of(const response& res) {
    return nlohmann::json::parse(res.body());
}

} // namespace

TEST_CASE("errors: every code maps to its status and wire name") {
    struct row {
        errc code;
        unsigned status;
        const char* name;
    };
    const row rows[] = {
        {errc::invalid_token, 400, "invalid_token"},
        {errc::invalid_name, 400, "invalid_name"},
        {errc::invalid_request, 400, "invalid_request"},
        {errc::unauthorized, 401, "unauthorized"},
        {errc::forbidden, 403, "forbidden"},
        {errc::not_found, 404, "not_found"},
        {errc::method_not_allowed, 405, "method_not_allowed"},
        {errc::stale_token, 409, "stale_token"},
        {errc::lock_mismatch, 409, "lock_mismatch"},
        {errc::precondition_failed, 412, "precondition_failed"},
        {errc::body_too_large, 413, "body_too_large"},
        {errc::operation_failed, 422, "operation_failed"},
        {errc::missing_token, 428, "missing_token"},
        {errc::headers_too_large, 431, "headers_too_large"},
        {errc::internal, 500, "internal"},
        {errc::unavailable, 503, "unavailable"},
        {errc::outcome_unknown, 504, "outcome_unknown"},
    };
    for (const auto& r : rows) {
        CAPTURE(r.name);
        CHECK(static_cast<unsigned>(status_for(r.code)) == r.status);
        auto res = make_error_response(r.code, "");
        CHECK(res.result_int() == r.status);
        CHECK(res[http::field::content_type] == "application/json");
        auto body = body_of(res);
        CHECK(body["error"] == r.name);
        CHECK(body["message"].is_string());
        CHECK_FALSE(body["message"].get<std::string>().empty());
        CHECK(body.size() == 2);
    }
}

TEST_CASE("errors: ok is a bug and becomes 500 internal") {
    auto res = make_error_response(errc::ok, "x");
    CHECK(res.result_int() == 500);
    CHECK(body_of(res)["error"] == "internal");
}

TEST_CASE("errors: messages are kept") {
    auto res = make_error_response(errc::not_found, "no resource 'a'");
    CHECK(body_of(res)["message"] == "no resource 'a'");
}

TEST_CASE("errors: per-code headers") {
    CHECK(make_error_response(errc::unavailable, "")[http::field::retry_after] == "1");
    CHECK(make_error_response(errc::unauthorized, "")[http::field::www_authenticate] == "Bearer");
    auto res = method_not_allowed_response("GET, HEAD", "nope");
    CHECK(res.result_int() == 405);
    CHECK(res[http::field::allow] == "GET, HEAD");
    CHECK(body_of(res)["error"] == "method_not_allowed");
    auto not_found = make_error_response(errc::not_found, "");
    CHECK(not_found.find(http::field::retry_after) == not_found.end());
}

TEST_CASE("errors: bodies with extra members") {
    SUBCASE("stale_token") {
        auto res = stale_token_response("L", 3, 5);
        CHECK(res.result_int() == 409);
        auto b = body_of(res);
        CHECK(b["error"] == "stale_token");
        CHECK(b["lock"] == "L");
        CHECK(b["token"] == 3);
        CHECK(b["current_token"] == 5);
        CHECK(b["token"].is_number_integer());
    }
    SUBCASE("stale_token caused by a fence floor names it") {
        auto b = body_of(stale_token_response("jobs/a", 3, 50, "jobs/"));
        CHECK(b["floor"] == "jobs/");
        CHECK(b["current_token"] == 50);
        CHECK(b["lock"] == "jobs/a");
        CHECK_FALSE(body_of(stale_token_response("L", 3, 5)).contains("floor"));
    }
    SUBCASE("stale_token of PUT /v1/floors") {
        auto res = stale_floor_response("", 7, 7);
        CHECK(res.result_int() == 409);
        auto b = body_of(res);
        CHECK(b["error"] == "stale_token");
        CHECK(b["prefix"] == "");
        CHECK(b["token"] == 7);
        CHECK(b["current_token"] == 7);
        CHECK_FALSE(b.contains("lock"));
    }
    SUBCASE("lock_mismatch") {
        auto res = lock_mismatch_response("k", "owner");
        CHECK(res.result_int() == 409);
        auto b = body_of(res);
        CHECK(b["error"] == "lock_mismatch");
        CHECK(b["key"] == "k");
        CHECK(b["lock"] == "owner");
    }
    SUBCASE("lock_mismatch with the lock redacted") {
        // The caller may not read the key's lock: neither a member nor the message names it.
        auto res = lock_mismatch_response("k", std::nullopt);
        CHECK(res.result_int() == 409);
        auto b = body_of(res);
        CHECK(b["error"] == "lock_mismatch");
        CHECK(b["key"] == "k");
        CHECK_FALSE(b.contains("lock"));
        CHECK(b["message"].get<std::string>().find("outside this client's read scope") !=
              std::string::npos);
    }
    SUBCASE("precondition_failed") {
        // Worded here for both stores, which return only the code.
        auto res = precondition_failed_response("k");
        CHECK(res.result_int() == 412);
        auto b = body_of(res);
        CHECK(b["error"] == "precondition_failed");
        CHECK(b["key"] == "k");
        CHECK(b["message"].get<std::string>().find("'k'") != std::string::npos);
    }
    SUBCASE("operation_failed") {
        auto res = operation_failed_response("23505", "duplicate key");
        CHECK(res.result_int() == 422);
        auto b = body_of(res);
        CHECK(b["sqlstate"] == "23505");
        CHECK(b["message"] == "duplicate key");
    }
    SUBCASE("extra fields never override error and message") {
        auto res = make_error_response(
            error_reply{errc::not_found, "m", {{"error", "x"}, {"message", "y"}, {"z", 1}}, {}});
        auto b = body_of(res);
        CHECK(b["error"] == "not_found");
        CHECK(b["message"] == "m");
        CHECK(b["z"] == 1);
    }
}

TEST_CASE("errors: invalid UTF-8 in a message does not throw") {
    auto res = make_error_response(errc::invalid_token, "bad '\xff\xfe'");
    CHECK(body_of(res)["error"] == "invalid_token");
}

TEST_CASE("applied_put_response: the bytes json_response writes for {key, lock, token, version}") {
    const std::string names[] = {"",
                                 "k",
                                 "a/b c.d-e_f",
                                 "quote\"back\\slash",
                                 std::string("ctl\x01\x1f\x7f\n\t", 8),
                                 "\xc3\xbcnicode \xe2\x80\xa8 \xf0\x9f\x94\x92",
                                 "bad \xff\xfe utf-8 \xc3",
                                 std::string(300, 'x')};
    const std::int64_t numbers[] = {0, 1, 42, 9223372036854775807LL};
    for (const auto& key : names)
        for (const auto& lock : {std::string("L"), key})
            for (auto n : numbers)
                for (bool created : {true, false}) {
                    CAPTURE(key);
                    CAPTURE(n);
                    const auto status = created ? http::status::created : http::status::ok;
                    const auto want = json_response(
                        status, {{"key", key}, {"lock", lock}, {"token", n}, {"version", n + 0}});
                    const auto got = applied_put_response(created, key, lock, n, n);
                    CHECK(got.result() == want.result());
                    CHECK(got[http::field::content_type] == want[http::field::content_type]);
                    CHECK(got.body() == want.body());
                }
}

TEST_CASE("stale_token_response: the bytes make_error_response writes, with and without a floor") {
    const std::string names[] = {"",
                                 "L",
                                 "quote\"back\\slash",
                                 std::string("ctl\x01\x7f", 5),
                                 "\xc3\xbcnicode",
                                 "bad \xff utf-8",
                                 std::string(300, 'x')};
    for (const auto& lock : names)
        for (const auto& floor : {std::optional<std::string>{}, std::optional<std::string>{""},
                                  std::optional<std::string>{lock}}) {
            CAPTURE(lock);
            const std::string message =
                "fencing token 3 is below the fence 9 of lock '" + lock + "'" +
                (floor ? " (the fence floor of prefix '" + *floor + "')" : std::string{}) +
                "; nothing was written";
            nlohmann::json fields = {{"lock", lock}, {"token", 3}, {"current_token", 9}};
            if (floor)
                fields["floor"] = *floor;
            const auto want =
                make_error_response(error_reply{errc::stale_token, message, fields, {}});
            const auto got = stale_token_response(
                lock, 3, 9, floor ? std::optional<std::string_view>{*floor} : std::nullopt);
            CHECK(got.result() == want.result());
            CHECK(got[http::field::content_type] == want[http::field::content_type]);
            CHECK(got.body() == want.body());
        }
}

TEST_CASE("add_error_field: one more member, the body's form kept") {
    using fk::proxy::add_error_field;
    auto res = fk::proxy::stale_token_response("L", 3, 7);
    const auto before = nlohmann::json::parse(res.body());
    add_error_field(res, "op_index", 2);
    auto after = nlohmann::json::parse(res.body());
    CHECK(after["op_index"] == 2);
    after.erase("op_index");
    CHECK(after == before);
    // Sorted members, as make_error_response writes them.
    CHECK(res.body() == fk::proxy::dump_json(nlohmann::json::parse(res.body())));
    CHECK(res.result_int() == 409);

    auto e = fk::proxy::make_error_response(fk::errc::invalid_request, "bad");
    add_error_field(e, "error", "x");
    add_error_field(e, "message", "y");
    CHECK(nlohmann::json::parse(e.body())["error"] == "invalid_request");
    CHECK(nlohmann::json::parse(e.body())["message"] == "bad");
}
