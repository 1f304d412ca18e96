// The count behind idempotency.max_records_per_client / max_bytes_per_client
// (backends/idem_quota.hpp): scans plus what this process recorded since, never less than
// the truth for one process, and the Retry-After estimate.
#include "backends/idem_quota.hpp"

#include <doctest/doctest.h>

using namespace fk;
using namespace fk::store;
using clock_type = idem_usage::clock;

namespace {

idem_usage_result scan_of(std::vector<idem_usage_row> rows) {
    idem_usage_result r;
    r.scopes = std::move(rows);
    return r;
}

constexpr std::int64_t now_ms = 1'000'000'000;

} // namespace

TEST_CASE("a scope is full at either bound, and only then") {
    idem_usage u{{3, 1000, std::chrono::seconds(60)}};
    CHECK_FALSE(u.full("a", now_ms));
    u.recorded("a", 100, now_ms);
    u.recorded("a", 100, now_ms);
    CHECK_FALSE(u.full("a", now_ms));
    u.recorded("a", 100, now_ms);
    CHECK(u.full("a", now_ms)); // 3 records
    CHECK_FALSE(u.full("b", now_ms));
    u.recorded("b", 999, now_ms);
    CHECK_FALSE(u.full("b", now_ms));
    u.recorded("b", 1, now_ms);
    CHECK(u.full("b", now_ms)); // 1000 bytes
    CHECK_FALSE(u.full("", now_ms));

    idem_usage unbounded_count{{0, 1000, std::chrono::seconds(60)}};
    for (int i = 0; i < 100; ++i)
        unbounded_count.recorded("a", 1, now_ms);
    CHECK_FALSE(unbounded_count.full("a", now_ms));
}

TEST_CASE("a scan replaces what it saw; records made while it ran are kept") {
    idem_usage u{{10, 0, std::chrono::seconds(60)}};
    const auto t0 = clock_type::now();
    u.recorded("a", 1, now_ms); // before the scan: the scan sees it
    REQUIRE(u.begin_scan_if_due(t0));
    CHECK_FALSE(u.begin_scan_if_due(t0)); // one at a time
    u.recorded("a", 1, now_ms);           // while it runs: it may or may not see it
    u.end_scan(scan_of({{"a", 5, 500, now_ms - 1000}, {"c", 2, 200, now_ms}}));
    CHECK(u.of("a").records == 6); // 5 seen + the one recorded while it ran
    CHECK(u.of("c").records == 2);
    CHECK(u.of("a").bytes == 501);

    // The next scan, a period later, sees the record made during the first one: it is
    // counted once again.
    CHECK_FALSE(u.begin_scan_if_due(t0 + std::chrono::milliseconds(500)));
    REQUIRE(u.begin_scan_if_due(t0 + u.scan_period()));
    u.end_scan(scan_of({{"a", 6, 600, now_ms - 1000}}));
    CHECK(u.of("a").records == 6);
    CHECK(u.of("c").records == 0); // expired: gone from the scan, gone from the count
}

TEST_CASE("a failed scan keeps the counts") {
    idem_usage u{{2, 0, std::chrono::seconds(60)}};
    u.recorded("a", 1, now_ms);
    u.recorded("a", 1, now_ms);
    REQUIRE(u.begin_scan_if_due(clock_type::now()));
    idem_usage_result failed;
    failed.error = errc::unavailable;
    u.end_scan(failed);
    CHECK_FALSE(u.counted_once());
    CHECK(u.full("a", now_ms));
}

TEST_CASE("Retry-After: until the oldest record expires, plus a period") {
    idem_usage u{{1, 0, std::chrono::seconds(60)}};
    REQUIRE(u.begin_scan_if_due(clock_type::now()));
    u.end_scan(scan_of({{"a", 1, 100, now_ms - 20'000}}));
    CHECK(u.counted_once());
    auto wait = u.full("a", now_ms);
    REQUIRE(wait);
    // 40 s left of 60, plus the 10 s period.
    CHECK(wait->count() == 50);
    // Long expired (a scan not yet repeated): at least the period, never 0.
    auto later = u.full("a", now_ms + 3'600'000);
    REQUIRE(later);
    CHECK(later->count() == 10);
    // Short retentions scan at half of it, at least every second.
    idem_usage short_lived{{1, 0, std::chrono::seconds(1)}};
    CHECK(short_lived.scan_period() == std::chrono::milliseconds(1000));
    idem_usage four{{1, 0, std::chrono::seconds(4)}};
    CHECK(four.scan_period() == std::chrono::milliseconds(2000));
}
