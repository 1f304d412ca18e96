#include "fence/rfc3339.hpp"

#include <doctest/doctest.h>

using fk::fence::append_rfc3339_ms;
using fk::fence::format_rfc3339_ms;

TEST_CASE("rfc3339: UTC with milliseconds") {
    CHECK(format_rfc3339_ms(0) == "1970-01-01T00:00:00.000Z");
    CHECK(format_rfc3339_ms(1'795'946'400'123) == "2026-11-29T10:00:00.123Z");
    CHECK(format_rfc3339_ms(951'782'400'007) == "2000-02-29T00:00:00.007Z");
    CHECK(format_rfc3339_ms(-1) == "1969-12-31T23:59:59.999Z");
    CHECK(format_rfc3339_ms(-1000) == "1969-12-31T23:59:59.000Z");
    CHECK(format_rfc3339_ms(253'402'300'799'999) == "9999-12-31T23:59:59.999Z");
    CHECK(format_rfc3339_ms(-62'167'219'200'000) == "0000-01-01T00:00:00.000Z");
}

TEST_CASE("rfc3339: appends") {
    std::string s = "ts=";
    append_rfc3339_ms(s, 7);
    CHECK(s == "ts=1970-01-01T00:00:00.007Z");
}
