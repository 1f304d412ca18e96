#include "backends/file/detail/key_path.hpp"

#include "backends/file/detail/crc32c.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>

using namespace fk::store::detail;

TEST_CASE("crc32c matches the Castagnoli check value") {
    CHECK(crc32c(0, "123456789") == 0xE3069283u);
    CHECK(crc32c(0, "") == 0u);
    std::string long_text(1000, 'x');
    for (std::size_t i = 0; i < long_text.size(); ++i)
        long_text[i] = static_cast<char>(i * 7);
    // Incremental == one shot, across the 8-byte fast path and the tail.
    CHECK(crc32c(crc32c(0, long_text.substr(0, 13)), long_text.substr(13)) == crc32c(0, long_text));
}

TEST_CASE("key paths: segments become directories 'enc~', the last the file 'enc'") {
    auto a = object_path_for("a");
    REQUIRE(a);
    CHECK(a->dirs.empty());
    CHECK(a->file == "a");
    auto ab = object_path_for("a/b");
    REQUIRE(ab);
    CHECK(ab->dirs == std::vector<std::string>{"a~"});
    CHECK(ab->file == "b");
    CHECK(ab->dir_id() == "a~");
    auto deep = object_path_for("reports/2026/11-29.csv");
    CHECK(deep->dirs == std::vector<std::string>{"reports~", "2026~"});
    CHECK(deep->file == "11-29.csv");
}

TEST_CASE("key paths: every byte outside [A-Za-z0-9._-] is %XX, so '~' never survives") {
    CHECK(encode_segment("a~b") == "a%7Eb");
    CHECK(encode_segment("100%") == "100%25");
    CHECK(encode_segment("a b") == "a%20b");
    CHECK(encode_segment("\xC3\xA9t\xC3\xA9") == "%C3%A9t%C3%A9");
    CHECK(encode_segment("x~tmp~y") == "x%7Etmp%7Ey");
    CHECK(encode_segment("A-z_0.9") == "A-z_0.9");
    CHECK(object_path_for("..x")->file == "..x");
    // Validation rejects these, but the encoder still never yields them as names.
    CHECK(object_path_for("..")->file == "%2E%2E");
    CHECK(object_path_for(".")->file == "%2E");
    CHECK(object_path_for("../x")->dirs == std::vector<std::string>{"%2E%2E~"});
    CHECK_FALSE(object_path_for(""));
    CHECK_FALSE(object_path_for("a//b"));
    CHECK_FALSE(object_path_for("/a"));
    CHECK_FALSE(object_path_for("a/"));
}

TEST_CASE("key paths: long segments are chunked, never inside %XX, never '.' or '..'") {
    auto check_components = [](const object_path& p) {
        std::vector<std::string> all = p.dirs;
        all.push_back(p.file);
        for (const auto& c : all) {
            CHECK(!c.empty());
            CHECK(c.size() <= max_component_bytes + 2);
            CHECK(c != ".");
            CHECK(c != "..");
            CHECK(c.find('/') == std::string::npos);
            CHECK(c.find('\0') == std::string::npos);
            CHECK_FALSE(is_tmp_name(c));
        }
        CHECK(p.file.find('~') == std::string::npos);
    };
    std::string percent(1024, '%'); // 3072 encoded bytes
    auto p = object_path_for(percent);
    REQUIRE(p);
    check_components(*p);
    std::string joined;
    for (const auto& d : p->dirs) {
        CHECK(d.ends_with("~+"));
        joined += d.substr(0, d.size() - 2);
    }
    joined += p->file;
    CHECK(joined == encode_segment(percent));
    // The example of docs/file-store.md: a cut never splits a %XX, so a chunk holds 66 of
    // them (198 bytes): 15 directories of 198 + "~+" bytes, then a file of the last 102.
    CHECK(p->dirs.size() == 15);
    CHECK(std::all_of(p->dirs.begin(), p->dirs.end(),
                      [](const std::string& d) { return d.size() == 200; }));
    CHECK(p->file.size() == 102);

    std::string dots(201, '.'); // 200 dots in a chunk, then "." alone
    auto q = object_path_for(dots);
    REQUIRE(q);
    check_components(*q);
    CHECK(q->file == "%2E");

    std::string unicode;
    for (int i = 0; i < 341; ++i)
        unicode += "\xE2\x82\xAC"; // 1023 bytes of '€'
    check_components(*object_path_for(unicode));
    check_components(*object_path_for(std::string(1024, 'a')));
    std::string many;
    for (int i = 0; i < 512; ++i)
        many += i ? "/a" : "a";
    auto m = object_path_for(many);
    REQUIRE(m);
    CHECK(m->dirs.size() == 511);
    check_components(*m);
}

TEST_CASE("key paths: distinct keys never share a location") {
    std::vector<std::string> keys = {"a",   "a/b", "a~",  "a~/b", "a%7E", "a%7E/b", ".a",
                                     "a.",  "%2E", "x/.", "x/..", "%",    "%25",    "a b",
                                     "a+b", "~",   "~+",  "a~+",  "a~+/b"};
    std::set<std::pair<std::vector<std::string>, std::string>> seen;
    for (const auto& k : keys) {
        auto p = object_path_for(k);
        REQUIRE(p);
        CHECK_MESSAGE(seen.insert({p->dirs, p->file}).second, k);
    }
}

TEST_CASE("key paths: a body's location decodes back to its key, and nothing else does") {
    const std::vector<std::string> keys = {"a",
                                           "a/b",
                                           "a~",
                                           "a~/b",
                                           "100% \xC3\xA9",
                                           "reports/2026/11-29.csv",
                                           "..x",
                                           "..a/x",
                                           std::string(1024, '%'),
                                           std::string(450, 'z') + "/" + std::string(201, 'y')};
    std::string split_utf8 = "abcde"; // the first cut falls between the bytes of an é
    for (int i = 0; i < 70; ++i)
        split_utf8 += "\xC3\xA9";
    for (const auto& k : keys) {
        auto p = object_path_for(k);
        REQUIRE(p);
        CHECK_MESSAGE(key_for_object(p->dir_id(), p->file) == k, k);
    }
    auto split = object_path_for(split_utf8);
    REQUIRE(split);
    CHECK(split->dirs.size() == 2);
    CHECK(split->dirs[0].ends_with("%C3~+"));
    CHECK(key_for_object(split->dir_id(), split->file) == split_utf8);
    // Temp files, other spellings of a key, and names the encoder never writes.
    CHECK_FALSE(key_for_object("", "k~tmp~0123-4"));
    CHECK_FALSE(key_for_object("d~", "k~tmp~0123-4"));
    CHECK_FALSE(key_for_object("", "a%7e")); // lowercase hex
    CHECK_FALSE(key_for_object("", "a%41")); // "A" is written plain
    CHECK_FALSE(key_for_object("", "a%4"));  // cut %XX
    CHECK_FALSE(key_for_object("", "a b"));  // unencoded byte
    CHECK_FALSE(key_for_object("", ""));
    CHECK_FALSE(key_for_object("a", "b"));   // a directory without '~'
    CHECK_FALSE(key_for_object("a~+", "b")); // a short chunk: the encoder would not cut
    CHECK_FALSE(key_for_object("", "."));
    CHECK(key_for_object("", "%2E%2E") == std::string(".."));
    CHECK(key_for_object("x~/y~", "z") == std::string("x/y/z"));
}
