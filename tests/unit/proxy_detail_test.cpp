#include "config/json_depth.hpp"
#include "proxy/detail/bad_header.hpp"
#include "proxy/detail/request_id.hpp"
#include "proxy/detail/wire.hpp"

#include "proxy/handlers.hpp"

#include <doctest/doctest.h>

#include <boost/beast/http/field.hpp>
#include <boost/beast/http/write.hpp>

#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace fk::proxy;
namespace http = boost::beast::http;

TEST_CASE("request ids") {
    CHECK(detail::is_acceptable_request_id("a"));
    CHECK(detail::is_acceptable_request_id("trace-1 2/3"));
    CHECK(detail::is_acceptable_request_id(std::string(128, '~')));
    CHECK_FALSE(detail::is_acceptable_request_id(""));
    CHECK_FALSE(detail::is_acceptable_request_id(std::string(129, 'a')));
    CHECK_FALSE(detail::is_acceptable_request_id("a\x7f"));
    CHECK_FALSE(detail::is_acceptable_request_id("\xc3\xa9"));
    CHECK(detail::request_id_for(std::string_view{"mine"}) == "mine");
    std::set<std::string> seen;
    for (int i = 0; i < 1000; ++i) {
        auto id = detail::generate_request_id();
        CHECK(id.size() == 16);
        CHECK(id.find_first_not_of("0123456789abcdef") == std::string::npos);
        seen.insert(id);
    }
    CHECK(seen.size() == 1000);
}

TEST_CASE("json nesting pre-check") {
    CHECK_FALSE(fk::config::json_nesting_exceeds(R"({"params":[1,[2,{"a":[3]}]]})", 5));
    CHECK(fk::config::json_nesting_exceeds(R"({"params":[1,[2,{"a":[3]}]]})", 4));
    CHECK_FALSE(fk::config::json_nesting_exceeds(R"({"params":["[[[[[[", "\"[[[["]})", 2));
    CHECK(fk::config::json_nesting_exceeds(std::string(100, '['), 32));
    CHECK_FALSE(fk::config::json_nesting_exceeds("]]]]]]", 1));
}

TEST_CASE("finish_response") {
    SUBCASE("framing, version and request id") {
        response res{http::status::ok, 11};
        res.body() = "abc";
        finish_response(res, false, 11, true, "rid");
        CHECK(res[http::field::content_length] == "3");
        CHECK(res["X-Request-Id"] == "rid");
        CHECK(res.keep_alive());
        CHECK(res.version() == 11);
    }
    SUBCASE("HEAD keeps the GET Content-Length and drops the body") {
        response res{http::status::ok, 11};
        res.body() = "abcdef";
        finish_response(res, true, 11, true, "rid");
        CHECK(res.body().empty());
        CHECK(res[http::field::content_length] == "6");
        response sized{http::status::ok, 11};
        sized.content_length(42);
        finish_response(sized, true, 11, true, "rid");
        CHECK(sized[http::field::content_length] == "42");
    }
    SUBCASE("204 has no Content-Length") {
        response res{http::status::no_content, 11};
        finish_response(res, false, 11, true, "rid");
        CHECK(res.find(http::field::content_length) == res.end());
    }
    SUBCASE("HTTP/1.0 and close") {
        response res{http::status::ok, 11};
        finish_response(res, false, 10, false, "rid");
        CHECK(res.version() == 10);
        CHECK_FALSE(res.keep_alive());
        response odd{http::status::ok, 11};
        finish_response(odd, false, 20, false, "rid");
        CHECK(odd.version() == 11);
        CHECK(odd[http::field::connection] == "close");
    }
}

TEST_CASE("bad header values: our headers keep their error codes") {
    using detail::classify_bad_header_value;
    using fk::errc;
    CHECK(classify_bad_header_value("Fencing-Lock: a\x01"
                                    "b\r\nHost: x\r\n\r\n") == errc::invalid_name);
    CHECK(classify_bad_header_value("Host: x\r\nfencing-lock: a\x7f\r\n\r\n") ==
          errc::invalid_name);
    CHECK(classify_bad_header_value("Fencing-Token: 5\x01\r\n\r\n") == errc::invalid_token);
    CHECK(classify_bad_header_value(std::string_view{"X-Fencing-Token: \x00"
                                                     "5\r\n\r\n",
                                                     23}) == errc::invalid_token);
    CHECK(classify_bad_header_value("X-Other: a\x01\r\nFencing-Lock: ok\r\n\r\n") ==
          errc::invalid_request);
    CHECK(classify_bad_header_value("Fencing-Lock: a\tb\r\n\r\n") == errc::invalid_request);
    // Lines after the end of the head (a pipelined request) are not looked at.
    CHECK(classify_bad_header_value("Host: x\r\n\r\nFencing-Lock: a\x01\r\n") ==
          errc::invalid_request);
    CHECK(classify_bad_header_value("") == errc::invalid_request);
}

TEST_CASE("wire: head + body are the bytes Beast's serializer writes") {
    auto beast_bytes = [](const response& res) {
        std::ostringstream os;
        os << res;
        return os.str();
    };
    auto ours = [](const response& res) {
        std::string out;
        detail::append_head(out, res);
        out += res.body();
        return out;
    };
    std::vector<response> cases;
    cases.push_back(stale_token_response("lock \"x\"", 3, 5));
    cases.push_back(make_error_response(fk::errc::unavailable, "busy"));
    cases.push_back(make_error_response(fk::errc::headers_too_large, ""));
    response no_content{http::status::no_content, 11};
    cases.push_back(no_content);
    response old{http::status::ok, 10};
    old.set("X-Custom", "v");
    old.body() = "hello";
    cases.push_back(old);
    response reasoned{http::status::ok, 11};
    reasoned.reason("Fine");
    cases.push_back(reasoned);
    for (auto& res : cases) {
        for (bool keep_alive : {true, false}) {
            auto copy = res;
            finish_response(copy, false, copy.version(), keep_alive, "rid-1");
            CAPTURE(beast_bytes(copy));
            CHECK(detail::plain_framing(copy));
            CHECK(ours(copy) == beast_bytes(copy));
        }
    }
    response chunked{http::status::ok, 11};
    chunked.chunked(true);
    CHECK_FALSE(detail::plain_framing(chunked));
}
