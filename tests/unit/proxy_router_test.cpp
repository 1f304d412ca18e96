#include "proxy/router.hpp"

#include <doctest/doctest.h>

#include <string>

using fk::errc;
using fk::proxy::match_route;
using fk::proxy::route;
using verb = boost::beast::http::verb;

TEST_CASE("routes: every path and method") {
    struct row {
        verb method;
        const char* target;
        route kind;
        errc error;
    };
    const row rows[] = {
        {verb::put, "/v1/resources/a", route::resource, errc::ok},
        {verb::get, "/v1/resources/a", route::resource, errc::ok},
        {verb::head, "/v1/resources/a", route::resource, errc::ok},
        {verb::delete_, "/v1/resources/a", route::resource, errc::ok},
        {verb::post, "/v1/resources/a", route::resource, errc::method_not_allowed},
        {verb::patch, "/v1/resources/a", route::resource, errc::method_not_allowed},
        {verb::options, "/v1/resources/a", route::resource, errc::method_not_allowed},
        {verb::get, "/v1/fences/l", route::fence, errc::ok},
        {verb::head, "/v1/fences/l", route::fence, errc::ok},
        {verb::put, "/v1/fences/l", route::fence, errc::ok},
        {verb::delete_, "/v1/fences/l", route::fence, errc::method_not_allowed},
        {verb::post, "/v1/fences/l", route::fence, errc::method_not_allowed},
        {verb::get, "/v1/fences", route::fences_list, errc::ok},
        {verb::head, "/v1/fences", route::fences_list, errc::ok},
        {verb::put, "/v1/fences", route::fences_list, errc::method_not_allowed},
        {verb::put, "/v1/floors?prefix=", route::floors, errc::ok},
        {verb::put, "/v1/floors", route::floors, errc::invalid_request},
        {verb::get, "/v1/floors", route::floors, errc::ok},
        {verb::head, "/v1/floors", route::floors, errc::ok},
        {verb::post, "/v1/floors", route::floors, errc::method_not_allowed},
        {verb::delete_, "/v1/floors?prefix=", route::floors, errc::method_not_allowed},
        {verb::get, "/v1/floors/", route::not_found, errc::not_found},
        {verb::post, "/v1/operations/op", route::operation, errc::ok},
        {verb::get, "/v1/operations/op", route::operation, errc::method_not_allowed},
        {verb::put, "/v1/operations/op", route::operation, errc::method_not_allowed},
        {verb::post, "/v1/transactions", route::transactions, errc::ok},
        {verb::post, "/v1/transactions?x=1", route::transactions, errc::ok},
        {verb::get, "/v1/transactions", route::transactions, errc::method_not_allowed},
        {verb::put, "/v1/transactions", route::transactions, errc::method_not_allowed},
        {verb::delete_, "/v1/transactions", route::transactions, errc::method_not_allowed},
        {verb::post, "/v1/transactions/", route::not_found, errc::not_found},
        {verb::post, "/v1/transactions/x", route::not_found, errc::not_found},
        {verb::get, "/healthz", route::healthz, errc::ok},
        {verb::head, "/healthz", route::healthz, errc::ok},
        {verb::post, "/healthz", route::healthz, errc::method_not_allowed},
        {verb::get, "/readyz", route::readyz, errc::ok},
        {verb::delete_, "/readyz", route::readyz, errc::method_not_allowed},
        {verb::get, "/metrics", route::metrics, errc::ok},
        {verb::put, "/metrics", route::metrics, errc::method_not_allowed},
        {verb::get, "/", route::not_found, errc::not_found},
        {verb::get, "/v1", route::not_found, errc::not_found},
        {verb::get, "/v1/resources", route::not_found, errc::not_found},
        {verb::get, "/v1/operations", route::not_found, errc::not_found},
        {verb::get, "/v2/resources/a", route::not_found, errc::not_found},
        {verb::get, "/healthz/", route::not_found, errc::not_found},
        {verb::get, "/V1/resources/a", route::not_found, errc::not_found},
        {verb::get, "*", route::not_found, errc::not_found},
        {verb::get, "", route::not_found, errc::not_found},
        {verb::unknown, "/v1/resources/a", route::resource, errc::method_not_allowed},
    };
    for (const auto& r : rows) {
        CAPTURE(r.target);
        CAPTURE(static_cast<int>(r.method));
        auto m = match_route(r.method, r.target);
        CHECK(m.kind == r.kind);
        CHECK(m.error == r.error);
    }
}

TEST_CASE("routes: 405 carries the route's Allow list") {
    CHECK(match_route(verb::post, "/v1/resources/a").allow == "GET, HEAD, PUT, DELETE");
    CHECK(match_route(verb::delete_, "/v1/fences/a").allow == "GET, HEAD, PUT");
    CHECK(match_route(verb::post, "/v1/fences").allow == "GET, HEAD");
    CHECK(match_route(verb::post, "/v1/floors").allow == "GET, HEAD, PUT");
    CHECK(match_route(verb::get, "/v1/operations/x").allow == "POST");
    CHECK(match_route(verb::get, "/v1/transactions").allow == "POST");
    CHECK(match_route(verb::post, "/healthz").allow == "GET, HEAD");
    CHECK(match_route(verb::post, "/readyz").allow == "GET, HEAD");
    CHECK(match_route(verb::get, "/nope").allow.empty());
}

TEST_CASE("routes: the method is checked before the name") {
    auto m = match_route(verb::post, "/v1/resources/%zz");
    CHECK(m.error == errc::method_not_allowed);
}

TEST_CASE("routes: names are percent-decoded and validated") {
    SUBCASE("keys may contain slashes") {
        auto m = match_route(verb::get, "/v1/resources/reports/2026-11-29.csv");
        CHECK(m.error == errc::ok);
        CHECK(m.name == "reports/2026-11-29.csv");
    }
    SUBCASE("escapes") {
        auto m = match_route(verb::put, "/v1/resources/a%20b%2Fc%C3%A9");
        CHECK(m.error == errc::ok);
        CHECK(m.name == "a b/c\xC3\xA9");
        CHECK(match_route(verb::get, "/v1/resources/a+b").name == "a+b");
    }
    SUBCASE("lock names") {
        auto m = match_route(verb::get, "/v1/fences/jobs%2Fnightly");
        CHECK(m.error == errc::ok);
        CHECK(m.name == "jobs/nightly");
    }
    SUBCASE("operation names") {
        auto m = match_route(verb::post, "/v1/operations/credit%5Faccount");
        CHECK(m.error == errc::ok);
        CHECK(m.name == "credit_account");
    }
    SUBCASE("the query string is ignored outside the listing") {
        auto m = match_route(verb::get, "/v1/resources/a?limit=zzz&x=%zz");
        CHECK(m.error == errc::ok);
        CHECK(m.name == "a");
        CHECK(match_route(verb::get, "/healthz?x").error == errc::ok);
    }
    SUBCASE("absolute-form targets") {
        auto m = match_route(verb::get, "http://example.com:8080/v1/resources/k?x=1");
        CHECK(m.kind == route::resource);
        CHECK(m.name == "k");
        CHECK(match_route(verb::get, "HTTP://h").kind == route::not_found);
    }
}

TEST_CASE("routes: bad names are invalid_name") {
    const char* bad[] = {
        "/v1/resources/",         // empty
        "/v1/resources/%zz",      // malformed escape
        "/v1/resources/a%2",      // truncated escape
        "/v1/resources/a%",       // truncated escape
        "/v1/resources/a//b",     // empty segment
        "/v1/resources/a/",       // empty trailing segment
        "/v1/resources/../etc",   // dot-dot
        "/v1/resources/a/./b",    // dot
        "/v1/resources/%2e%2e/x", // encoded dot-dot
        "/v1/resources/a%00b",    // NUL
        "/v1/resources/a%0Ab",    // LF
        "/v1/resources/a%7Fb",    // DEL
        "/v1/resources/%FF",      // invalid UTF-8
        "/v1/resources/%C0%AF",   // overlong encoding
        "/v1/fences/",            // empty lock
        "/v1/fences/%zz",         // malformed escape
        "/v1/fences/a%01",        // control character
        "/v1/operations/",        // empty operation name
        "/v1/operations/%",       // malformed escape
    };
    for (const char* target : bad) {
        CAPTURE(target);
        auto m = match_route(target[4] == 'o' ? verb::post : verb::get, target);
        CHECK(m.error == errc::invalid_name);
        CHECK_FALSE(m.message.empty());
    }
    std::string long_key = "/v1/resources/" + std::string(1025, 'k');
    CHECK(match_route(verb::get, long_key).error == errc::invalid_name);
    std::string max_key = "/v1/resources/" + std::string(1024, 'k');
    CHECK(match_route(verb::get, max_key).error == errc::ok);
}

TEST_CASE("routes: listing query") {
    SUBCASE("defaults") {
        auto m = match_route(verb::get, "/v1/fences");
        REQUIRE(m.error == errc::ok);
        CHECK(m.query.prefix.empty());
        CHECK(m.query.limit == 100);
        CHECK_FALSE(m.query.after);
    }
    SUBCASE("all parameters, decoded") {
        auto m = match_route(verb::get, "/v1/fences?prefix=jobs%2F&limit=2&after=jobs%2Fa&x=1");
        REQUIRE(m.error == errc::ok);
        CHECK(m.query.prefix == "jobs/");
        CHECK(m.query.limit == 2);
        CHECK(m.query.after == "jobs/a");
    }
    SUBCASE("limit bounds") {
        CHECK(match_route(verb::get, "/v1/fences?limit=1").query.limit == 1);
        CHECK(match_route(verb::get, "/v1/fences?limit=1000").query.limit == 1000);
        for (const char* bad : {"/v1/fences?limit=0", "/v1/fences?limit=1001",
                                "/v1/fences?limit=", "/v1/fences?limit", "/v1/fences?limit=-1",
                                "/v1/fences?limit=1e2", "/v1/fences?limit=99999999999999999999",
                                "/v1/fences?limit=%zz", "/v1/fences?limit=5&limit=6"}) {
            CAPTURE(bad);
            CHECK(match_route(verb::get, bad).error == errc::invalid_request);
        }
    }
    SUBCASE("bad prefix and after") {
        CHECK(match_route(verb::get, "/v1/fences?prefix=%zz").error == errc::invalid_request);
        CHECK(match_route(verb::get, "/v1/fences?prefix=a%00").error == errc::invalid_request);
        CHECK(match_route(verb::get, "/v1/fences?after=%FF").error == errc::invalid_request);
        CHECK(match_route(verb::get, "/v1/fences?prefix=a&prefix=b").error ==
              errc::invalid_request);
    }
    SUBCASE("empty values") {
        auto m = match_route(verb::get, "/v1/fences?prefix=&after=&&");
        REQUIRE(m.error == errc::ok);
        CHECK(m.query.prefix.empty());
        CHECK_FALSE(m.query.after);
    }
}

TEST_CASE("routes: names for logs") {
    CHECK(to_string(route::resource) == "resource");
    CHECK(to_string(route::fences_list) == "fences_list");
    CHECK(to_string(route::floors) == "floors");
    CHECK(to_string(route::transactions) == "transactions");
    CHECK(to_string(route::not_found) == "not_found");
}
