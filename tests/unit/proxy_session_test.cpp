#include "proxy/session.hpp"

#include "backends/log/logging.hpp"
#include "proxy/auth.hpp"
#include "proxy/connection_registry.hpp"
#include "proxy/detail/session_impl.hpp"
#include "proxy/metrics.hpp"
#include "tests/support/memory_store.hpp"
#include "tests/support/session_stream.hpp"

#include <doctest/doctest.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/_experimental/test/fail_count.hpp>
#include <boost/beast/_experimental/test/stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

// The session loop (proxy/detail/session_impl.hpp) over Beast's in-memory test stream: the
// order of checks end to end, failure injection at every read and write (Beast's
// fail_count, as Beast's own parser and stream tests use it), and every segmentation of
// the input. No socket, no timer: deadlines are recorded, not waited for.

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;

template class fk::proxy::basic_session<fk::test::session_stream>;

namespace {

using fk::proxy::basic_session;
using fk::test::session_stream;
using fk::test::transport_log;
using response = http::response<http::string_body>;

constexpr std::string_view auth_line = "Authorization: Bearer s3cret\r\n";
constexpr std::size_t never = std::numeric_limits<std::size_t>::max();

// What every connection of one test shares: the store and the services.
struct harness {
    fk::test::memory_store store;
    fk::config::settings settings;
    fk::proxy::metrics stats;
    fk::proxy::authenticator auth{std::string{"s3cret"}};
    fk::proxy::limiter connections{fk::proxy::limiter::unlimited};
    fk::proxy::limiter inflight{fk::proxy::limiter::unlimited};
    std::shared_ptr<fk::proxy::connection_registry> registry =
        std::make_shared<fk::proxy::connection_registry>();

    harness() {
        fk::logging::set_level(fk::logging::level::error);
        store.set_clock([] { return std::int64_t{1'795'946'400'123}; });
        settings.http.max_header_bytes = 1024;
        settings.http.max_body_bytes = 64;
    }
    fk::proxy::inflight_keys idempotency_keys;
    fk::proxy::session_services services() {
        return {store, settings, stats, auth, connections, inflight, idempotency_keys};
    }
};

// One connection: the client's end of an in-memory stream, and a session on the other.
// Nothing runs until settle() or finish().
struct connection {
    net::io_context io;
    beast::test::fail_count fc;
    std::shared_ptr<transport_log> log = std::make_shared<transport_log>();
    beast::test::stream client{io};
    std::shared_ptr<basic_session<session_stream>> session;
    bool finished = false;
    std::exception_ptr failure;

    // `fail_at`: the fail_count index (reads and writes fail from there on).
    // `read_size`: the most one read delivers.
    explicit connection(harness& h, std::size_t fail_at = never, std::size_t read_size = never)
        : fc(fail_at) {
        session_stream server{io, fc, log};
        server.read_size(read_size);
        client.connect(server);
        session = std::make_shared<basic_session<session_stream>>(
            std::move(server), h.services(), h.registry, fk::proxy::limiter::permit{});
        net::co_spawn(
            io, [s = session]() -> net::awaitable<void> { co_await s->run(); },
            [this](std::exception_ptr e) {
                finished = true;
                failure = e;
            });
    }

    void send(std::string_view bytes) { net::write(client, net::buffer(bytes)); }
    // Runs whatever is ready without waiting for more input: what the session does with
    // what it has been sent so far.
    void settle() {
        do
            io.restart();
        while (io.poll() > 0);
    }
    // The client closes its end; the session runs to its end.
    void finish() {
        client.close();
        settle();
        REQUIRE(finished);
        CHECK_FALSE(failure);
        CHECK(log->unguarded_ops == 0); // every read and write ran under a deadline
    }
    std::string received() const { return std::string{client.str()}; }
};

// Splits what the client received into responses; every one must be complete.
// `final_only`: leave out interim (1xx) responses.
std::vector<response> responses_in(std::string_view wire, bool final_only = false) {
    std::vector<response> out;
    while (!wire.empty()) {
        http::response_parser<http::string_body> parser;
        while (!parser.is_done()) {
            beast::error_code ec;
            auto used = parser.put(net::buffer(wire.data(), wire.size()), ec);
            wire.remove_prefix(used);
            if (ec == http::error::need_more && used > 0)
                continue;
            REQUIRE_MESSAGE(!ec, "unparsable response bytes: " << ec.message());
        }
        if (!final_only || parser.get().result_int() >= 200)
            out.push_back(parser.release());
    }
    return out;
}

std::string error_of(const response& res) {
    auto j = nlohmann::json::parse(res.body(), nullptr, false);
    return j.is_object() ? j.value("error", "") : std::string{};
}

bool closes(const response& res) {
    return !res.keep_alive();
}

std::string put(std::string_view key, std::string_view token, std::string_view body,
                std::string_view id = "put") {
    return "PUT /v1/resources/" + std::string{key} + " HTTP/1.1\r\nHost: t\r\n" +
           std::string{auth_line} + "Fencing-Token: " + std::string{token} +
           "\r\nX-Request-Id: " + std::string{id} +
           "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + std::string{body};
}

// `chunks` already framed (size lines, data, the last chunk and the trailer section).
std::string put_chunked(std::string_view key, std::string_view token, std::string_view chunks,
                        std::string_view id = "put-chunked") {
    return "PUT /v1/resources/" + std::string{key} + " HTTP/1.1\r\nHost: t\r\n" +
           std::string{auth_line} + "Fencing-Token: " + std::string{token} +
           "\r\nX-Request-Id: " + std::string{id} + "\r\nTransfer-Encoding: chunked\r\n\r\n" +
           std::string{chunks};
}

std::string get(std::string_view target, std::string_view id = "get") {
    return "GET " + std::string{target} + " HTTP/1.1\r\nHost: t\r\n" + std::string{auth_line} +
           "X-Request-Id: " + std::string{id} + "\r\n\r\n";
}

} // namespace

TEST_CASE("session: pipelined requests are answered in order, each PUT applied once") {
    harness h;
    connection c{h};
    c.send(put("a", "5", "alpha", "1") + get("/v1/resources/a", "2") +
           put_chunked("b", "6", "3\r\nbet\r\n1\r\na\r\n0\r\n\r\n", "3") +
           get("/v1/resources/b", "4") + get("/healthz", "5"));
    c.finish();
    auto rs = responses_in(c.received());
    REQUIRE(rs.size() == 5);
    CHECK(rs[0].result_int() == 201);
    CHECK(rs[0]["X-Request-Id"] == "1");
    CHECK(rs[1].result_int() == 200);
    CHECK(rs[1].body() == "alpha");
    CHECK(rs[2].result_int() == 201);
    CHECK(rs[3].body() == "beta");
    CHECK(rs[4].result_int() == 200);
    CHECK(rs[4]["X-Request-Id"] == "5");
    for (const auto& r : rs)
        CHECK_FALSE(closes(r));
    CHECK(h.store.calls() == 4); // two writes, two reads: nothing applied twice
    CHECK(h.store.body_of("a") == "alpha");
    CHECK(h.store.body_of("b") == "beta");
    CHECK_FALSE(c.log->shut_send); // the client ended the connection, not an error
}

TEST_CASE("session: a malformed head is 400, then close; nothing behind it is served") {
    harness h;
    connection c{h};
    c.send("PUT /v1/resources/a HTTP/1.1\r\nHost: t\r\nno colon here\r\n\r\n" + put("a", "1", "x"));
    c.finish();
    auto rs = responses_in(c.received());
    REQUIRE(rs.size() == 1);
    CHECK(rs[0].result_int() == 400);
    CHECK(error_of(rs[0]) == "invalid_request");
    CHECK(closes(rs[0]));
    CHECK(c.log->shut_send);
    CHECK(h.store.calls() == 0);
}

TEST_CASE("session: faulty framing is 400, then close; nothing pipelined behind it is served") {
    std::string head;
    SUBCASE("Transfer-Encoding in HTTP/1.0") {
        head = "PUT /v1/resources/a HTTP/1.0\r\nHost: t\r\n" + std::string{auth_line} +
               "Fencing-Token: 1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n";
    }
    SUBCASE("Content-Length with Transfer-Encoding") {
        head = "PUT /v1/resources/a HTTP/1.1\r\nHost: t\r\n" + std::string{auth_line} +
               "Fencing-Token: 1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
               "1\r\nx\r\n0\r\n\r\n";
    }
    SUBCASE("framing is checked before credentials") {
        head = "PUT /v1/resources/a HTTP/1.1\r\nHost: t\r\nFencing-Token: 1\r\n"
               "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n";
    }
    harness h;
    connection c{h};
    c.send(head + put("b", "2", "smuggled"));
    c.finish();
    auto rs = responses_in(c.received());
    REQUIRE(rs.size() == 1);
    CHECK(rs[0].result_int() == 400);
    CHECK(error_of(rs[0]) == "invalid_request");
    CHECK(closes(rs[0]));
    CHECK(h.store.calls() == 0);
    CHECK_FALSE(h.store.body_of("b"));
}

TEST_CASE("session: no credentials with a body pending is 401 before any body byte is read") {
    harness h;
    connection c{h};
    std::string head;
    SUBCASE("a body within the limit") {
        head = "PUT /v1/resources/a HTTP/1.1\r\nHost: t\r\nFencing-Token: 1\r\n"
               "Content-Length: 10\r\n\r\n";
    }
    SUBCASE("a declared body over the limit: 401, not 413") {
        head = "PUT /v1/resources/a HTTP/1.1\r\nHost: t\r\nFencing-Token: 1\r\n"
               "Content-Length: 100000\r\n\r\n";
    }
    SUBCASE("a wrong token") {
        head = "PUT /v1/resources/a HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer nope\r\n"
               "Fencing-Token: 1\r\nContent-Length: 10\r\n\r\n";
    }
    // Only the head is on the wire: a session that waited for the body would not answer.
    c.send(head);
    c.settle();
    auto rs = responses_in(c.received());
    REQUIRE(rs.size() == 1);
    CHECK(rs[0].result_int() == 401);
    CHECK(closes(rs[0]));
    CHECK(c.log->shut_send);
    CHECK(c.log->read_at_shutdown == head.size());
    CHECK_FALSE(c.finished); // lingering: reading and dropping what the client still sends
    c.send("0123456789" + get("/healthz"));
    c.finish();
    CHECK(responses_in(c.received()).size() == 1);
    CHECK(h.store.calls() == 0);
}

TEST_CASE("session: without a body, 401 keeps the connection") {
    harness h;
    connection c{h};
    c.send("GET /v1/resources/a HTTP/1.1\r\nHost: t\r\n\r\n" + get("/healthz"));
    c.finish();
    auto rs = responses_in(c.received());
    REQUIRE(rs.size() == 2);
    CHECK(rs[0].result_int() == 401);
    CHECK_FALSE(closes(rs[0]));
    CHECK(rs[1].result_int() == 200);
}

TEST_CASE("session: an open route with a body is refused from the head, then close") {
    harness h;
    connection c{h};
    std::string head;
    unsigned status = 0;
    SUBCASE("GET /healthz with a body: 400") {
        head = "GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\n";
        status = 400;
    }
    SUBCASE("POST /readyz with a chunked body: 405") {
        head = "POST /readyz HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
        status = 405;
    }
    c.send(head);
    c.settle();
    auto rs = responses_in(c.received());
    REQUIRE(rs.size() == 1);
    CHECK(rs[0].result_int() == status);
    if (status == 405)
        CHECK(rs[0]["Allow"] != "");
    CHECK(closes(rs[0]));
    CHECK(c.log->read_at_shutdown == head.size());
    c.finish();
}

TEST_CASE("session: a declared body over the limit, with credentials, is 413 before it is read") {
    harness h;
    connection c{h};
    const std::string head = "PUT /v1/resources/a HTTP/1.1\r\nHost: t\r\n" +
                             std::string{auth_line} +
                             "Fencing-Token: 1\r\nContent-Length: 65\r\n\r\n";
    c.send(head);
    c.settle();
    auto rs = responses_in(c.received());
    REQUIRE(rs.size() == 1);
    CHECK(rs[0].result_int() == 413);
    CHECK(error_of(rs[0]) == "body_too_large");
    CHECK(closes(rs[0]));
    CHECK(c.log->read_at_shutdown == head.size());
    c.finish();
    CHECK(h.store.calls() == 0);
}

TEST_CASE("session: a chunked body over the limit is 413, then close, nothing applied") {
    harness h;
    connection c{h};
    c.send(put_chunked("a", "1", "40\r\n" + std::string(64, 'x') + "\r\n1\r\ny\r\n0\r\n\r\n"));
    c.finish();
    auto rs = responses_in(c.received());
    REQUIRE(rs.size() == 1);
    CHECK(rs[0].result_int() == 413);
    CHECK(closes(rs[0]));
    CHECK(h.store.calls() == 0);
}

TEST_CASE("session: no in-flight permit left is 503 + Retry-After, before the body") {
    harness h;
    h.inflight.set_limit(0);
    connection c{h};
    SUBCASE("a body pending: 503, then close") {
        const std::string head = "PUT /v1/resources/a HTTP/1.1\r\nHost: t\r\n" +
                                 std::string{auth_line} +
                                 "Fencing-Token: 1\r\nContent-Length: 5\r\n\r\n";
        c.send(head);
        c.settle();
        auto rs = responses_in(c.received());
        REQUIRE(rs.size() == 1);
        CHECK(rs[0].result_int() == 503);
        CHECK(rs[0]["Retry-After"] == "1");
        CHECK(closes(rs[0]));
        CHECK(c.log->read_at_shutdown == head.size());
        c.finish();
    }
    SUBCASE("no body: 503 keeps the connection; probes take no permit") {
        c.send(get("/v1/resources/a") + get("/healthz"));
        c.finish();
        auto rs = responses_in(c.received());
        REQUIRE(rs.size() == 2);
        CHECK(rs[0].result_int() == 503);
        CHECK_FALSE(closes(rs[0]));
        CHECK(rs[1].result_int() == 200);
    }
    CHECK(h.store.calls() == 0);
}

TEST_CASE("session: trailer fields are 400 and the connection goes on") {
    harness h;
    connection c{h};
    c.send(put_chunked("a", "1", "2\r\nhi\r\n0\r\nFencing-Token: 99\r\n\r\n") +
           get("/v1/resources/a") + put("a", "1", "ok"));
    c.finish();
    auto rs = responses_in(c.received());
    REQUIRE(rs.size() == 3);
    CHECK(rs[0].result_int() == 400);
    CHECK(error_of(rs[0]) == "invalid_request");
    CHECK_FALSE(closes(rs[0]));
    CHECK(rs[1].result_int() == 404); // the trailer's request was not applied
    CHECK(rs[2].result_int() == 201);
    CHECK(h.store.fence_of("a") == 1);
}

TEST_CASE("session: a head, chunk line or trailer section over the header limit is 431, close") {
    // Whether the piece of framing arrives whole in one read or in many.
    const std::string inputs[] = {
        put_chunked("a", "1", "1;" + std::string(1100, 'e') + "\r\nx\r\n0\r\n\r\n"),
        put_chunked("a", "1", "1\r\nx\r\n0\r\nX-Pad: " + std::string(1100, 't') + "\r\n\r\n"),
        put_chunked("a", "1", "1\r\nx\r\n0;" + std::string(1100, 'e') + "\r\n\r\n"),
        "GET /healthz HTTP/1.1\r\nX-Pad: " + std::string(1100, 'h') + "\r\n\r\n",
    };
    for (const auto& input : inputs) {
        for (std::size_t piece : {input.size(), std::size_t{700}, std::size_t{64}}) {
            CAPTURE(input.substr(0, 60));
            CAPTURE(piece);
            harness h;
            connection c{h, never, piece};
            c.send(input);
            c.finish();
            auto rs = responses_in(c.received());
            REQUIRE(rs.size() == 1);
            CHECK(rs[0].result_int() == 431);
            CHECK(error_of(rs[0]) == "headers_too_large");
            CHECK(closes(rs[0]));
            CHECK(h.store.calls() == 0);
        }
    }
}

TEST_CASE("session: a head over the header limit is 431 however it arrives") {
    const std::string input = get("/v1/resources/" + std::string(1100, 'k')) + get("/healthz");
    for (std::size_t piece : {input.size(), std::size_t{700}, std::size_t{64}, std::size_t{1}}) {
        CAPTURE(piece);
        harness h;
        connection c{h, never, piece};
        c.send(input);
        c.finish();
        auto rs = responses_in(c.received());
        REQUIRE(rs.size() == 1);
        CHECK(rs[0].result_int() == 431);
        CHECK(closes(rs[0]));
    }
}

TEST_CASE("session: Expect: 100-continue gets 100 only once the request is admitted") {
    harness h;
    connection c{h};
    std::string expect = "PUT /v1/resources/a HTTP/1.1\r\nHost: t\r\n" + std::string{auth_line} +
                         "Fencing-Token: 1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n";
    SUBCASE("admitted") {
        c.send(expect);
        c.settle();
        auto rs = responses_in(c.received());
        REQUIRE(rs.size() == 1);
        CHECK(rs[0].result_int() == 100);
        c.send("ok");
        c.finish();
        rs = responses_in(c.received());
        REQUIRE(rs.size() == 2);
        CHECK(rs[1].result_int() == 201);
        CHECK(h.store.body_of("a") == "ok");
    }
    SUBCASE("refused: no 100") {
        h.inflight.set_limit(0);
        c.send(expect);
        c.settle();
        auto rs = responses_in(c.received());
        REQUIRE(rs.size() == 1);
        CHECK(rs[0].result_int() == 503);
        c.finish();
    }
}

TEST_CASE("session: drain closes an idle connection and ends a busy one after its response") {
    harness h;
    connection c{h};
    bool drained = false;
    SUBCASE("idle") {
        c.send(get("/healthz"));
        c.settle();
        REQUIRE(responses_in(c.received()).size() == 1);
        h.registry->begin_drain([&] { drained = true; });
        c.settle();
        CHECK(c.finished);
        CHECK(c.log->closed);
    }
    SUBCASE("waiting for a body") {
        const auto request = put("a", "1", "body");
        c.send(request.substr(0, request.size() - 2));
        c.settle();
        h.registry->begin_drain([&] { drained = true; });
        c.settle();
        CHECK_FALSE(c.finished);
        c.send("dy");
        c.settle();
        auto rs = responses_in(c.received());
        REQUIRE(rs.size() == 1);
        CHECK(rs[0].result_int() == 201);
        CHECK(closes(rs[0]));
        CHECK(h.store.body_of("a") == "body");
    }
    c.finish();
    CHECK(drained);
}

namespace {

// Runs `input` over one connection whose reads and writes fail from the `fail_at`-th on,
// and checks what must hold at every point of failure: the session ends without an
// exception, and each PUT in `writes` (key → body) was applied completely or not at all,
// at most once, and surely when its success reply got out.
struct exchange_outcome {
    std::string received;
    bool failed = false; // the failure point was reached
};

exchange_outcome run_with_failure(std::string_view input,
                                  const std::vector<std::pair<std::string, std::string>>& writes,
                                  std::size_t fail_at, std::size_t read_size) {
    harness h;
    connection c{h, fail_at, read_size};
    c.send(input);
    c.finish();
    exchange_outcome out{c.received(), c.log->ops >= std::max<std::size_t>(fail_at, 1)};
    std::size_t applied = 0;
    for (const auto& [key, body] : writes) {
        auto stored = h.store.body_of(key);
        if (stored) {
            CHECK(*stored == body); // never a partial body
            ++applied;
        }
    }
    CHECK(h.store.calls() == applied); // no write reached the store twice
    auto rs = responses_in(out.received, true);
    CHECK(rs.size() <= writes.size());
    for (std::size_t i = 0; i < rs.size(); ++i) {
        if (rs[i].result_int() == 201)
            CHECK(h.store.body_of(writes[i].first) == writes[i].second);
    }
    // Applied in order: a later write never without an earlier one.
    bool gap = false;
    for (const auto& [key, body] : writes) {
        const bool present = h.store.body_of(key).has_value();
        CHECK_FALSE((gap && present));
        gap = gap || !present;
    }
    return out;
}

// For n = 0, 1, 2, ... until the exchange completes without reaching the failure, once
// with the input read whole and once in pieces of 7 bytes (failures mid-body).
void fail_count_matrix(std::string_view input,
                       const std::vector<std::pair<std::string, std::string>>& writes) {
    for (std::size_t read_size : {never, std::size_t{7}}) {
        CAPTURE(read_size);
        const auto clean = run_with_failure(input, writes, never, read_size);
        REQUIRE_FALSE(clean.failed);
        REQUIRE(responses_in(clean.received, true).size() == writes.size());
        std::size_t n = 0;
        for (;; ++n) {
            CAPTURE(n);
            auto out = run_with_failure(input, writes, n, read_size);
            if (!out.failed) {
                CHECK(out.received == clean.received);
                break;
            }
            REQUIRE(n < 1000);
        }
        // Every read and write of the exchange was a failure point.
        CHECK(n > 3);
    }
}

} // namespace

TEST_CASE("session: fail_count matrix, a chunked PUT with Expect: 100-continue") {
    fail_count_matrix("PUT /v1/resources/k HTTP/1.1\r\nHost: t\r\n" + std::string{auth_line} +
                          "Fencing-Token: 7\r\nX-Request-Id: x\r\nExpect: 100-continue\r\n"
                          "Transfer-Encoding: chunked\r\n\r\n"
                          "5\r\nhello\r\n1;ext=1\r\n \r\n5\r\nworld\r\n0\r\n\r\n",
                      {{"k", "hello world"}});
}

TEST_CASE("session: fail_count matrix, a pipelined pair") {
    fail_count_matrix(put("k1", "3", "first", "1") +
                          put_chunked("k2", "4", "3\r\nsec\r\n3\r\nond\r\n0\r\n\r\n", "2"),
                      {{"k1", "first"}, {"k2", "second"}});
}

TEST_CASE("session: framing does not depend on how the input is segmented") {
    const std::string input = put("a", "5", "alpha", "1") +
                              put_chunked("b", "6", "3;x=y\r\nbet\r\n1\r\na\r\n0\r\n\r\n", "2") +
                              put_chunked("c", "7", "1\r\nz\r\n0\r\nX-T: 1\r\n\r\n", "3") +
                              get("/v1/resources/b", "4") +
                              "GET /healthz HTTP/1.0\r\nX-Request-Id: 5\r\n\r\n";
    std::string reference;
    for (std::size_t piece = input.size(); piece >= 1; --piece) {
        CAPTURE(piece);
        harness h;
        connection c{h, never, piece};
        c.send(input);
        c.finish();
        if (reference.empty()) {
            reference = c.received();
            auto rs = responses_in(reference);
            REQUIRE(rs.size() == 5);
            CHECK(rs[0].result_int() == 201);
            CHECK(rs[1].result_int() == 201);
            CHECK(rs[2].result_int() == 400); // the trailer
            CHECK(rs[3].body() == "beta");
            CHECK(rs[4].result_int() == 200);
            CHECK(closes(rs[4])); // HTTP/1.0 without keep-alive
        }
        CHECK(c.received() == reference);
        CHECK(h.store.calls() == 3);
        CHECK_FALSE(h.store.body_of("c"));
    }
}
