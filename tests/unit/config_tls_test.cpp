#include "config/parse.hpp"
#include "tests/support/config_file.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <variant>
#include <vector>

// The tls.* keys, --tls-cert / --tls-key and what they must say together. The files
// themselves are read by the proxy (proxy/tls.hpp), not here: these paths need not exist.

using namespace fk::config;
using namespace std::chrono_literals;

namespace {

std::variant<command_line, parse_error> parse(const std::vector<std::string>& args) {
    return parse_command_line(args);
}

std::string err(const std::vector<std::string>& args) {
    auto r = parse(args);
    if (auto* e = std::get_if<parse_error>(&r))
        return e->message;
    FAIL_CHECK("expected an error");
    return {};
}

settings ok(const std::vector<std::string>& args) {
    auto r = parse(args);
    if (auto* e = std::get_if<parse_error>(&r)) {
        FAIL_CHECK("unexpected error: " << e->message);
        return {};
    }
    return std::get<command_line>(r).values;
}

bool contains(const std::string& haystack, std::string_view needle) {
    return haystack.find(needle) != std::string::npos;
}

// This file's config files.
struct config_file : fk_test::config_file {
    explicit config_file(std::string_view content) : fk_test::config_file("tls", content) {}
};

} // namespace

TEST_CASE("TLS is off by default, TLS 1.2 and a 10 s handshake when on") {
    const settings s;
    CHECK_FALSE(s.tls.enabled());
    CHECK(s.tls.min_version == tls_version::v1_2);
    CHECK(s.http.handshake_timeout == 10s);
    CHECK_FALSE(ok({}).tls.enabled());
}

TEST_CASE("--tls-cert and --tls-key turn TLS on together") {
    auto s = ok({"--tls-cert", "/etc/fk/c.pem", "--tls-key=/etc/fk/k.pem"});
    CHECK(s.tls.enabled());
    CHECK(s.tls.cert_file == "/etc/fk/c.pem");
    CHECK(s.tls.key_file == "/etc/fk/k.pem");
    CHECK_FALSE(s.tls.client_ca_file);

    CHECK(contains(err({"--tls-cert", "c.pem"}), "tls.key_file (--tls-key) is not"));
    CHECK(contains(err({"--tls-key", "k.pem"}), "tls.cert_file (--tls-cert) is not"));
    CHECK(contains(err({"--tls-cert", ""}), "--tls-cert: missing value"));
    CHECK(
        contains(err({"--tls-cert=a\x01", "--tls-key", "k"}), "--tls-cert: expected a file path"));
}

TEST_CASE("the tls section of the config file, and flags over it") {
    config_file f(R"({"tls": {"cert_file": "c.pem", "key_file": "k.pem",
                              "client_ca_file": "ca.pem", "min_version": "1.3"},
                      "limits": {"handshake_timeout_ms": 250}})");
    auto s = ok({"--config", f.path.string()});
    CHECK(s.tls.cert_file == "c.pem");
    CHECK(s.tls.key_file == "k.pem");
    CHECK(s.tls.client_ca_file == "ca.pem");
    CHECK(s.tls.min_version == tls_version::v1_3);
    CHECK(s.http.handshake_timeout == 250ms);

    // The flags override the file's pair.
    s = ok({"--config", f.path.string(), "--tls-cert", "other.pem", "--tls-key", "other.key"});
    CHECK(s.tls.cert_file == "other.pem");
    CHECK(s.tls.key_file == "other.key");

    // A key in the file completes a certificate on the command line.
    config_file key_only(R"({"tls": {"key_file": "k.pem"}})");
    CHECK(ok({"--config", key_only.path.string(), "--tls-cert", "c.pem"}).tls.enabled());
}

TEST_CASE("tls values and combinations that are refused") {
    settings s;
    CHECK(apply_json(R"({"tls": {"min_version": "1.1"}})", s)->message ==
          "tls.min_version: expected \"1.2\" or \"1.3\", got '1.1'");
    CHECK(contains(apply_json(R"({"tls": {"min_version": 1.3}})", s)->message,
                   "tls.min_version: expected a string"));
    CHECK(apply_json(R"({"tls": {"ciphers": "x"}})", s)->message == "unknown key 'tls.ciphers'");
    CHECK(contains(apply_json(R"({"tls": {"cert_file": ""}})", s)->message,
                   "tls.cert_file: expected a file path"));
    CHECK(contains(apply_json(R"({"limits": {"handshake_timeout_ms": 0}})", s)->message,
                   "limits.handshake_timeout_ms: expected an integer between 1 and"));
    CHECK_FALSE(s.tls.enabled()); // failed documents changed nothing

    config_file ca_only(R"({"tls": {"client_ca_file": "ca.pem"}})");
    CHECK(contains(err({"--config", ca_only.path.string()}), "tls.client_ca_file needs"));
    config_file cert_only(R"({"tls": {"cert_file": "c.pem"}})");
    CHECK(contains(err({"--config", cert_only.path.string()}), "tls.key_file"));
}
