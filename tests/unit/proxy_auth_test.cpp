#include "proxy/auth.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using fk::proxy::authenticator;
using fk::proxy::constant_time_equal;
using fk::proxy::is_loopback_host;
using fk::proxy::load_token;
using fk::proxy::resolve_token;
using fk::proxy::token_from_env;

namespace {

// A file in a fresh temporary directory, removed with it.
struct temp_file {
    std::filesystem::path dir;
    std::filesystem::path path;
    explicit temp_file(const std::string& content) {
        std::string tmpl = (std::filesystem::temp_directory_path() / "fk_auth_XXXXXX").string();
        REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
        dir = tmpl;
        path = dir / "token";
        std::ofstream(path, std::ios::binary) << content;
    }
    ~temp_file() {
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
    }
};

} // namespace

TEST_CASE("load_token: the trimmed first line") {
    for (const char* content :
         {"s3cret", "s3cret\n", "  s3cret \r\n", "s3cret\nsecond line\n", "\ts3cret\t\n\n"}) {
        INFO("content: '" << content << "'");
        temp_file f(content);
        const auto r = load_token(f.path.string());
        CHECK(r.ok());
        REQUIRE(r.token);
        CHECK(*r.token == "s3cret");
    }
}

TEST_CASE("load_token: unusable files are errors that name the file") {
    for (const char* content : {"", "\n", "   \n", "\nsecond line is not used\n", "two words\n",
                                "tab\tinside", "caf\xc3\xa9"}) {
        INFO("content: '" << content << "'");
        temp_file f(content);
        const auto r = load_token(f.path.string());
        CHECK_FALSE(r.ok());
        CHECK_FALSE(r.token);
        CHECK(r.error.find(f.path.string()) != std::string::npos);
    }
    {
        temp_file f(std::string(5000, 'a'));
        const auto r = load_token(f.path.string());
        CHECK_FALSE(r.ok());
        CHECK(r.error.find("longer") != std::string::npos);
    }
    {
        // A long file is fine when the first line is short.
        temp_file f("tok\n" + std::string(10000, 'b'));
        const auto r = load_token(f.path.string());
        REQUIRE(r.token);
        CHECK(*r.token == "tok");
    }
    const auto missing = load_token("/nonexistent/fk/token");
    CHECK_FALSE(missing.ok());
    CHECK(missing.error.find("/nonexistent/fk/token") != std::string::npos);
    CHECK(missing.error.find("No such file") != std::string::npos);
    temp_file f("x");
    CHECK_FALSE(load_token(f.dir.string()).ok()); // a directory
}

TEST_CASE("token_from_env: unset is off, blank is an error, else trimmed") {
    const auto off = token_from_env(nullptr);
    CHECK(off.ok());
    CHECK_FALSE(off.token);
    CHECK_FALSE(token_from_env("").ok());
    CHECK_FALSE(token_from_env("  \n").ok());
    CHECK(token_from_env("").error.find("FENCEKEEPER_AUTH_TOKEN") != std::string::npos);
    CHECK(*token_from_env(" abc\n").token == "abc");
}

TEST_CASE("resolve_token: the file wins over the environment") {
    ::setenv("FENCEKEEPER_AUTH_TOKEN", "from-env", 1);
    temp_file f("from-file\n");
    CHECK(*resolve_token(f.path.string()).token == "from-file");
    CHECK(*resolve_token(std::nullopt).token == "from-env");
    // A broken file is an error; the environment is not a silent fallback.
    CHECK_FALSE(resolve_token(std::string("/nonexistent/token")).ok());
    ::unsetenv("FENCEKEEPER_AUTH_TOKEN");
    const auto off = resolve_token(std::nullopt);
    CHECK(off.ok());
    CHECK_FALSE(off.token);
}

TEST_CASE("constant_time_equal") {
    CHECK(constant_time_equal("", ""));
    CHECK(constant_time_equal("abc", "abc"));
    CHECK_FALSE(constant_time_equal("abd", "abc"));
    CHECK_FALSE(constant_time_equal("ab", "abc"));
    CHECK_FALSE(constant_time_equal("abcd", "abc"));
    CHECK_FALSE(constant_time_equal("", "abc"));
    CHECK_FALSE(constant_time_equal("abc", ""));
    CHECK_FALSE(constant_time_equal("aaa", "aab"));
    CHECK_FALSE(constant_time_equal("baa", "aaa"));
    // A prefix padded with a[0] must not compare equal.
    CHECK_FALSE(constant_time_equal("a", "aa"));
    CHECK_FALSE(constant_time_equal(std::string_view("a\0c", 3), "abc"));
}

TEST_CASE("authorized: off accepts all; on needs exactly Bearer <token>") {
    authenticator off;
    CHECK_FALSE(off.enabled());
    CHECK(off.authorized(""));
    CHECK(off.authorized("Bearer whatever"));

    authenticator a(std::string("s3cret"));
    CHECK(a.enabled());
    CHECK(a.authorized("Bearer s3cret"));
    CHECK(a.authorized("bearer s3cret"));
    CHECK(a.authorized("BEARER s3cret"));
    CHECK(a.authorized("Bearer   s3cret  "));
    CHECK(a.authorized(" Bearer s3cret"));
    for (const char* bad : {"", "Bearer", "Bearer ", "Bearer s3cre", "Bearer s3cret2",
                            "Bearer S3CRET", "Basic s3cret", "s3cret", "Bearers3cret",
                            "Bearer s3cret extra", "Token s3cret", "Bearer\ts3cret"}) {
        INFO("authorization: '" << bad << "'");
        CHECK_FALSE(a.authorized(bad));
    }
}

TEST_CASE("set_token swaps the token, or turns auth off, while others check") {
    authenticator a(std::string("one"));
    std::atomic<bool> stop{false};
    std::atomic<long> accepted{0};
    std::vector<std::thread> readers;
    for (int i = 0; i < 4; ++i) {
        readers.emplace_back([&] {
            while (!stop.load()) {
                // Only ever one of the two valid tokens, never garbage.
                const bool one = a.authorized("Bearer one");
                const bool two = a.authorized("Bearer two");
                CHECK_FALSE(a.authorized("Bearer three"));
                accepted += one || two;
            }
        });
    }
    for (int i = 0; i < 2000; ++i) {
        a.set_token(std::string(i % 2 ? "one" : "two"));
    }
    stop = true;
    for (auto& t : readers) {
        t.join();
    }
    a.set_token(std::string("two"));
    CHECK_FALSE(a.authorized("Bearer one"));
    CHECK(a.authorized("Bearer two"));
    a.set_token(std::nullopt);
    CHECK_FALSE(a.enabled());
    CHECK(a.authorized(""));
}

TEST_CASE("is_loopback_host") {
    for (const char* h : {"127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LocalHost",
                          "::ffff:127.0.0.1", "0:0:0:0:0:0:0:1"}) {
        INFO(h);
        CHECK(is_loopback_host(h));
    }
    for (const char* h : {"0.0.0.0", "::", "[::]", "10.0.0.1", "192.168.1.1", "example.com", "",
                          "128.0.0.1", "::2", "localhost.example.com"}) {
        INFO(h);
        CHECK_FALSE(is_loopback_host(h));
    }
}
