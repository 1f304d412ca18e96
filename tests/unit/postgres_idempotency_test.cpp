// The Postgres store's Idempotency-Key records without a database: the statements' shape
// (what is claimed when, and what raises), the parameters (NULL for unkeyed rows), and
// the mapping of records and answered rows to results.
#include "backends/postgres/idem_expiry.hpp"
#include "backends/postgres/result.hpp"
#include "backends/postgres/sql.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace fk::store;
using namespace fk::store::pg;
using fk::errc;
using cellv = std::optional<std::string>;
const cellv null = std::nullopt;

namespace {

std::size_t pos(const std::string& s, std::string_view what) {
    const auto p = s.find(what);
    INFO(what);
    CHECK(p != std::string::npos);
    return p;
}

std::uint32_t be32_at(const std::string& s, std::size_t at) {
    std::uint32_t v = 0;
    for (std::size_t i = 0; i < 4; ++i)
        v = (v << 8) | static_cast<unsigned char>(s[at + i]);
    return v;
}

// A one-dimensional binary array: its has-nulls flag and its elements (nullopt = NULL).
std::pair<std::uint32_t, std::vector<cellv>> decode(const std::string& a) {
    REQUIRE(a.size() >= 20);
    const auto n = be32_at(a, 12);
    std::vector<cellv> out;
    std::size_t at = 20;
    for (std::uint32_t i = 0; i < n; ++i) {
        const auto len = be32_at(a, at);
        at += 4;
        if (len == 0xFFFFFFFFU) {
            out.push_back(null);
            continue;
        }
        out.push_back(a.substr(at, len));
        at += len;
    }
    CHECK(at == a.size());
    return {be32_at(a, 4), out};
}

std::string be8(std::int64_t v) {
    std::string b(8, '\0');
    for (int i = 0; i < 8; ++i)
        b[static_cast<std::size_t>(i)] =
            static_cast<char>((static_cast<std::uint64_t>(v) >> (56 - 8 * i)) & 0xFF);
    return b;
}

result_table ok(result_table::status st = result_table::status::command_ok) {
    result_table t;
    t.st = st;
    return t;
}

result_table batch_table(std::vector<std::vector<cellv>> rows) {
    result_table t;
    t.st = result_table::status::tuples_ok;
    for (const char* c :
         {"n", "mismatch", "pre_failed", "key_lock", "applied", "version", "created", "seen_fence",
          "unwritten", "rec_same", "rec_created", "rec_version", "rec_token"})
        t.columns.push_back({c, 0});
    t.rows = std::move(rows);
    return t;
}

exec_outcome outcome(std::vector<result_table> results) {
    exec_outcome o;
    o.results = std::move(results);
    return o;
}

const std::string fp_a(32, 'a'), fp_b(32, 'b');

} // namespace

TEST_CASE("schema 2 adds the idempotency table and refuses newer schemas") {
    CHECK(sql::schema_version >= 2);
    const auto m = sql::migration_script("fk");
    const auto v1 = pos(m, "IF v < 1 THEN");
    const auto v2 = pos(m, "IF v < 2 THEN");
    CHECK(v1 < v2);
    const auto table = pos(m, "CREATE TABLE \"fk\".idempotency (");
    CHECK(v2 < table);
    pos(m, "scope text COLLATE \"C\" NOT NULL");
    pos(m, "key text COLLATE \"C\" NOT NULL");
    pos(m, "PRIMARY KEY (scope, key)");
    pos(m, "ON \"fk\".idempotency (committed_at)");
    pos(m, "INSERT INTO \"fk\".schema_version (version) VALUES (2)");
    pos(m, "IF v > " + std::to_string(sql::schema_version) + " THEN");
    // Only additions: nothing of version 1 is altered or dropped.
    CHECK(m.find("ALTER ") == std::string::npos);
    CHECK(m.find("DROP ") == std::string::npos);
}

TEST_CASE("batch statement: records looked up first, claimed last, a lost claim raises") {
    const auto s = sql::write_batch_sql("fk", sql::batch_shape::keyed);
    // One primary-key probe per keyed row, the expiry condition kept out of it (a join
    // planned a scan of every unexpired record).
    const auto lookup = pos(s, "FROM i CROSS JOIN LATERAL (");
    pos(s, "FROM \"fk\".idempotency d WHERE d.scope = i.scope AND d.key = i.ikey OFFSET 0) d");
    const auto keys = pos(s, "ORDER BY r.key COLLATE \"C\" FOR UPDATE");
    const auto fences = pos(s, "INSERT INTO \"fk\".fences AS fe");
    const auto creates = pos(s, "INSERT INTO \"fk\".resources AS r");
    const auto claim = pos(s, "INSERT INTO \"fk\".idempotency AS d");
    const auto claim_order = pos(s, "ORDER BY c.scope COLLATE \"C\", c.ikey COLLATE \"C\"");
    const auto conflict = pos(s, "ON CONFLICT (scope, key) DO UPDATE");
    CHECK(lookup < keys);
    CHECK(keys < fences);
    CHECK(fences < creates);
    CHECK(creates < claim);
    CHECK(claim < claim_order);
    CHECK(claim_order < conflict);
    // Unexpired answers, expired is taken over: the two conditions are complements.
    pos(s, "d.committed_at > now() - $13::bigint * interval '1 second'");
    pos(s, "WHERE d.committed_at <= now() - $13::bigint * interval '1 second'");
    // An answered row applies nothing; the claim waits for N to be over; a fenced keyed
    // row without its record raises FKR01.
    pos(s, "AND NOT c.answered\n");
    pos(s, "(SELECT count(*) FROM w) + (SELECT count(*) FROM v) >= 0");
    pos(s, "WHEN f.token IS NOT NULL AND c.ikey IS NOT NULL AND rec.key IS NULL");
    // The record's columns ride in c: rec and the final SELECT join neither i nor e.
    pos(s, "x.scope, x.ikey, x.fingerprint, x.rec_same, x.rec_created, x.rec_version,");
    pos(s, "  FROM c JOIN f ON f.lock = c.lock\n    LEFT JOIN w ON w.n = c.n");
    pos(s, "LEFT JOIN rec ON rec.scope = c.scope AND rec.key = c.ikey");
    CHECK(s.find("JOIN e ON e.n = c.n") == std::string::npos);
    CHECK(s.find("JOIN i ON i.n = c.n LEFT JOIN f") == std::string::npos);
    CHECK(pos(s, "fk_raise('FKR01', 'a concurrent write committed a record") > conflict);
    CHECK(s.ends_with("\nORDER BY c.n"));
}

TEST_CASE("the keyed fence advance, the operation's record and the sweep") {
    const auto a = sql::advance_idem_sql("fk");
    CHECK(pos(a, "WHERE NOT EXISTS (SELECT 1 FROM e)") < pos(a, "INSERT INTO \"fk\".idempotency"));
    pos(a, "SELECT $3::text, $4::text, $5::bytea, f.token, now() FROM f");
    pos(a, "WHEN EXISTS (SELECT 1 FROM f) AND NOT EXISTS (SELECT 1 FROM r)");
    const auto r = sql::op_record_sql("fk");
    pos(r, "WHERE d.committed_at <= now() - $7::bigint * interval '1 second'");
    pos(r, "WHEN NOT EXISTS (SELECT 1 FROM r)");
    const auto e = sql::idem_expire_sql("fk");
    pos(e, "ORDER BY d.committed_at LIMIT $2::bigint FOR UPDATE SKIP LOCKED");
    pos(e, "committed_at <= now() - $1::bigint");
    const auto g = sql::idem_get_sql("fk");
    pos(g, "d.committed_at > now() - $3::bigint * interval '1 second'");
    // The count behind the per-client bound: unexpired records only, sized as
    // store::idem_record_bytes sizes them.
    const auto u = sql::idem_usage_sql("fk");
    pos(u, "coalesce(octet_length(d.rows), 0) + 64");
    pos(u, "WHERE d.committed_at > now() - $1::bigint * interval '1 second'");
    pos(u, "GROUP BY d.scope");
    int found = 0;
    for (const auto& st : sql::prepared_statements("fk")) {
        const std::string n = st.name;
        if (n == sql::name::idem_get)
            found += st.nparams == 3;
        if (n == sql::name::advance_idem)
            found += st.nparams == 6;
        if (n == sql::name::op_record)
            found += st.nparams == 7;
        if (n == sql::name::idem_expire)
            found += st.nparams == 2;
        if (n == sql::name::idem_usage)
            found += st.nparams == 1;
        if (n == sql::name::begin)
            found += st.text == "BEGIN";
        if (n == sql::name::commit)
            found += st.text == "COMMIT";
    }
    CHECK(found == 7);
}

TEST_CASE("array_builder: NULL elements set the has-nulls flag") {
    sql::array_builder b(sql::oid_text, 3);
    b.add("x");
    b.add_null();
    b.add("");
    const auto [flag, elems] = decode(std::move(b).finish());
    CHECK(flag == 1);
    CHECK(elems == std::vector<cellv>{"x", null, ""});
    sql::array_builder c(sql::oid_text, 1);
    c.add("y");
    CHECK(decode(std::move(c).finish()).first == 0);
}

TEST_CASE("write_batch_params: keyed and unkeyed rows in one batch") {
    const idempotency k{"alice", "key-1", fp_a};
    std::vector<sql::batch_item> items(2);
    items[0].key = "a";
    items[0].lock = "L1";
    items[0].idem = &k;
    items[1].key = "b";
    items[1].lock = "L2";
    REQUIRE(sql::write_batch_shape(items) == sql::batch_shape::keyed);
    const auto p = sql::write_batch_params(items, sql::batch_shape::keyed, std::chrono::seconds(2));
    REQUIRE(p.size() == 13);
    CHECK(decode(*p[9].text).second == std::vector<cellv>{"alice", null});
    CHECK(decode(*p[10].text).second == std::vector<cellv>{"key-1", null});
    CHECK(decode(*p[11].text).second == std::vector<cellv>{fp_a, null});
    CHECK(be32_at(*p[11].text, 8) == sql::oid_bytea);
    CHECK(*p[12].text == "2");
    // As the keyed statement (one keyed row is enough), with its name.
    const auto st = sql::write_batch_statement(items, std::chrono::seconds(2));
    CHECK(std::string(st.statement) == sql::name::write_batch_keyed);
    REQUIRE(st.params.size() == 13);
    CHECK(decode(*st.params[10].text).second == std::vector<cellv>{"key-1", null});
    // All unkeyed: the plain statement, nine arrays, no idempotency parameter at all.
    items[0].idem = nullptr;
    CHECK(sql::write_batch_shape(items) == sql::batch_shape::plain);
    const auto q = sql::write_batch_statement(items, std::chrono::seconds(2));
    CHECK(std::string(q.statement) == sql::name::write_batch);
    REQUIRE(q.params.size() == 9);
    CHECK(decode(*q.params[0].text).second == std::vector<cellv>{"a", "b"});
    // The keyed shape with no keyed row (a caller's choice) still sends NULL arrays.
    const auto r = sql::write_batch_params(items, sql::batch_shape::keyed, std::chrono::seconds(2));
    REQUIRE(r.size() == 13);
    CHECK(decode(*r[10].text).second == std::vector<cellv>{null, null});
}

TEST_CASE("batch statement, plain shape: no record read or written, the same columns") {
    const auto s = sql::write_batch_sql("fk", sql::batch_shape::plain);
    CHECK(s.find("idempotency") == std::string::npos);
    CHECK(s.find("$10") == std::string::npos);
    CHECK(s.find("$13") == std::string::npos);
    CHECK(s.find(" e AS ") == std::string::npos);
    CHECK(s.find(" rec AS ") == std::string::npos);
    pos(s, "$9::boolean[])\n    WITH ORDINALITY");
    // Nothing is answered from a record; the record columns are there, NULL.
    pos(s, "false AS answered");
    pos(s, "NULL::boolean AS rec_same, NULL::boolean AS rec_created,");
    pos(s, "NULL::bigint AS rec_version, NULL::bigint AS rec_token,");
    // The same lock phases as the keyed shape, in the same order.
    const auto keys = pos(s, "ORDER BY r.key COLLATE \"C\" FOR UPDATE");
    const auto fences = pos(s, "INSERT INTO \"fk\".fences AS fe");
    const auto creates = pos(s, "INSERT INTO \"fk\".resources AS r");
    CHECK(keys < fences);
    CHECK(fences < creates);
    pos(s, "fk_raise('FKR01', 'a concurrent write created the key, retry')");
    CHECK(s.ends_with("\nORDER BY c.n"));
    // Both shapes are prepared on every connection, each with its parameter count.
    int found = 0;
    for (const auto& st : sql::prepared_statements("fk")) {
        if (std::string(st.name) == sql::name::write_batch)
            found += st.nparams == 9 && st.text == s;
        if (std::string(st.name) == sql::name::write_batch_keyed)
            found +=
                st.nparams == 13 && st.text == sql::write_batch_sql("fk", sql::batch_shape::keyed);
    }
    CHECK(found == 2);
}

TEST_CASE("record parameters: the fingerprint as bytes, the rest as text") {
    const idempotency k{"", "key-1", fp_b};
    auto a = sql::advance_idem_params("L", 7, k, std::chrono::seconds(86'400));
    REQUIRE(a.size() == 6);
    CHECK(*a[0].text == "L");
    CHECK(*a[1].text == "7");
    CHECK(*a[2].text == "");
    CHECK(*a[3].text == "key-1");
    CHECK(a[4].is_binary);
    CHECK(a[4].binary_value() == fp_b);
    CHECK(*a[5].text == "86400");
    auto r = sql::op_record_params(k, 9, 1, "[{\"b\":1}]", std::chrono::seconds(5));
    REQUIRE(r.size() == 7);
    CHECK(r[2].binary_value() == fp_b);
    CHECK(*r[3].text == "9");
    CHECK(*r[4].text == "1");
    CHECK(*r[5].text == "[{\"b\":1}]");
    CHECK(*r[6].text == "5");
    auto g = sql::idem_get_params(k, std::chrono::seconds(5));
    REQUIRE(g.size() == 3);
    CHECK(*g[1].text == "key-1");
    auto e = sql::idem_expire_params(std::chrono::seconds(5), 1000);
    CHECK(*e[0].text == "5");
    CHECK(*e[1].text == "1000");
}

TEST_CASE("map_batch: a row answered by its record applies nothing and reports it") {
    const std::vector<batch_row> rows{{10, true}, {10, true}, {10, false}, {10, true}};
    auto t = batch_table({
        // same fingerprint: the recorded put (created, version 4, token 7), though the
        // row's own checks would say stale now
        {"1", "f", "f", null, null, null, "f", null, null, "t", "t", "4", "7"},
        // another fingerprint: reused
        {"2", "t", "f", "x", null, null, "f", null, null, "f", "f", "1", "3"},
        // a delete's record: the token only
        {"3", "f", "f", null, null, null, "f", null, null, "t", "f", "2", "6"},
        // no record: as without a key
        {"4", "f", "f", null, "10", "1", "t", null, null, null, null, null, null},
    });
    auto maps = map_batch(outcome({ok(), t, ok(result_table::status::pipeline_sync)}), rows, 1);
    REQUIRE(maps.size() == 4);
    CHECK(maps[0].result.error == errc::ok);
    CHECK(maps[0].result.replayed);
    CHECK(maps[0].result.created);
    CHECK(maps[0].result.version == 4);
    CHECK(maps[0].result.token == 7);
    CHECK(maps[1].result.error == errc::idempotency_key_reused);
    CHECK_FALSE(maps[1].result.replayed);
    CHECK(maps[2].result.error == errc::ok);
    CHECK(maps[2].result.replayed);
    CHECK(maps[2].result.token == 6);
    CHECK(maps[2].result.version == 0);
    CHECK(maps[3].result.error == errc::ok);
    CHECK_FALSE(maps[3].result.replayed);
    CHECK(maps[3].result.version == 1);
    for (const auto& m : maps)
        CHECK_FALSE(m.retry);
    // The old nine-column shape is not a batch answer any more.
    t.columns.resize(9);
    for (const auto& m :
         map_batch(outcome({ok(), t, ok(result_table::status::pipeline_sync)}), rows, 1))
        CHECK(m.result.error == errc::internal);
}

TEST_CASE("map_batch: a lone keyed write that lost its claim (FKR01) is re-run") {
    result_table e;
    e.st = result_table::status::error;
    e.sqlstate = "FKR01";
    auto m = map_batch(outcome({ok(), e, ok(result_table::status::pipeline_sync)}), {{1, true}}, 1);
    CHECK(m[0].retry);
    CHECK_FALSE(m[0].alone);
}

TEST_CASE("keyed advance row: the record answers before the fence") {
    result_table t;
    t.st = result_table::status::tuples_ok;
    t.columns = {
        {"applied", 20}, {"seen_fence", 20}, {"raced", 16}, {"rec_same", 16}, {"rec_token", 20}};
    t.rows = {{null, cellv("12"), null, cellv("t"), cellv("3")}};
    auto m = map_advance_row(t, 3);
    CHECK(m.result.error == errc::ok);
    CHECK(m.result.replayed);
    CHECK(m.result.token == 3);
    t.rows = {{null, cellv("12"), null, cellv("f"), cellv("3")}};
    CHECK(map_advance_row(t, 3).result.error == errc::idempotency_key_reused);
    t.rows = {{cellv("13"), cellv("12"), null, null, null}};
    m = map_advance_row(t, 13);
    CHECK(m.result.error == errc::ok);
    CHECK_FALSE(m.result.replayed);
    CHECK(m.result.token == 13);
    t.rows = {{null, cellv("12"), null, null, null}};
    CHECK(map_advance_row(t, 3).result.error == errc::stale_token);
}

TEST_CASE("map_idem_get: binary record, none, and failures") {
    result_table t;
    t.st = result_table::status::tuples_ok;
    t.binary = true;
    t.columns = {{"fingerprint", 17}, {"created", 16},       {"version", 20},
                 {"token", 20},       {"rows_affected", 20}, {"rows", 25}};
    t.rows = {{fp_a, std::string(1, '\1'), be8(4), be8(7), be8(1), std::string("[{\"b\":1}]")}};
    auto l = map_idem_get(outcome({t}));
    CHECK(l.error == errc::ok);
    REQUIRE(l.record);
    CHECK(l.record->fingerprint == fp_a);
    CHECK(l.record->created);
    CHECK(l.record->version == 4);
    CHECK(l.record->token == 7);
    CHECK(l.record->rows_affected == 1);
    CHECK(l.record->rows_json == "[{\"b\":1}]");
    t.rows.clear();
    l = map_idem_get(outcome({t}));
    CHECK(l.error == errc::ok);
    CHECK_FALSE(l.record);
    // A lookup never reports outcome_unknown: it changes nothing.
    exec_outcome lost;
    lost.t = exec_outcome::transport::failed_after_send;
    CHECK(map_idem_get(lost).error == errc::unavailable);
    result_table err;
    err.st = result_table::status::error;
    err.sqlstate = "42P01"; // a schema 1 database: no such table
    CHECK(map_idem_get(outcome({err})).error == errc::internal);
}

TEST_CASE("replay: the recorded outcome for the same request, reused for another") {
    idem_record rec{fp_a, true, 4, 7, 1, "[{\"b\":1}]"};
    auto w = replay_write(rec, fp_a, true);
    CHECK(w.error == errc::ok);
    CHECK(w.replayed);
    CHECK(w.created);
    CHECK(w.version == 4);
    CHECK(w.token == 7);
    w = replay_write(rec, fp_a, false);
    CHECK(w.replayed);
    CHECK_FALSE(w.created);
    CHECK(w.version == 0);
    CHECK(replay_write(rec, fp_b, true).error == errc::idempotency_key_reused);
    auto o = replay_operation(rec, fp_a);
    CHECK(o.error == errc::ok);
    CHECK(o.replayed);
    CHECK(o.token == 7);
    CHECK(o.rows_affected == 1);
    CHECK(o.rows_json == "[{\"b\":1}]");
    CHECK(replay_operation(rec, fp_b).error == errc::idempotency_key_reused);
}

TEST_CASE("expiry_period: half the retention, 1 s to 60 s") {
    using std::chrono::milliseconds;
    using std::chrono::seconds;
    CHECK(expiry_period(seconds(2)) == milliseconds(1000));
    CHECK(expiry_period(seconds(1)) == milliseconds(1000));
    CHECK(expiry_period(seconds(30)) == milliseconds(15'000));
    CHECK(expiry_period(seconds(86'400)) == milliseconds(60'000));
}
