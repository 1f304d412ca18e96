#include "proxy/metrics.hpp"

#include "proxy/router.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

using namespace std::chrono_literals;
using fk::errc;
using fk::proxy::metrics;
using fk::proxy::route;
using fk::proxy::store_error;
using fk::proxy::store_op;
using fk::proxy::write_outcome;

namespace {

// One render(), read back as series text → value. The keys are the series as the exporter
// writes them: the name, then its labels in the exporter's fixed order, values unescaped
// (no label value in these tests needs escaping; the escaping test checks the text as
// written). Whether the whole is valid exposition format is checked by a Prometheus parser
// (prometheus_client) on the running binary's /metrics, in tests/integration/test_ops.py.
struct scraped {
    std::map<std::string, double, std::less<>> series;
    std::map<std::string, std::string, std::less<>> types; // from the # TYPE lines
    std::vector<std::string> order;                        // series in the order written

    using label_list = std::initializer_list<std::pair<std::string_view, std::string_view>>;
    static std::string key(std::string_view name, label_list labels) {
        std::string k(name);
        const char* sep = "{";
        for (const auto& [n, v] : labels) {
            k.append(sep).append(n).append("=\"").append(v).append("\"");
            sep = ",";
        }
        return labels.size() != 0 ? k + "}" : k;
    }
    double value(std::string_view name, label_list labels = {}) const {
        const auto it = series.find(key(name, labels));
        if (it == series.end()) {
            FAIL_CHECK("no series " << key(name, labels));
            return -1;
        }
        return it->second;
    }
    bool has_family(std::string_view name) const { return types.contains(name); }
    // How many series are named exactly `name`.
    std::size_t count(std::string_view name) const {
        std::size_t n = 0;
        for (const auto& [k, v] : series) {
            n += k == name ||
                 (k.starts_with(name) && k.size() > name.size() && k[name.size()] == '{');
        }
        return n;
    }
};

scraped read_series(const std::string& text) {
    scraped e;
    std::string_view rest = text;
    while (!rest.empty()) {
        const auto nl = rest.find('\n');
        REQUIRE(nl != std::string_view::npos); // every line ends with a newline
        const std::string_view line = rest.substr(0, nl);
        rest.remove_prefix(nl + 1);
        if (line.starts_with("# TYPE ")) {
            const auto body = line.substr(7);
            const auto sp = body.find(' ');
            e.types.emplace(std::string(body.substr(0, sp)), std::string(body.substr(sp + 1)));
            continue;
        }
        if (line.starts_with('#')) {
            continue;
        }
        const auto sp = line.rfind(' ');
        REQUIRE(sp != std::string_view::npos);
        const std::string k(line.substr(0, sp));
        const std::string v(line.substr(sp + 1));
        char* end = nullptr;
        const double value = std::strtod(v.c_str(), &end);
        CHECK_MESSAGE(*end == '\0', "bad value in: " << line);
        CHECK_MESSAGE(e.series.emplace(k, value).second, "series twice: " << k);
        e.order.push_back(k);
    }
    return e;
}

// What the exporter promises of every histogram series, even while observations race with
// render(): its buckets are cumulative and its +Inf bucket equals its _count.
void check_histograms(const scraped& e) {
    double previous = 0;
    std::string previous_series;
    for (const auto& k : e.order) {
        const auto b = k.find("_bucket{");
        const auto le = k.find("le=\"");
        if (b == std::string::npos || le == std::string::npos) {
            continue;
        }
        std::string labels = k.substr(b + 8, le - (b + 8)); // the labels before le, with ','
        const std::string series = k.substr(0, b) + "{" + labels;
        const double v = e.series.at(k);
        if (series == previous_series) {
            CHECK_MESSAGE(v >= previous, "buckets not cumulative at " << k);
        }
        previous = v;
        previous_series = series;
        if (k.ends_with("le=\"+Inf\"}")) {
            if (!labels.empty()) {
                labels.pop_back();
            }
            const std::string count =
                k.substr(0, b) + "_count" + (labels.empty() ? "" : "{" + labels + "}");
            REQUIRE_MESSAGE(e.series.contains(count), "no " << count);
            CHECK_MESSAGE(e.series.at(count) == v, "+Inf bucket != " << count);
        }
    }
}

scraped scrape(const metrics& m) {
    const std::string text = m.render();
    INFO(text);
    auto e = read_series(text);
    check_histograms(e);
    return e;
}

constexpr const char* req_dur = "fencekeeper_request_duration_seconds";
constexpr const char* store_dur = "fencekeeper_store_duration_seconds";

} // namespace

TEST_CASE("a fresh registry exports every family with zeroes and parses") {
    metrics m("1.2.3");
    const auto e = scrape(m);

    CHECK(e.types.at("fencekeeper_requests_total") == "counter");
    CHECK(e.types.at("fencekeeper_writes_total") == "counter");
    CHECK(e.types.at("fencekeeper_stale_token_gap") == "histogram");
    CHECK(e.types.at(req_dur) == "histogram");
    CHECK(e.types.at(store_dur) == "histogram");
    CHECK(e.types.at("fencekeeper_inflight_requests") == "gauge");
    CHECK(e.types.at("fencekeeper_open_connections") == "gauge");
    CHECK(e.types.at("fencekeeper_store_errors_total") == "counter");
    CHECK(e.types.at("fencekeeper_connections_rejected_total") == "counter");
    CHECK(e.types.at("fencekeeper_shed_requests_total") == "counter");
    CHECK(e.types.at("fencekeeper_lock_mismatch_total") == "counter");
    CHECK(e.types.at("fencekeeper_stale_floor_total") == "counter");
    CHECK(e.types.at("fencekeeper_build_info") == "gauge");

    // requests_total: only observed pairs, so none yet.
    CHECK(e.count("fencekeeper_requests_total") == 0);
    // Every write result and store error kind is there from the start.
    for (const char* r : {"applied", "stale", "precondition_failed", "error"}) {
        CHECK(e.value("fencekeeper_writes_total", {{"result", r}}) == 0);
    }
    for (const char* k : {"unavailable", "outcome_unknown", "internal"}) {
        CHECK(e.value("fencekeeper_store_errors_total", {{"kind", k}}) == 0);
    }
    for (const char* r : {"resource", "fence", "fences_list", "operation", "floors", "transactions",
                          "healthz", "readyz", "metrics", "not_found"}) {
        CHECK(e.value(std::string(req_dur) + "_count", {{"route", r}}) == 0);
        CHECK(e.count(std::string(req_dur) + "_bucket") == 10 * 15);
    }
    for (const char* op : {"put", "delete", "get", "fence_advance", "fence_read", "fence_list",
                           "operation", "floor_raise", "floor_list", "transaction"}) {
        CHECK(e.value(std::string(store_dur) + "_count", {{"op", op}}) == 0);
    }
    CHECK(e.count("fencekeeper_stale_token_gap_bucket") == 9);
    CHECK(e.value("fencekeeper_inflight_requests") == 0);
    CHECK(e.value("fencekeeper_open_connections") == 0);
    CHECK(e.value("fencekeeper_build_info", {{"version", "1.2.3"}}) == 1);
    // No probe, no gauge: absent is not the same as "not ready".
    CHECK_FALSE(e.has_family("fencekeeper_store_ready"));
}

TEST_CASE("the route label values are the router's route names") {
    metrics m;
    const auto e = scrape(m);
    std::size_t routes = 0;
    for (std::size_t i = 0; i < fk::proxy::route_count; ++i) {
        const std::string name(to_string(static_cast<route>(i)));
        INFO(name);
        CHECK(e.value(std::string(req_dur) + "_count", {{"route", name}}) == 0);
        ++routes;
    }
    CHECK(e.count(std::string(req_dur) + "_count") == routes);
}

TEST_CASE("requests: counted by route and code, durations in cumulative buckets") {
    metrics m;
    m.count_request(route::resource, 201, 300us);
    m.count_request(route::resource, 201, 500us); // bounds are inclusive (le)
    m.count_request(route::resource, 409, 3ms);
    m.count_request(route::resource, 418, 1ms); // not a known code: its class
    m.count_request(route::healthz, 200, 100us);
    m.count_request(route::fence, 200, 20s);      // beyond the last bound: +Inf only
    m.count_request(route::not_found, 999, -5ms); // nonsense status and duration
    const auto e = scrape(m);

    CHECK(e.value("fencekeeper_requests_total", {{"route", "resource"}, {"code", "201"}}) == 2);
    CHECK(e.value("fencekeeper_requests_total", {{"route", "resource"}, {"code", "409"}}) == 1);
    CHECK(e.value("fencekeeper_requests_total", {{"route", "resource"}, {"code", "4xx"}}) == 1);
    CHECK(e.value("fencekeeper_requests_total", {{"route", "healthz"}, {"code", "200"}}) == 1);
    CHECK(e.value("fencekeeper_requests_total", {{"route", "fence"}, {"code", "200"}}) == 1);
    CHECK(e.value("fencekeeper_requests_total", {{"route", "not_found"}, {"code", "5xx"}}) == 1);
    CHECK(e.count("fencekeeper_requests_total") == 6);

    const std::string b = std::string(req_dur) + "_bucket";
    auto bucket = [&](const char* r, const char* le) {
        return e.value(b, {{"route", r}, {"le", le}});
    };
    CHECK(bucket("resource", "0.0005") == 2);
    CHECK(bucket("resource", "0.001") == 3);
    CHECK(bucket("resource", "0.0025") == 3);
    CHECK(bucket("resource", "0.005") == 4);
    CHECK(bucket("resource", "10") == 4);
    CHECK(bucket("resource", "+Inf") == 4);
    CHECK(e.value(std::string(req_dur) + "_count", {{"route", "resource"}}) == 4);
    CHECK(e.value(std::string(req_dur) + "_sum", {{"route", "resource"}}) ==
          doctest::Approx(0.0048));
    CHECK(bucket("fence", "10") == 0);
    CHECK(bucket("fence", "+Inf") == 1);
    CHECK(e.value(std::string(req_dur) + "_sum", {{"route", "fence"}}) == doctest::Approx(20.0));
    CHECK(bucket("not_found", "0.0005") == 1); // a negative duration counts as zero
    CHECK(bucket("healthz", "0.0005") == 1);
}

TEST_CASE("writes: a scripted sequence of results, stale gaps and lock mismatches") {
    metrics m;
    m.count_write(errc::ok);
    m.count_write(errc::ok);
    m.count_write(write_outcome::applied);
    m.count_write(errc::stale_token);
    m.observe_stale_gap(10, 9);
    m.count_write(errc::stale_token);
    m.observe_stale_gap(1000, 1);
    m.count_stale_floor(); // the second stale write was refused by a fence floor
    m.count_write(errc::precondition_failed);
    m.count_write(errc::lock_mismatch);
    m.count_write(errc::unavailable);
    m.count_write(errc::outcome_unknown);
    const auto e = scrape(m);

    CHECK(e.value("fencekeeper_writes_total", {{"result", "applied"}}) == 3);
    CHECK(e.value("fencekeeper_writes_total", {{"result", "stale"}}) == 2);
    CHECK(e.value("fencekeeper_writes_total", {{"result", "precondition_failed"}}) == 1);
    CHECK(e.value("fencekeeper_writes_total", {{"result", "error"}}) == 3);
    CHECK(e.value("fencekeeper_lock_mismatch_total") == 1);
    CHECK(e.value("fencekeeper_stale_floor_total") == 1);

    const char* g = "fencekeeper_stale_token_gap_bucket";
    CHECK(e.value(g, {{"le", "1"}}) == 1);
    CHECK(e.value(g, {{"le", "2"}}) == 1);
    CHECK(e.value(g, {{"le", "100"}}) == 1);
    CHECK(e.value(g, {{"le", "1000"}}) == 2);
    CHECK(e.value(g, {{"le", "1000000"}}) == 2);
    CHECK(e.value(g, {{"le", "+Inf"}}) == 2);
    CHECK(e.value("fencekeeper_stale_token_gap_count") == 2);
    CHECK(e.value("fencekeeper_stale_token_gap_sum") == 1000);
}

TEST_CASE("stale gap: extremes land in the right buckets without overflow") {
    metrics m;
    m.observe_stale_gap(INT64_MAX, 0);
    m.observe_stale_gap(5, 7); // not stale: recorded as 0, never as a huge number
    m.observe_stale_gap(1'000'001, 1);
    const auto e = scrape(m);
    const char* g = "fencekeeper_stale_token_gap_bucket";
    CHECK(e.value(g, {{"le", "1"}}) == 1);
    CHECK(e.value(g, {{"le", "1000000"}}) == 2);
    CHECK(e.value(g, {{"le", "+Inf"}}) == 3);
    CHECK(e.value("fencekeeper_stale_token_gap_sum") ==
          doctest::Approx(static_cast<double>(INT64_MAX) + 1e6));
}

TEST_CASE("store: durations by op, errors by kind; client errors are not store errors") {
    metrics m;
    m.observe_store(store_op::put, 2ms, errc::ok);
    m.observe_store(store_op::put, 20s, errc::outcome_unknown);
    m.observe_store(store_op::get, 1ms, errc::not_found);
    m.observe_store(store_op::del, 1ms, errc::stale_token);
    m.observe_store(store_op::fence_read, 7ms, errc::unavailable);
    m.observe_store(store_op::operation, 3ms, errc::internal);
    m.observe_store(store_op::fence_list, 3ms);
    m.observe_store(store_op::floor_raise, 3ms, errc::stale_token);
    m.count_store_error(store_error::unavailable);
    const auto e = scrape(m);

    const std::string b = std::string(store_dur) + "_bucket";
    CHECK(e.value(b, {{"op", "put"}, {"le", "0.0025"}}) == 1);
    CHECK(e.value(b, {{"op", "put"}, {"le", "10"}}) == 1);
    CHECK(e.value(b, {{"op", "put"}, {"le", "+Inf"}}) == 2);
    CHECK(e.value(std::string(store_dur) + "_sum", {{"op", "put"}}) == doctest::Approx(20.002));
    CHECK(e.value(std::string(store_dur) + "_count", {{"op", "delete"}}) == 1);
    CHECK(e.value(std::string(store_dur) + "_count", {{"op", "get"}}) == 1);
    CHECK(e.value(std::string(store_dur) + "_count", {{"op", "fence_read"}}) == 1);
    CHECK(e.value(std::string(store_dur) + "_count", {{"op", "fence_list"}}) == 1);
    CHECK(e.value(std::string(store_dur) + "_count", {{"op", "floor_raise"}}) == 1);
    CHECK(e.value(std::string(store_dur) + "_count", {{"op", "fence_advance"}}) == 0);
    CHECK(e.value("fencekeeper_store_errors_total", {{"kind", "unavailable"}}) == 2);
    CHECK(e.value("fencekeeper_store_errors_total", {{"kind", "outcome_unknown"}}) == 1);
    CHECK(e.value("fencekeeper_store_errors_total", {{"kind", "internal"}}) == 1);
}

TEST_CASE("gauges, guards, rejections, sheds and the readiness probe") {
    metrics m("v");
    bool ready = false;
    m.set_store_ready_probe([&] { return ready; });
    {
        auto c1 = m.track_connection();
        auto c2 = m.track_connection();
        auto r1 = m.track_request();
        metrics::gauge_guard moved = std::move(r1); // the moved-from guard releases nothing
        m.count_connection_rejected();
        m.count_shed();
        m.count_shed();
        const auto e = scrape(m);
        CHECK(e.value("fencekeeper_open_connections") == 2);
        CHECK(e.value("fencekeeper_inflight_requests") == 1);
        CHECK(e.value("fencekeeper_connections_rejected_total") == 1);
        CHECK(e.value("fencekeeper_shed_requests_total") == 2);
        CHECK(e.value("fencekeeper_store_ready") == 0);
        c2.reset();
        c2.reset(); // idempotent
        CHECK(scrape(m).value("fencekeeper_open_connections") == 1);
    }
    ready = true;
    const auto e = scrape(m);
    CHECK(e.value("fencekeeper_open_connections") == 0);
    CHECK(e.value("fencekeeper_inflight_requests") == 0);
    CHECK(e.value("fencekeeper_store_ready") == 1);
}

TEST_CASE("batch sizes: absent without a store's stats, then one bucket per commit") {
    metrics m;
    CHECK_FALSE(scrape(m).has_family("fencekeeper_store_batch_size"));

    fk::store::commit_stats stats;
    m.set_batch_stats(&stats);
    auto e = scrape(m);
    CHECK(e.types.at("fencekeeper_store_batch_size") == "histogram");
    CHECK(e.count("fencekeeper_store_batch_size_bucket") == 12);
    CHECK(e.value("fencekeeper_store_batch_size_count") == 0);

    for (std::size_t n : {1, 2, 3, 16, 17, 64, 1024, 1025, 5000})
        stats.observe(n);
    e = scrape(m);
    const char* b = "fencekeeper_store_batch_size_bucket";
    CHECK(e.value(b, {{"le", "1"}}) == 1);
    CHECK(e.value(b, {{"le", "2"}}) == 2);
    CHECK(e.value(b, {{"le", "4"}}) == 3);
    CHECK(e.value(b, {{"le", "8"}}) == 3);
    CHECK(e.value(b, {{"le", "16"}}) == 4);
    CHECK(e.value(b, {{"le", "32"}}) == 5);
    CHECK(e.value(b, {{"le", "64"}}) == 6);
    CHECK(e.value(b, {{"le", "1024"}}) == 7);
    CHECK(e.value(b, {{"le", "+Inf"}}) == 9);
    CHECK(e.value("fencekeeper_store_batch_size_count") == 9);
    CHECK(e.value("fencekeeper_store_batch_size_sum") ==
          1 + 2 + 3 + 16 + 17 + 64 + 1024 + 1025 + 5000);
}

TEST_CASE("label values are escaped as the text format requires") {
    const std::string version = "a\"b\\c\nd";
    metrics m(version);
    const std::string text = m.render();
    CHECK(text.find("fencekeeper_build_info{version=\"a\\\"b\\\\c\\nd\"} 1\n") !=
          std::string::npos);
}

TEST_CASE("concurrent observations from many threads sum exactly") {
    metrics m;
    constexpr int threads = 8;
    constexpr int per_thread = 50'000;
    std::vector<std::thread> pool;
    std::vector<metrics::gauge_guard> guards(threads);
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
            for (int i = 0; i < per_thread; ++i) {
                m.count_request(route::resource, 200, 1ms);
                m.count_write(errc::stale_token);
                m.observe_stale_gap(3, 1);
                m.observe_store(store_op::put, 1ms, errc::unavailable);
                auto g = m.track_request();
            }
            // Opened here, closed on the main thread: gauges span shards.
            guards[t] = m.track_connection();
        });
    }
    for (auto& th : pool) {
        th.join();
    }
    const double n = double(threads) * per_thread;
    auto e = scrape(m);
    CHECK(e.value("fencekeeper_requests_total", {{"route", "resource"}, {"code", "200"}}) == n);
    CHECK(e.value(std::string(req_dur) + "_count", {{"route", "resource"}}) == n);
    CHECK(e.value(std::string(req_dur) + "_sum", {{"route", "resource"}}) ==
          doctest::Approx(n * 0.001));
    CHECK(e.value("fencekeeper_writes_total", {{"result", "stale"}}) == n);
    CHECK(e.value("fencekeeper_stale_token_gap_count") == n);
    CHECK(e.value("fencekeeper_stale_token_gap_sum") == 2 * n);
    CHECK(e.value("fencekeeper_store_errors_total", {{"kind", "unavailable"}}) == n);
    CHECK(e.value("fencekeeper_inflight_requests") == 0);
    CHECK(e.value("fencekeeper_open_connections") == threads);
    guards.clear();
    CHECK(scrape(m).value("fencekeeper_open_connections") == 0);
}

TEST_CASE("render can run concurrently with observations") {
    metrics m;
    std::atomic<bool> stop{false};
    std::thread writer([&] {
        while (!stop.load()) {
            m.count_request(route::fence, 200, 2ms);
            m.observe_store(store_op::fence_advance, 1ms);
        }
    });
    for (int i = 0; i < 50; ++i) {
        scrape(m); // reads every series and checks every histogram
    }
    stop = true;
    writer.join();
}
