#include "backends/file/detail/legacy_journal.hpp"

#include "backends/file/detail/crc32c.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <string>

using namespace fk::store::detail;

// --- the 0.1 journal format (moved here from file_store_layout_test.cpp) ---

TEST_CASE("legacy journal records round-trip, with hostile field bytes percent-encoded") {
    legacy::record p = legacy::put_record("k e/y%\n\x7F", "lock one", 42, 7, 1700000000000);
    p.size = 12;
    p.body_crc = 0xDEADBEEF;
    p.tmp = "y~tmp~1";
    p.content_type = ""; // an empty last field survives
    std::string text;
    legacy::append_record(text, legacy::header_record(3));
    legacy::append_record(text, p);
    legacy::append_record(text, legacy::fence_record("L", 9223372036854775807, 5));
    legacy::append_record(text, legacy::del_record("k", "L", 0, 3, 6));
    CHECK(std::count(text.begin(), text.end(), '\n') == 4);
    auto parsed = legacy::parse_journal(text);
    CHECK_FALSE(parsed.damaged);
    CHECK(parsed.valid_bytes == text.size());
    REQUIRE(parsed.records.size() == 4);
    CHECK(parsed.records[0].type == legacy::record_type::verified);
    CHECK(parsed.records[0].count == 3);
    const legacy::record& q = parsed.records[1];
    CHECK(q.type == legacy::record_type::put);
    CHECK(q.key == p.key);
    CHECK(q.lock == p.lock);
    CHECK(q.token == 42);
    CHECK(q.version == 7);
    CHECK(q.ms == 1700000000000);
    CHECK(q.size == 12);
    CHECK(q.body_crc == 0xDEADBEEF);
    CHECK(q.tmp == "y~tmp~1");
    CHECK(q.content_type.empty());
    CHECK_FALSE(q.body); // no body field: none journaled
    CHECK(parsed.records[2].token == 9223372036854775807);
    CHECK(parsed.records[3].type == legacy::record_type::del);
    CHECK(legacy::encode_field("a b%c") == "a%20b%25c");
    CHECK(legacy::decode_field("a%20b%25c") == "a b%c");
    CHECK_FALSE(legacy::decode_field("a%2"));
    CHECK_FALSE(legacy::decode_field("a%zz"));
}

TEST_CASE("legacy journal: a put record can carry its body, which must match its size and CRC") {
    auto record_with = [](std::string body, std::uint64_t size, std::uint32_t crc) {
        legacy::record p = legacy::put_record("k", "L", 1, 1, 5);
        p.size = size;
        p.body_crc = crc;
        p.content_type = "application/octet-stream";
        p.body = std::move(body);
        std::string text;
        legacy::append_record(text, p);
        return text;
    };
    for (const std::string& body :
         {std::string(), std::string("plain"), std::string("sp ace%\n\0\x7F\xFF", 11)}) {
        CAPTURE(body);
        auto parsed = legacy::parse_journal(record_with(body, body.size(), crc32c(0, body)));
        CHECK_FALSE(parsed.damaged);
        REQUIRE(parsed.records.size() == 1);
        REQUIRE(parsed.records[0].body);
        CHECK(*parsed.records[0].body == body);
        CHECK(parsed.records[0].content_type == "application/octet-stream");
    }
    // A record whose body disagrees with its own size or CRC is not intact.
    CHECK(legacy::parse_journal(record_with("abc", 4, crc32c(0, "abc"))).damaged);
    CHECK(legacy::parse_journal(record_with("abc", 3, crc32c(0, "abd"))).damaged);
}

TEST_CASE("legacy journal: a torn or corrupt tail stops replay; intact records after damage are "
          "flagged") {
    std::string good;
    legacy::append_record(good, legacy::fence_record("a", 1, 1));
    legacy::append_record(good, legacy::fence_record("b", 2, 2));
    std::string third;
    legacy::append_record(third, legacy::fence_record("c", 3, 3));

    SUBCASE("short last line") {
        auto parsed = legacy::parse_journal(good + third.substr(0, 10));
        CHECK(parsed.records.size() == 2);
        CHECK(parsed.valid_bytes == good.size());
        CHECK(parsed.damaged);
        CHECK_FALSE(parsed.intact_after_damage);
    }
    SUBCASE("zeros after the last record (power loss after the size grew)") {
        auto parsed = legacy::parse_journal(good + std::string(4096, '\0'));
        CHECK(parsed.records.size() == 2);
        CHECK(parsed.damaged);
        CHECK_FALSE(parsed.intact_after_damage);
    }
    SUBCASE("flipped bit in the last line") {
        std::string bad = third;
        bad[12] ^= 1;
        auto parsed = legacy::parse_journal(good + bad);
        CHECK(parsed.records.size() == 2);
        CHECK(parsed.damaged);
        CHECK_FALSE(parsed.intact_after_damage);
    }
    SUBCASE("damage in the middle") {
        std::string bad = good;
        bad[3] ^= 1;
        auto parsed = legacy::parse_journal(bad + third);
        CHECK(parsed.records.empty());
        CHECK(parsed.valid_bytes == 0);
        CHECK(parsed.intact_after_damage);
    }
}
