#include "fence/names.hpp"

#include <doctest/doctest.h>

#include <string>

using fk::errc;
using namespace fk::fence;

TEST_CASE("percent decoding is strict") {
    CHECK(percent_decode("a%2Fb").value == "a/b");
    CHECK(percent_decode("%41%62").value == "Ab");
    CHECK(percent_decode("a+b").value == "a+b"); // '+' is not a space in paths
    CHECK(percent_decode("%e2%9c%93").value == "\xe2\x9c\x93");
    for (const char* bad : {"%zz", "a%2", "a%", "%", "%g0", "%0g", "%%", "%-1"}) {
        INFO(bad);
        CHECK(percent_decode(bad).error == errc::invalid_name);
    }
}

TEST_CASE("key validation") {
    for (const char* ok : {"a", "reports/2026-11-29.csv", "a/b/c", ".hidden", "a/.b", "...", "a..b",
                           "x/..y", "caf\xc3\xa9", "\xf0\x9f\x94\x92", "a b", "~", "%"}) {
        INFO(ok);
        CHECK(validate_key(ok) == errc::ok);
    }
    for (const char* bad : {"",
                            "/",
                            "/a",
                            "a/",
                            "a//b",
                            ".",
                            "..",
                            "a/./b",
                            "a/../b",
                            "../a",
                            "a/..",
                            "./a",
                            "a\x01",
                            "a\x1f",
                            "a\x7f",
                            "\t",
                            "a\nb",
                            "\xff",
                            "\xc3",
                            "\xc0\xaf",
                            "\xed\xa0\x80",
                            "\xf4\x90\x80\x80",
                            "\xe0\x80\xaf"}) {
        INFO(bad);
        CHECK(validate_key(bad) == errc::invalid_name);
    }
    CHECK(validate_key(std::string_view("a\0b", 3)) == errc::invalid_name);
    CHECK(validate_key(std::string(1024, 'k')) == errc::ok);
    CHECK(validate_key(std::string(1025, 'k')) == errc::invalid_name);
}

TEST_CASE("lock names may contain slashes and dots but no controls") {
    CHECK(validate_lock_name("jobs/daily") == errc::ok);
    CHECK(validate_lock_name("..") == errc::ok);
    CHECK(validate_lock_name("a//b") == errc::ok);
    CHECK(validate_lock_name("") == errc::invalid_name);
    CHECK(validate_lock_name("a\x7f") == errc::invalid_name);
    CHECK(validate_lock_name(std::string(1024, 'l')) == errc::ok);
    CHECK(validate_lock_name(std::string(1025, 'l')) == errc::invalid_name);
}

TEST_CASE("names from the path are decoded, then validated") {
    CHECK(key_from_path("a%2Fb").value == "a/b");
    CHECK(key_from_path("a%2F..%2Fb").error == errc::invalid_name);
    CHECK(key_from_path("%2e%2e").error == errc::invalid_name);
    CHECK(key_from_path("a%00").error == errc::invalid_name);
    CHECK(key_from_path("a%zz").error == errc::invalid_name);
    CHECK(key_from_path("%ff").error == errc::invalid_name);
    CHECK(lock_from_path("jobs%2Fdaily").value == "jobs/daily");
    CHECK(lock_from_path("a%2").error == errc::invalid_name);
    CHECK(lock_from_header("a%2Fb").value == "a%2Fb"); // taken literally
    CHECK(lock_from_header("").error == errc::invalid_name);
    CHECK(lock_from_header("a\x01").error == errc::invalid_name);
}
