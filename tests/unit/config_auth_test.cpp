#include "config/parse.hpp"
#include "tests/support/config_file.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <variant>
#include <vector>

// auth.clients (docs/configuration.md, "`auth`"): the shape of each client and what the
// list must say together with the other auth and TLS settings. Token files are read by the
// proxy (proxy/auth.hpp, load_clients), not here: these paths need not exist.

using namespace fk::config;

namespace {

// This file's config files.
struct config_file : fk_test::config_file {
    explicit config_file(std::string_view content) : fk_test::config_file("auth", content) {}
};

std::variant<command_line, parse_error> parse_json(std::string_view json,
                                                   std::vector<std::string> flags = {}) {
    config_file f(json);
    std::vector<std::string> args{"--config", f.path.string()};
    args.insert(args.end(), flags.begin(), flags.end());
    return parse_command_line(args);
}

std::string err(std::string_view json, std::vector<std::string> flags = {}) {
    auto r = parse_json(json, std::move(flags));
    if (auto* e = std::get_if<parse_error>(&r))
        return e->message;
    FAIL_CHECK("expected an error for " << json);
    return {};
}

settings ok(std::string_view json) {
    auto r = parse_json(json);
    if (auto* e = std::get_if<parse_error>(&r)) {
        FAIL_CHECK("unexpected error: " << e->message);
        return {};
    }
    return std::get<command_line>(r).values;
}

bool contains(const std::string& haystack, std::string_view needle) {
    return haystack.find(needle) != std::string::npos;
}

} // namespace

TEST_CASE("auth.clients: a full list") {
    const auto s = ok(R"({"tls": {"cert_file": "c", "key_file": "k", "client_ca_file": "ca"},
        "auth": {"clients": [
          {"name": "alpha", "token_file": "/run/alpha", "write_prefixes": ["a/", ""],
           "read_prefixes": ["shared/"], "metrics": true},
          {"name": "ops.1", "tls_identity": "ops.example", "admin": true}]}})");
    REQUIRE(s.auth_clients.size() == 2);
    const auto& a = s.auth_clients[0];
    CHECK(a.name == "alpha");
    CHECK(a.token_file == std::optional<std::string>{"/run/alpha"});
    CHECK_FALSE(a.tls_identity);
    CHECK(a.write_prefixes == std::vector<std::string>{"a/", ""});
    CHECK(a.read_prefixes == std::vector<std::string>{"shared/"});
    CHECK(a.metrics);
    CHECK_FALSE(a.admin);
    const auto& o = s.auth_clients[1];
    CHECK(o.tls_identity == std::optional<std::string>{"ops.example"});
    CHECK(o.write_prefixes.empty()); // nothing: the default
    CHECK(o.read_prefixes.empty());
    CHECK(o.admin);
    CHECK_FALSE(o.metrics);
}

TEST_CASE("auth.clients: absent is no scoped clients") {
    CHECK(ok("{}").auth_clients.empty());
    CHECK(ok(R"({"auth": {}})").auth_clients.empty());
}

TEST_CASE("auth.clients: each client's shape") {
    CHECK(contains(err(R"({"auth": {"clients": {}}})"), "expected an array"));
    CHECK(contains(err(R"({"auth": {"clients": []}})"), "at least one client"));
    CHECK(contains(err(R"({"auth": {"clients": [1]}})"), "auth.clients[0]: expected an object"));
    CHECK(contains(err(R"({"auth": {"clients": [{"token_file": "t"}]}})"), "name"));
    CHECK(contains(err(R"({"auth": {"clients": [{"name": "a b", "token_file": "t"}]}})"),
                   "auth.clients[0].name"));
    CHECK(contains(err(R"({"auth": {"clients": [{"name": "a"}]}})"), "exactly one of"));
    CHECK(contains(err(R"({"tls": {"cert_file": "c", "key_file": "k", "client_ca_file": "ca"},
                           "auth": {"clients": [{"name": "a", "token_file": "t",
                                                 "tls_identity": "x"}]}})"),
                   "exactly one of"));
    CHECK(contains(err(R"({"auth": {"clients": [{"name": "a", "token_file": ""}]}})"),
                   "auth.clients[0].token_file"));
    CHECK(contains(err(R"({"auth": {"clients": [{"name": "a", "token_file": "t",
                                                 "write_prefixes": "a/"}]}})"),
                   "write_prefixes: expected an array"));
    CHECK(contains(err(R"({"auth": {"clients": [{"name": "a", "token_file": "t",
                                                 "read_prefixes": [1]}]}})"),
                   "read_prefixes[]: expected a string"));
    CHECK(contains(err(R"({"auth": {"clients": [{"name": "a", "token_file": "t",
                                                 "write_prefixes": ["a\u0001"]}]}})"),
                   "not a valid name prefix"));
    CHECK(contains(err(R"({"auth": {"clients": [{"name": "a", "token_file": "t",
                                                 "metrics": "yes"}]}})"),
                   "metrics: expected true or false"));
    CHECK(contains(err(R"({"auth": {"clients": [{"name": "a", "token_file": "t",
                                                 "prefixes": []}]}})"),
                   "unknown key 'auth.clients[0].prefixes'"));
    CHECK(contains(err(R"({"auth": {"users": []}})"), "unknown key 'auth.users'"));
}

TEST_CASE("auth.clients: names, identities and token files are each one client's") {
    CHECK(contains(err(R"({"auth": {"clients": [{"name": "a", "token_file": "t1"},
                                                {"name": "a", "token_file": "t2"}]}})"),
                   "used twice"));
    CHECK(contains(err(R"({"auth": {"clients": [{"name": "a", "token_file": "t"},
                                                {"name": "b", "token_file": "t"}]}})"),
                   "given to two clients"));
    CHECK(contains(err(R"({"tls": {"cert_file": "c", "key_file": "k", "client_ca_file": "ca"},
                           "auth": {"clients": [{"name": "a", "tls_identity": "x"},
                                                {"name": "b", "tls_identity": "x"}]}})"),
                   "given to two clients"));
}

TEST_CASE("auth.clients: not with the single token; tls_identity needs mTLS") {
    CHECK(contains(err(R"({"auth_token_file": "t",
                           "auth": {"clients": [{"name": "a", "token_file": "u"}]}})"),
                   "cannot be combined"));
    CHECK(contains(err(R"({"auth": {"clients": [{"name": "a", "token_file": "u"}]}})",
                       {"--auth-token-file", "t"}),
                   "cannot be combined"));
    CHECK(contains(err(R"({"auth": {"clients": [{"name": "a", "tls_identity": "x"}]}})"),
                   "needs mTLS"));
    CHECK(contains(err(R"({"tls": {"cert_file": "c", "key_file": "k"},
                           "auth": {"clients": [{"name": "a", "tls_identity": "x"}]}})"),
                   "needs mTLS"));
}
