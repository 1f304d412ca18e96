// The operations keys and flags (docs/configuration.md): auth_token_file / --auth-token-file,
// limits.max_inflight_requests, --check-config.
#include "config/parse.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

using namespace fk::config;

namespace {

command_line ok(const std::vector<std::string>& args) {
    auto r = parse_command_line(args);
    if (auto* e = std::get_if<parse_error>(&r)) {
        FAIL_CHECK("unexpected error: " << e->message);
        return {};
    }
    return std::get<command_line>(r);
}

std::string err(const std::vector<std::string>& args) {
    auto r = parse_command_line(args);
    if (auto* e = std::get_if<parse_error>(&r))
        return e->message;
    FAIL_CHECK("expected an error");
    return {};
}

// A config file in the temp dir, removed at scope exit.
struct temp_config {
    std::string path;
    explicit temp_config(const std::string& text) {
        path = (std::filesystem::temp_directory_path() /
                ("fk-config-ops-" + std::to_string(::getpid()) + ".json"))
                   .string();
        std::ofstream(path) << text;
    }
    ~temp_config() { std::filesystem::remove(path); }
};

} // namespace

TEST_CASE("defaults: no auth file, 1024 in-flight requests, no check") {
    settings s;
    CHECK_FALSE(s.auth_token_file.has_value());
    CHECK(s.http.max_inflight_requests == 1024);
    auto cl = ok({});
    CHECK_FALSE(cl.check_config);
}

TEST_CASE("limits.max_inflight_requests: range 1 to 1000000") {
    settings s;
    CHECK_FALSE(apply_json(R"({"limits": {"max_inflight_requests": 1}})", s));
    CHECK(s.http.max_inflight_requests == 1);
    CHECK_FALSE(apply_json(R"({"limits": {"max_inflight_requests": 1000000}})", s));
    CHECK(s.http.max_inflight_requests == 1'000'000);
    for (const char* bad : {R"({"limits": {"max_inflight_requests": 0}})",
                            R"({"limits": {"max_inflight_requests": 1000001}})",
                            R"({"limits": {"max_inflight_requests": "5"}})",
                            R"({"limits": {"max_inflight_requests": 2.5}})"}) {
        settings t;
        auto e = apply_json(bad, t);
        REQUIRE(e);
        CHECK(e->message.find("limits.max_inflight_requests") != std::string::npos);
        CHECK(t.http.max_inflight_requests == 1024);
    }
}

TEST_CASE("auth_token_file: a non-empty path without control characters") {
    settings s;
    CHECK_FALSE(apply_json(R"({"auth_token_file": "/etc/fencekeeper/auth-token"})", s));
    REQUIRE(s.auth_token_file);
    CHECK(*s.auth_token_file == "/etc/fencekeeper/auth-token");
    for (const char* bad :
         {R"({"auth_token_file": ""})", R"({"auth_token_file": 5})", R"({"auth_token_file": null})",
          R"({"auth_token_file": "a\nb"})", R"({"auth_token_file": "a\u0000b"})"}) {
        settings t;
        auto e = apply_json(bad, t);
        REQUIRE_MESSAGE(e, bad);
        CHECK(e->message.find("auth_token_file") != std::string::npos);
        CHECK_FALSE(t.auth_token_file);
    }
    settings t;
    auto e = apply_json(R"({"auth_token_file": ")" + std::string(4097, 'a') + R"("})", t);
    REQUIRE(e);
    CHECK(e->message.find("4096") != std::string::npos);
}

TEST_CASE("--auth-token-file: both forms, overrides the file, never read by the parser") {
    auto cl = ok({"--auth-token-file", "/nonexistent/token"});
    REQUIRE(cl.values.auth_token_file);
    CHECK(*cl.values.auth_token_file == "/nonexistent/token"); // read later, by proxy/auth
    cl = ok({"--auth-token-file=/t"});
    CHECK(*cl.values.auth_token_file == "/t");

    temp_config file{R"({"auth_token_file": "/from/file"})"};
    cl = ok({"--config", file.path});
    CHECK(*cl.values.auth_token_file == "/from/file");
    cl = ok({"--auth-token-file", "/from/flag", "--config", file.path});
    CHECK(*cl.values.auth_token_file == "/from/flag");

    CHECK(err({"--auth-token-file"}) == "--auth-token-file: missing value");
    CHECK(err({"--auth-token-file="}) == "--auth-token-file: missing value");
    CHECK(err({"--auth-token-file=a\x01"}).find("--auth-token-file: expected a file path") == 0);
}

TEST_CASE("--check-config: a switch, combined with the other flags and the file") {
    auto cl = ok({"--check-config"});
    CHECK(cl.check_config);
    temp_config file{R"({"log_level": "warn"})"};
    cl = ok({"--check-config", "--config", file.path, "--listen", "0.0.0.0:9"});
    CHECK(cl.check_config);
    CHECK(cl.values.log_level == fk::config::log_level::warn);
    CHECK(cl.values.listen_host == "0.0.0.0");
    CHECK(err({"--check-config=yes"}) == "--check-config: takes no value");
    // A bad file is still an error: that is what --check-config is for.
    temp_config bad{R"({"limits": {"max_bodyy": 1}})"};
    CHECK(err({"--check-config", "--config", bad.path}).find("unknown key 'limits.max_bodyy'") !=
          std::string::npos);
}

TEST_CASE("usage text lists the new flags") {
    const auto usage = usage_text();
    CHECK(usage.find("--auth-token-file FILE") != std::string::npos);
    CHECK(usage.find("--check-config") != std::string::npos);
}
