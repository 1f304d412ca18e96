#include "backends/postgres/detail/batch_queue.hpp"

#include "backends/postgres/result.hpp"
#include "backends/postgres/sql.hpp"

#include <doctest/doctest.h>

#include <memory>
#include <string>

using namespace fk::store::pg;
using fk::errc;

namespace {

// ---- batch statement ----

std::size_t pos(const std::string& s, std::string_view what) {
    const auto p = s.find(what);
    INFO(what);
    CHECK(p != std::string::npos);
    return p;
}

// ---- binary arrays ----

std::uint32_t be32_at(const std::string& s, std::size_t at) {
    std::uint32_t v = 0;
    for (std::size_t i = 0; i < 4; ++i)
        v = (v << 8) | static_cast<unsigned char>(s[at + i]);
    return v;
}

// Decodes a one-dimensional binary array into its elements.
std::vector<std::string> decode_array(const std::string& a, unsigned elem_oid) {
    REQUIRE(a.size() >= 20);
    CHECK(be32_at(a, 0) == 1);
    CHECK(be32_at(a, 4) == 0);
    CHECK(be32_at(a, 8) == elem_oid);
    const auto n = be32_at(a, 12);
    CHECK(be32_at(a, 16) == 1);
    std::vector<std::string> out;
    std::size_t at = 20;
    for (std::uint32_t i = 0; i < n; ++i) {
        REQUIRE(at + 4 <= a.size());
        const auto len = be32_at(a, at);
        at += 4;
        REQUIRE(at + len <= a.size());
        out.push_back(a.substr(at, len));
        at += len;
    }
    CHECK(at == a.size());
    return out;
}

// ---- result tables ----

result_table batch_table(std::vector<std::vector<std::optional<std::string>>> rows) {
    result_table t;
    t.st = result_table::status::tuples_ok;
    // Rows given with nine cells leave the record columns NULL (no record answered).
    for (const char* c :
         {"n", "mismatch", "pre_failed", "key_lock", "applied", "version", "created", "seen_fence",
          "unwritten", "rec_same", "rec_created", "rec_version", "rec_token"})
        t.columns.push_back({c, 0});
    t.rows = std::move(rows);
    return t;
}

result_table ok(result_table::status st = result_table::status::command_ok) {
    result_table t;
    t.st = st;
    return t;
}

result_table server_error(std::string sqlstate) {
    result_table t;
    t.st = result_table::status::error;
    t.sqlstate = std::move(sqlstate);
    t.message = "boom";
    return t;
}

exec_outcome pipeline(std::vector<result_table> results) {
    exec_outcome o;
    o.results = std::move(results);
    return o;
}

using cell = std::optional<std::string>;
const cell null = std::nullopt;

// ---- queue fakes ----

struct fake_write {
    std::string key, lock;
    bool alone = false;
};
using fake_ptr = std::shared_ptr<fake_write>;
fake_ptr w(std::string key, std::string lock) {
    return std::make_shared<fake_write>(fake_write{std::move(key), std::move(lock)});
}

} // namespace

TEST_CASE("batch statement: key rows locked in key order, fences in lock order, then new keys") {
    for (const auto shape : {sql::batch_shape::plain, sql::batch_shape::keyed}) {
        CAPTURE(static_cast<int>(shape));
        const auto s = sql::write_batch_sql("fk", shape);
        CHECK(s.rfind("WITH i AS MATERIALIZED", 0) == 0);
        CHECK(s.find(';') == std::string::npos);
        const auto keys = pos(s, "ORDER BY r.key COLLATE \"C\" FOR UPDATE");
        const auto fences = pos(s, "INSERT INTO \"fk\".fences AS fe");
        const auto fence_order = pos(s, "ORDER BY c.lock COLLATE \"C\"");
        const auto data = pos(s, "UPDATE \"fk\".resources r SET");
        const auto creates = pos(s, "INSERT INTO \"fk\".resources AS r");
        const auto create_order = pos(s, "ORDER BY u.key COLLATE \"C\"");
        CHECK(keys < fences);
        CHECK(fences < fence_order);
        CHECK(fence_order < data);
        CHECK(data < creates);
        CHECK(creates < create_order);
        // Each row's fence step depends on that row's own checks only (and the floor over
        // its lock).
        pos(s,
            "WHERE NOT c.mismatch AND NOT c.pre_failed AND NOT c.answered AND NOT c.below_floor\n");
        pos(s, "WHERE fe.token <= EXCLUDED.token");
        // Data only for rows whose fence step returned a row; updates only of locked rows,
        // inserts only of absent keys, never over a row created meanwhile.
        pos(s, "FROM c JOIN f ON f.lock = c.lock");
        pos(s, "FROM u WHERE NOT u.absent AND r.key = u.key");
        pos(s, "FROM u WHERE u.absent\n");
        CHECK(pos(s, "ON CONFLICT (key) DO NOTHING") > create_order);
        // No placeholder rows any more; results in input order; a fenced row left unwritten
        // (a create race) rolls the batch back with the retry state.
        CHECK(s.find("version = 0") == std::string::npos);
        CHECK(s.find("DELETE") == std::string::npos);
        pos(s, "WITH ORDINALITY");
        CHECK(s.ends_with("\nORDER BY c.n"));
        pos(s, "AND w.n IS NULL AND v.key IS NULL");
        pos(s, "fk_raise('FKR01'");
        const bool keyed = shape == sql::batch_shape::keyed;
        CHECK((s.find("$12::bytea[]") != std::string::npos) == keyed);
        CHECK((s.find("$13::bigint") != std::string::npos) == keyed);
        CHECK(s.find("$9::boolean[]") != std::string::npos);
        CHECK((s.find("$10") == std::string::npos) == !keyed);
        CHECK(s.find("$14") == std::string::npos);
        // The floors are read once per batch in both shapes, and matched to the rows by one
        // join (no sort per row).
        pos(s, "SELECT fl.prefix, fl.token FROM \"fk\".floors fl ORDER BY fl.prefix");
        pos(s, "SELECT DISTINCT ON (i.n) i.n, h.prefix, h.token\n"
               "  FROM i JOIN h ON starts_with(i.lock, h.prefix)\n"
               "  ORDER BY i.n, h.token DESC, octet_length(h.prefix) DESC");
        pos(s, "LEFT JOIN hf ON hf.n = i.n");
        pos(s, "coalesce(x.token < x.floor_token, false) AS below_floor");
        bool batch = false;
        const char* name = keyed ? sql::name::write_batch_keyed : sql::name::write_batch;
        for (const auto& st : sql::prepared_statements("fk"))
            batch |= std::string(st.name) == name && st.nparams == (keyed ? 13 : 9);
        CHECK(batch);
    }
}

TEST_CASE("batch transaction plans index lookups, for itself only") {
    CHECK(sql::batch_begin_sql().find("set_config('enable_seqscan', 'off', true)") !=
          std::string::npos);
    CHECK(sql::batch_begin_sql().find(
              "set_config('plan_cache_mode', 'force_generic_plan', true)") != std::string::npos);
    CHECK(sql::batch_begin_sql().find("set_config('jit', 'off', true)") != std::string::npos);
    // Leading statements' results must all be there and fine.
    const std::vector<batch_row> rows{{1, true}};
    auto t = batch_table({{"1", "f", "f", null, "1", "1", "t", null, null}});
    CHECK(map_batch(pipeline({ok(result_table::status::tuples_ok), ok(), t,
                              ok(result_table::status::pipeline_sync)}),
                    rows, 2)[0]
              .result.error == errc::ok);
    CHECK(map_batch(pipeline({ok(), t, ok(result_table::status::pipeline_sync)}), rows, 2)[0]
              .result.error == errc::internal);
}

TEST_CASE("a batch of one is the single-row statement's parameters") {
    sql::batch_item it;
    it.key = "k";
    it.lock = "L";
    it.token = 42;
    it.body = "body";
    it.content_type = "text/plain";
    it.pre.if_match = 3;
    fk::store::put_request req;
    req.key = "k";
    req.lock = "L";
    req.token = 42;
    req.body = "body";
    req.content_type = "text/plain";
    req.pre.if_match = 3;
    const auto a = sql::single_write_params(it), b = sql::put_params(req);
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
        CAPTURE(i);
        CHECK(a[i].text == b[i].text);
        CHECK(a[i].is_binary == b[i].is_binary);
        CHECK(a[i].binary_value() == b[i].binary_value());
    }
    CHECK(a[3].binary.data() == it.body.data()); // the body is viewed, not copied
    it.is_delete = true;
    fk::store::delete_request del;
    del.key = "k";
    del.lock = "L";
    del.token = 42;
    del.pre.if_match = 3;
    const auto c = sql::single_write_params(it), d = sql::delete_params(del);
    REQUIRE(c.size() == d.size());
    for (std::size_t i = 0; i < c.size(); ++i)
        CHECK(c[i].text == d[i].text);
}

TEST_CASE("array_builder: one dimension, lower bound 1, big-endian lengths and values") {
    sql::array_builder b(sql::oid_int8, 2);
    b.add_int8(1);
    b.add_int8(-2);
    auto elems = decode_array(std::move(b).finish(), sql::oid_int8);
    REQUIRE(elems.size() == 2);
    CHECK(elems[0] == std::string("\0\0\0\0\0\0\0\1", 8));
    CHECK(elems[1] == std::string("\xff\xff\xff\xff\xff\xff\xff\xfe", 8));
    sql::array_builder e(sql::oid_text, 0);
    CHECK(decode_array(std::move(e).finish(), sql::oid_text).empty());
}

TEST_CASE("write_batch_params: arrays in input order, bodies verbatim") {
    std::vector<sql::batch_item> items(3);
    items[0].key = "a";
    items[0].lock = "L1";
    items[0].token = 7;
    items[0].body = std::string_view("x\0y", 3);
    items[0].content_type = "text/plain";
    items[1].key = "b";
    items[1].lock = "L2";
    items[1].token = 8;
    items[1].is_delete = true;
    items[1].pre.if_match = 3;
    items[2].key = "c";
    items[2].lock = "L3";
    items[2].token = 9;
    items[2].pre.if_none_match_any = true;
    items[2].pre.if_match = 0; // never matches: stays failing
    const auto p =
        sql::write_batch_params(items, sql::batch_shape::keyed, std::chrono::seconds(60));
    REQUIRE(p.size() == 13);
    for (std::size_t i = 0; i < 12; ++i)
        CHECK(p[i].is_binary);
    CHECK_FALSE(p[12].is_binary);
    CHECK(*p[12].text == "60");
    CHECK(decode_array(*p[0].text, sql::oid_text) == std::vector<std::string>{"a", "b", "c"});
    CHECK(decode_array(*p[1].text, sql::oid_text) == std::vector<std::string>{"L1", "L2", "L3"});
    CHECK(decode_array(*p[3].text, sql::oid_bytea)[0] == std::string("x\0y", 3));
    CHECK(decode_array(*p[3].text, sql::oid_bytea)[1].empty());
    const auto if_match = decode_array(*p[5].text, sql::oid_int8);
    CHECK(if_match[0] == std::string(8, '\0')); // none
    CHECK(if_match[1] == std::string("\0\0\0\0\0\0\0\3", 8));
    CHECK(if_match[2] == std::string(8, '\xff')); // -1
    CHECK(decode_array(*p[7].text, sql::oid_bool) ==
          std::vector<std::string>{std::string(1, '\0'), std::string(1, '\0'), "\1"});
    CHECK(decode_array(*p[8].text, sql::oid_bool) ==
          std::vector<std::string>{std::string(1, '\0'), "\1", std::string(1, '\0')});
}

TEST_CASE("map_batch: every row its own outcome, mapped back in order") {
    const std::vector<batch_row> rows{{10, true},  {10, true}, {10, true},
                                      {10, false}, {10, true}, {10, true}};
    auto t = batch_table({
        {"1", "f", "f", null, "10", "3", "f", "9", null},     // applied, replaced
        {"2", "f", "f", null, null, null, "t", "12", null},   // stale
        {"3", "t", "f", "other", null, null, "f", "5", null}, // lock_mismatch
        {"4", "f", "f", null, "10", null, "f", "10", null},   // delete applied
        {"5", "f", "t", null, null, null, "f", "9", null},    // precondition failed
        {"6", "f", "f", null, "10", "1", "t", null, null},    // created
    });
    auto maps = map_batch(pipeline({ok(), t, ok(result_table::status::pipeline_sync)}), rows, 1);
    REQUIRE(maps.size() == 6);
    CHECK(maps[0].result.error == errc::ok);
    CHECK(maps[0].result.version == 3);
    CHECK_FALSE(maps[0].result.created);
    CHECK(maps[1].result.error == errc::stale_token);
    CHECK(maps[1].result.current_token == 12);
    CHECK(maps[2].result.error == errc::lock_mismatch);
    CHECK(maps[2].result.lock == "other");
    CHECK(maps[3].result.error == errc::ok);
    CHECK(maps[4].result.error == errc::precondition_failed);
    CHECK(maps[5].result.error == errc::ok);
    CHECK(maps[5].result.created);
    CHECK(maps[5].result.version == 1);
    for (const auto& m : maps)
        CHECK_FALSE(m.retry);
}

TEST_CASE("map_batch: a fence newer than the snapshot is a per-row retry") {
    auto t = batch_table({{"1", "f", "f", null, null, null, "t", "4", null},
                          {"2", "f", "f", null, "5", "1", "t", null, null}});
    auto maps = map_batch(pipeline({t, ok(result_table::status::pipeline_sync)}),
                          {{5, true}, {5, true}}, 0);
    CHECK(maps[0].retry);
    CHECK(maps[1].result.error == errc::ok);
    CHECK(maps[1].result.created);
}

TEST_CASE("map_batch: a server error aborts the batch; rows are re-run one at a time") {
    const std::vector<batch_row> two{{1, true}, {2, true}};
    for (const char* state : {"40P01", "23505", "FKR01", "57014"}) {
        CAPTURE(state);
        auto maps = map_batch(
            pipeline({ok(), server_error(state), ok(result_table::status::pipeline_aborted),
                      ok(result_table::status::pipeline_sync)}),
            two, 1);
        for (const auto& m : maps) {
            CHECK(m.retry);
            CHECK(m.alone);
        }
    }
    // Alone, the error is the row's own: a deadlock is re-run, anything else answered.
    const std::vector<batch_row> one{{1, true}};
    auto m = map_batch(pipeline({server_error("40P01"), ok(result_table::status::pipeline_sync)}),
                       one, 0);
    CHECK(m[0].retry);
    m = map_batch(pipeline({server_error("57014"), ok(result_table::status::pipeline_sync)}), one,
                  false);
    CHECK_FALSE(m[0].retry);
    CHECK(m[0].result.error == errc::unavailable);
    m = map_batch(pipeline({server_error("XX000"), ok(result_table::status::pipeline_sync)}), one,
                  false);
    CHECK(m[0].result.error == errc::internal);
    // Even when the connection died afterwards: the error proves the rollback.
    auto o = pipeline({server_error("23505")});
    o.t = exec_outcome::transport::failed_after_send;
    CHECK(map_batch(o, two, 0)[1].alone);
}

TEST_CASE("map_batch: transport failures are every row's, 503 before the Sync left, 504 after") {
    const std::vector<batch_row> rows{{1, true}, {2, false}, {3, true}};
    using tr = exec_outcome::transport;
    for (auto t : {tr::failed_unsent, tr::timeout_unsent}) {
        exec_outcome o;
        o.t = t;
        for (const auto& m : map_batch(o, rows, 1)) {
            CHECK_FALSE(m.retry);
            CHECK(m.result.error == errc::unavailable);
        }
    }
    for (auto t : {tr::failed_after_send, tr::timeout_after_send}) {
        exec_outcome o;
        o.t = t;
        o.results.push_back(ok()); // the begin's result arrived, the batch's did not
        for (const auto& m : map_batch(o, rows, 1)) {
            CHECK_FALSE(m.retry);
            CHECK(m.result.error == errc::outcome_unknown);
        }
    }
}

TEST_CASE("map_batch: a malformed answer is never a success") {
    const std::vector<batch_row> rows{{1, true}, {2, true}};
    // One row missing.
    auto t = batch_table({{"1", "f", "f", null, "1", "1", "t", null, null}});
    for (const auto& m : map_batch(pipeline({t, ok(result_table::status::pipeline_sync)}), rows, 0))
        CHECK(m.result.error == errc::internal);
    // Rows out of order.
    t = batch_table({{"2", "f", "f", null, "1", "1", "t", null, null},
                     {"1", "f", "f", null, "2", "1", "t", null, null}});
    for (const auto& m : map_batch(pipeline({t, ok(result_table::status::pipeline_sync)}), rows, 0))
        CHECK(m.result.error == errc::internal);
    // No Sync at the end.
    t = batch_table({{"1", "f", "f", null, "1", "1", "t", null, null},
                     {"2", "f", "f", null, "2", "1", "t", null, null}});
    for (const auto& m : map_batch(pipeline({t}), rows, 0))
        CHECK(m.result.error == errc::internal);
}

TEST_CASE("batch_queue: FIFO, at most one write per key and per lock, bounded size") {
    detail::batch_queue<fake_ptr> q(3);
    auto a = w("k1", "L1"), b = w("k2", "L1"), c = w("k1", "L2"), d = w("k3", "L3"),
         e = w("k4", "L4"), f = w("k5", "L5");
    for (auto& x : {a, b, c, d, e, f})
        q.push(x);
    auto batch = q.take();
    // b shares a's lock, c shares a's key: both wait for a later batch.
    CHECK(batch == std::vector<fake_ptr>{a, d, e});
    // Everything left conflicts with a (in flight) except f.
    CHECK(q.take() == std::vector<fake_ptr>{f});
    CHECK(q.take().empty());
    CHECK_FALSE(q.has_ready());
    q.done(batch);
    CHECK(q.has_ready());
    // b (k2, L1) and c (k1, L2) are free now and do not conflict with each other.
    CHECK(q.take() == std::vector<fake_ptr>{b, c});
    CHECK(q.empty());
}

TEST_CASE("batch_queue: a retried write goes first, an alone write travels by itself") {
    detail::batch_queue<fake_ptr> q(64);
    auto a = w("k1", "L1"), b = w("k2", "L2"), c = w("k3", "L3");
    q.push(a);
    q.push(b);
    auto first = q.take();
    CHECK(first.size() == 2);
    q.push(c);
    auto later = w("k1", "L1"); // same lock and key as a
    q.push(later);
    q.done(first);
    a->alone = true;
    b->alone = true;
    q.push_front(b);
    q.push_front(a);
    CHECK(q.take() == std::vector<fake_ptr>{a});
    // With a in flight, `later` must wait; b is alone.
    CHECK(q.take() == std::vector<fake_ptr>{b});
    CHECK(q.take() == std::vector<fake_ptr>{c});
    CHECK(q.take().empty());
    q.done({a});
    CHECK(q.take() == std::vector<fake_ptr>{later});
}

TEST_CASE("batch_queue: remove only while queued; take_queued empties") {
    detail::batch_queue<fake_ptr> q(1);
    auto a = w("k1", "L1"), b = w("k2", "L2");
    q.push(a);
    q.push(b);
    auto batch = q.take();
    CHECK_FALSE(q.remove(a)); // in flight
    CHECK(q.remove(b));
    q.push(b);
    CHECK(q.take_queued() == std::vector<fake_ptr>{b});
    CHECK(q.empty());
    CHECK(q.max_batch() == 1);
    CHECK(detail::batch_queue<fake_ptr>(0).max_batch() == 1);
}

TEST_CASE("batch_queue: remove_if takes only queued entries, in order, and keeps the rest") {
    detail::batch_queue<fake_ptr> q(1);
    auto a = w("k1", "L1"), b = w("k2", "L2"), c = w("k3", "L3"), d = w("k4", "L4");
    q.push(a);
    auto in_flight = q.take();
    REQUIRE(in_flight == std::vector<fake_ptr>{a});
    q.push(b);
    q.push(c);
    q.push(d);
    // The in-flight entry is never offered to the predicate's verdict.
    auto gone = q.remove_if([&](const fake_ptr& e) { return e == a || e == b || e == d; });
    CHECK(gone == std::vector<fake_ptr>{b, d});
    CHECK(q.size() == 1);
    CHECK(q.remove_if([](const fake_ptr&) { return false; }).empty());
    q.done(in_flight);
    CHECK(q.take() == std::vector<fake_ptr>{c});
    CHECK(q.empty());
}

TEST_CASE("may_start_batch: a second batch only beside a stuck first one") {
    using fk::store::pg::detail::may_start_batch;
    using namespace std::chrono_literals;
    const auto stuck_after = std::chrono::milliseconds(50);
    // Nothing in flight: at once.
    CHECK(may_start_batch(0, 2, 0s, stuck_after));
    // One in flight, running normally: later writes wait and join the next batch, however
    // many of them there are (a full batch waiting no longer starts a second one)...
    CHECK_FALSE(may_start_batch(1, 2, 200us, stuck_after));
    CHECK_FALSE(may_start_batch(1, 2, 49ms, stuck_after));
    // ...until the batch in flight has run for batch_overlap_ms: it is stuck.
    CHECK(may_start_batch(1, 2, 50ms, stuck_after));
    CHECK(may_start_batch(1, 2, 5s, stuck_after));
    // batch_concurrency is a hard bound.
    CHECK_FALSE(may_start_batch(2, 2, 5s, stuck_after));
    CHECK_FALSE(may_start_batch(1, 1, 5s, stuck_after));
    CHECK(may_start_batch(2, 3, 50ms, stuck_after));
    // batch_overlap_ms 0: any free slot starts a batch.
    CHECK(may_start_batch(1, 2, 0s, std::chrono::milliseconds(0)));
}

TEST_CASE("overlap_after: half a round trip to a far database, else batch_overlap_ms") {
    using fk::store::pg::detail::overlap_after;
    using namespace std::chrono_literals;
    using dur = std::chrono::steady_clock::duration;
    const dur configured = 50ms, far = 1ms;
    // Round trip not measured yet, or a near database: batch_overlap_ms.
    CHECK(overlap_after(configured, far, 0s) == configured);
    CHECK(overlap_after(configured, far, 120us) == configured);
    CHECK(overlap_after(configured, far, 999us) == configured);
    // A far database: half its round trip...
    CHECK(overlap_after(configured, far, 1ms) == dur(500us));
    CHECK(overlap_after(configured, far, 3ms) == dur(1500us));
    // ...unless batch_overlap_ms is sooner.
    CHECK(overlap_after(configured, far, 400ms) == configured);
    CHECK(overlap_after(0ms, far, 3ms) == dur(0ms));
    // far_round_trip_ms 0 turns the far rule off.
    CHECK(overlap_after(configured, 0ms, 30ms) == configured);
}
