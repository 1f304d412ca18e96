// Issue 5 wiring that can be tested without sockets: store URL redaction, the preflight
// (--check-config) checks, the exposure warning, the SIGHUP reload, and the handlers'
// metrics (writes_total, stale gap, store durations and errors, GET /metrics).
#include "proxy/preflight.hpp"

#include "backends/log/logging.hpp"
#include "proxy/auth.hpp"
#include "proxy/detail/store_url.hpp"
#include "proxy/handlers.hpp"
#include "proxy/metrics.hpp"
#include "proxy/reload.hpp"
#include "tests/support/memory_store.hpp"

#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <string>
#include <unistd.h>
#include <vector>

namespace net = boost::asio;
namespace http = boost::beast::http;
using fk::errc;
using fk::proxy::detail::redact_store_url;

namespace {

// A file in the temp dir, removed at scope exit.
struct temp_file {
    std::string path;
    explicit temp_file(const std::string& name, const std::string& text = {}) {
        path = (std::filesystem::temp_directory_path() /
                ("fk-proxy-ops-" + std::to_string(::getpid()) + "-" + name))
                   .string();
        write(text);
    }
    void write(const std::string& text) const { std::ofstream(path, std::ios::trunc) << text; }
    ~temp_file() { std::filesystem::remove(path); }
};

// Sets or unsets FENCEKEEPER_AUTH_TOKEN for one scope.
struct scoped_env {
    explicit scoped_env(const char* value) {
        if (value)
            ::setenv("FENCEKEEPER_AUTH_TOKEN", value, 1);
        else
            ::unsetenv("FENCEKEEPER_AUTH_TOKEN");
    }
    ~scoped_env() { ::unsetenv("FENCEKEEPER_AUTH_TOKEN"); }
};

bool contains(const std::string& s, std::string_view part) {
    return s.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("redact_store_url: no user, password or parameters of a postgres URI") {
    CHECK(redact_store_url("file:./data") == "file:./data");
    CHECK(redact_store_url("file:/var/lib/fencekeeper") == "file:/var/lib/fencekeeper");
    CHECK(redact_store_url("postgresql://db.internal:5432/app") ==
          "postgresql://db.internal:5432/app");
    CHECK(redact_store_url("postgresql://fk:s3cret@db.internal:5432/app?sslmode=require") ==
          "postgresql://db.internal:5432/app");
    CHECK(redact_store_url("postgres://fk@db/app") == "postgres://db/app");
    CHECK(redact_store_url("postgresql://") == "postgresql://");
    CHECK(redact_store_url("postgresql://u:p@[::1]:5432,h2:5433/app") ==
          "postgresql://[::1]:5432,h2:5433/app");
    // Secrets in the query string: password=, sslpassword=...
    CHECK(redact_store_url("postgresql://h/app?user=fk&password=s3cret") == "postgresql://h/app");
    CHECK(redact_store_url("postgresql:///app?host=/run/postgresql&password=x") ==
          "postgresql:///app");
    CHECK(redact_store_url("postgresql://h/app#password=x") == "postgresql://h/app");
    // A raw '@' or ':' in the password never leaks a part of it.
    for (const char* url : {"postgresql://fk:p@ss@h:1/app", "postgresql://fk:p%40ss@h:1/app",
                            "postgresql://fk:a:b:c@h:1/app"}) {
        CAPTURE(url);
        auto shown = redact_store_url(url);
        CHECK(shown == "postgresql://h:1/app");
        CHECK_FALSE(contains(shown, "ss"));
        CHECK_FALSE(contains(shown, "fk"));
    }
    // Something unrecognised is not echoed at all.
    CHECK(redact_store_url("mysql://root:pw@h/db") == "(unrecognised store URL)");
    CHECK(redact_store_url("") == "(unrecognised store URL)");
}

TEST_CASE("preflight: store URL and auth token") {
    scoped_env no_env{nullptr};
    fk::config::settings s;
    auto ok = fk::proxy::preflight(s);
    CHECK(ok.ok());
    CHECK_FALSE(ok.token);

    SUBCASE("a bad store URL (settings built without the parser)") {
        s.store = "mysql://x";
        auto r = fk::proxy::preflight(s);
        CHECK_FALSE(r.ok());
        CHECK(contains(r.error, "store"));
    }
    SUBCASE("a postgresql:// URI as libpq parses it, without connecting") {
        s.store = "postgresql://fk:pw@127.0.0.1:1/app?sslmode=require&connect_timeout=1";
        CHECK(fk::proxy::preflight(s).ok());
        s.store = "postgresql://h/app?nosuchparam=1";
        auto r = fk::proxy::preflight(s);
        CHECK_FALSE(r.ok());
        CHECK(contains(r.error, "nosuchparam"));
        s.store = "postgresql://h/app%zz";
        CHECK_FALSE(fk::proxy::preflight(s).ok());
    }
    SUBCASE("a token file") {
        temp_file token{"token", "  s3cret-token\r\nignored second line\n"};
        s.auth_token_file = token.path;
        auto r = fk::proxy::preflight(s);
        REQUIRE(r.ok());
        REQUIRE(r.token);
        CHECK(*r.token == "s3cret-token");
    }
    SUBCASE("a missing or empty token file fails closed") {
        s.auth_token_file = "/nonexistent/fk-token";
        auto r = fk::proxy::preflight(s);
        CHECK_FALSE(r.ok());
        CHECK(contains(r.error, "/nonexistent/fk-token"));
        temp_file empty{"empty", "\n"};
        s.auth_token_file = empty.path;
        CHECK_FALSE(fk::proxy::preflight(s).ok());
    }
    SUBCASE("the environment, only without a file") {
        scoped_env env{"from-env"};
        auto r = fk::proxy::preflight(s);
        REQUIRE(r.token);
        CHECK(*r.token == "from-env");
        temp_file token{"token2", "from-file\n"};
        s.auth_token_file = token.path;
        CHECK(*fk::proxy::preflight(s).token == "from-file");
    }
    SUBCASE("a blank environment variable fails closed") {
        scoped_env env{"   "};
        CHECK_FALSE(fk::proxy::preflight(s).ok());
    }
}

TEST_CASE("exposure_warning: non-loopback without auth only") {
    fk::config::settings s;
    CHECK_FALSE(fk::proxy::exposure_warning(s, false)); // 127.0.0.1
    s.listen_host = "::1";
    CHECK_FALSE(fk::proxy::exposure_warning(s, false));
    s.listen_host = "localhost";
    CHECK_FALSE(fk::proxy::exposure_warning(s, false));
    for (const char* host : {"0.0.0.0", "::", "10.0.0.5", "example.org"}) {
        CAPTURE(host);
        s.listen_host = host;
        auto w = fk::proxy::exposure_warning(s, false);
        REQUIRE(w);
        CHECK(contains(*w, "WARNING"));
        CHECK(contains(*w, host));
        CHECK_FALSE(fk::proxy::exposure_warning(s, true));
    }
}

TEST_CASE("reload_settings: token and log level swap together, or not at all") {
    scoped_env no_env{nullptr};
    const auto before = fk::logging::current_level();
    temp_file token{"reload-token", "old\n"};
    temp_file config{"reload.json", R"({"log_level": "warn"})"};
    const std::vector<std::string> args{"--config", config.path, "--auth-token-file", token.path};
    fk::proxy::authenticator auth{std::string{"old"}};

    token.write("new\n");
    config.write(R"({"log_level": "debug"})");
    auto r = fk::proxy::reload_settings(args, auth);
    CHECK(r.ok);
    CHECK(auth.authorized("Bearer new"));
    CHECK_FALSE(auth.authorized("Bearer old"));
    CHECK(fk::logging::current_level() == fk::logging::level::debug);

    SUBCASE("an unusable token file keeps both") {
        token.write("\n");
        config.write(R"({"log_level": "error"})");
        auto bad = fk::proxy::reload_settings(args, auth);
        CHECK_FALSE(bad.ok);
        CHECK(auth.authorized("Bearer new"));
        CHECK(fk::logging::current_level() == fk::logging::level::debug);
    }
    SUBCASE("a broken config file keeps both") {
        token.write("newer\n");
        config.write(R"({"log_level": "loud"})");
        auto bad = fk::proxy::reload_settings(args, auth);
        CHECK_FALSE(bad.ok);
        CHECK(contains(bad.message, "log_level"));
        CHECK(auth.authorized("Bearer new"));
    }
    SUBCASE("flags still override the file") {
        auto with_flag = args;
        with_flag.push_back("--log-level=info");
        config.write(R"({"log_level": "error"})");
        CHECK(fk::proxy::reload_settings(with_flag, auth).ok);
        CHECK(fk::logging::current_level() == fk::logging::level::info);
    }
    SUBCASE("a reload never turns auth off") {
        auto bad = fk::proxy::reload_settings({"--config", config.path}, auth);
        CHECK_FALSE(bad.ok);
        CHECK(auth.enabled());
        CHECK(auth.authorized("Bearer new"));
    }
    SUBCASE("but may turn it on") {
        fk::proxy::authenticator off;
        CHECK(fk::proxy::reload_settings(args, off).ok);
        CHECK(off.enabled());
    }
    fk::logging::set_level(before);
}

namespace {

struct metrics_fixture {
    fk::test::memory_store store;
    fk::config::settings settings;
    fk::proxy::metrics stats{"test"};

    metrics_fixture() { fk::logging::set_level(fk::logging::level::error); }

    fk::proxy::response send(http::verb method, std::string target,
                             std::vector<std::pair<std::string, std::string>> fields = {},
                             std::string body = {}, bool with_metrics = true) {
        fk::proxy::request req{method, target, 11};
        for (auto& [name, value] : fields)
            req.insert(name, value);
        req.body() = std::move(body);
        req.prepare_payload();
        net::io_context io;
        fk::proxy::handler_context ctx{store, settings, "127.0.0.1:1", {}};
        if (with_metrics)
            ctx.stats = &stats;
        std::optional<fk::proxy::response> out;
        net::co_spawn(io, fk::proxy::handle_request(ctx, std::move(req)),
                      [&](std::exception_ptr e, fk::proxy::response r) {
                          if (e)
                              std::rethrow_exception(e);
                          out = std::move(r);
                      });
        io.run();
        REQUIRE(out);
        CHECK(ctx.matched == fk::proxy::match_route(method, target).kind);
        return std::move(*out);
    }
    fk::proxy::response put(std::string key, std::string token) {
        return send(http::verb::put, "/v1/resources/" + key, {{"Fencing-Token", token}}, "x");
    }

    // The value of one sample line, e.g. `fencekeeper_writes_total{result="stale"}`.
    double sample(const std::string& series) {
        const auto text = stats.render();
        const auto at = text.find("\n" + series + " ");
        REQUIRE_MESSAGE(at != std::string::npos, series);
        return std::stod(text.substr(at + series.size() + 2));
    }
};

} // namespace

TEST_CASE("handlers count writes, stale gaps and store calls") {
    metrics_fixture f;
    CHECK(f.put("a", "5").result_int() == 201);
    CHECK(f.put("a", "6").result_int() == 200);
    CHECK(f.put("a", "2").result_int() == 409); // gap 4
    CHECK(f.put("a", "5").result_int() == 409); // gap 1
    CHECK(f.send(http::verb::put, "/v1/resources/a",
                 {{"Fencing-Token", "7"}, {"If-Match", "\"9\""}}, "x")
              .result_int() == 412);
    CHECK(f.send(http::verb::put, "/v1/resources/a",
                 {{"Fencing-Token", "7"}, {"Fencing-Lock", "other"}}, "x")
              .result_int() == 409); // lock_mismatch
    CHECK(f.send(http::verb::put, "/v1/fences/L", {{"Fencing-Token", "3"}}).result_int() == 200);
    CHECK(f.send(http::verb::delete_, "/v1/resources/a", {{"Fencing-Token", "8"}}).result_int() ==
          204);
    // Rejected before the store: not writes.
    CHECK(f.put("a", "x").result_int() == 400);
    CHECK(f.send(http::verb::put, "/v1/resources/a", {}, "x").result_int() == 428);
    // A store failure: a write error and a store error.
    f.store.fail_next(errc::unavailable);
    CHECK(f.put("b", "1").result_int() == 503);
    f.store.fail_next(errc::outcome_unknown);
    CHECK(f.put("b", "1").result_int() == 504);
    // Reads: store calls, not writes.
    CHECK(f.send(http::verb::get, "/v1/resources/a").result_int() == 404);
    CHECK(f.send(http::verb::get, "/v1/fences/L").result_int() == 200);
    CHECK(f.send(http::verb::get, "/v1/fences?limit=5").result_int() == 200);

    CHECK(f.sample(R"(fencekeeper_writes_total{result="applied"})") == 4);
    CHECK(f.sample(R"(fencekeeper_writes_total{result="stale"})") == 2);
    CHECK(f.sample(R"(fencekeeper_writes_total{result="precondition_failed"})") == 1);
    CHECK(f.sample(R"(fencekeeper_writes_total{result="error"})") == 3);
    CHECK(f.sample("fencekeeper_lock_mismatch_total") == 1);
    CHECK(f.sample(R"(fencekeeper_stale_token_gap_bucket{le="1"})") == 1);
    CHECK(f.sample(R"(fencekeeper_stale_token_gap_bucket{le="2"})") == 1);
    CHECK(f.sample(R"(fencekeeper_stale_token_gap_bucket{le="5"})") == 2);
    CHECK(f.sample("fencekeeper_stale_token_gap_sum") == 5);
    CHECK(f.sample("fencekeeper_stale_token_gap_count") == 2);
    CHECK(f.sample(R"(fencekeeper_store_duration_seconds_count{op="put"})") == 8);
    CHECK(f.sample(R"(fencekeeper_store_duration_seconds_count{op="delete"})") == 1);
    CHECK(f.sample(R"(fencekeeper_store_duration_seconds_count{op="fence_advance"})") == 1);
    CHECK(f.sample(R"(fencekeeper_store_duration_seconds_count{op="get"})") == 1);
    CHECK(f.sample(R"(fencekeeper_store_duration_seconds_count{op="fence_read"})") == 1);
    CHECK(f.sample(R"(fencekeeper_store_duration_seconds_count{op="fence_list"})") == 1);
    CHECK(f.sample(R"(fencekeeper_store_errors_total{kind="unavailable"})") == 1);
    CHECK(f.sample(R"(fencekeeper_store_errors_total{kind="outcome_unknown"})") == 1);
    CHECK(f.sample(R"(fencekeeper_store_errors_total{kind="internal"})") == 0);
}

TEST_CASE("GET and HEAD /metrics") {
    metrics_fixture f;
    auto r = f.send(http::verb::get, "/metrics");
    CHECK(r.result_int() == 200);
    CHECK(std::string_view{r[http::field::content_type]} ==
          "text/plain; version=0.0.4; charset=utf-8");
    CHECK(contains(r.body(), "# TYPE fencekeeper_writes_total counter"));
    CHECK(contains(r.body(), R"(fencekeeper_build_info{version="test"} 1)"));
    auto h = f.send(http::verb::head, "/metrics");
    CHECK(h.result_int() == 200);
    CHECK(h.body().empty());
    CHECK(std::string_view{h[http::field::content_length]} != "0");
    // Without a metrics object (unit tests, fuzzers) there is nothing to render.
    CHECK(f.send(http::verb::get, "/metrics", {}, {}, false).result_int() == 404);
    CHECK(f.send(http::verb::post, "/metrics").result_int() == 405);
}
