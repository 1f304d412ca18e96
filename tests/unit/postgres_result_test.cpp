#include "backends/postgres/result.hpp"

#include <doctest/doctest.h>

using namespace fk::store::pg;
using fk::errc;
using transport = exec_outcome::transport;
using cellv = std::optional<std::string>;

namespace {

result_table write_row(bool mismatch, bool pre_failed, cellv key_lock, cellv applied, cellv version,
                       cellv created, cellv seen) {
    result_table t;
    t.st = result_table::status::tuples_ok;
    for (auto n : {"mismatch", "pre_failed", "key_lock", "applied", "version", "created",
                   "seen_fence", "raced"})
        t.columns.push_back({n, 25});
    t.rows.push_back({mismatch ? "t" : "f", pre_failed ? "t" : "f", key_lock, applied, version,
                      created, seen, std::nullopt});
    return t;
}

exec_outcome ok_with(result_table t) {
    exec_outcome o;
    o.results.push_back(std::move(t));
    return o;
}

result_table server_error(std::string sqlstate, std::string detail = {}) {
    result_table t;
    t.st = result_table::status::error;
    t.sqlstate = std::move(sqlstate);
    t.message = "boom";
    t.detail = std::move(detail);
    return t;
}

} // namespace

TEST_CASE("write row: applied") {
    auto m = map_write_row(write_row(false, false, {}, "5", "3", "f", "4"), 5, true);
    CHECK_FALSE(m.retry);
    CHECK(m.result.error == errc::ok);
    CHECK(m.result.token == 5);
    CHECK(m.result.version == 3);
    CHECK_FALSE(m.result.created);
    m = map_write_row(write_row(false, false, {}, "5", "1", "t", std::nullopt), 5, true);
    CHECK(m.result.created);
}

TEST_CASE("write row: order is lock_mismatch, stale, precondition") {
    auto m = map_write_row(write_row(true, true, "other", {}, {}, {}, "99"), 5, true);
    CHECK(m.result.error == errc::lock_mismatch);
    CHECK(m.result.lock == "other");
    m = map_write_row(write_row(false, true, {}, {}, {}, {}, "99"), 5, true);
    CHECK(m.result.error == errc::stale_token);
    CHECK(m.result.current_token == 99);
    m = map_write_row(write_row(false, true, {}, {}, {}, {}, "5"), 5, true);
    CHECK(m.result.error == errc::precondition_failed);
    m = map_write_row(write_row(false, true, {}, {}, {}, {}, std::nullopt), 5, true);
    CHECK(m.result.error == errc::precondition_failed);
}

// The store reports data; the proxy words the reply (proxy/error_response.cpp).
TEST_CASE("refused writes carry data, no text") {
    auto m = map_write_row(write_row(true, false, "other", {}, {}, {}, "1"), 5, true);
    CHECK(m.result.error == errc::lock_mismatch);
    CHECK(m.result.message.empty());
    m = map_write_row(write_row(false, false, {}, {}, {}, {}, "9"), 5, true);
    CHECK(m.result.error == errc::stale_token);
    CHECK(m.result.message.empty());
    m = map_write_row(write_row(false, true, {}, {}, {}, {}, "5"), 5, true);
    CHECK(m.result.error == errc::precondition_failed);
    CHECK(m.result.message.empty());
    result_table t;
    t.st = result_table::status::tuples_ok;
    t.columns = {{"applied", 20}, {"seen_fence", 20}};
    t.rows = {{std::nullopt, cellv("12")}};
    CHECK(map_advance_row(t, 9).result.message.empty());
    exec_outcome o = ok_with(server_error("FKST1", "12"));
    auto op = map_operation(o, 3);
    CHECK(op.error == errc::stale_token);
    CHECK(op.current_token == 12);
    CHECK(op.message.empty());
}

TEST_CASE("write row: a fence that moved after the snapshot asks for a re-run") {
    auto m = map_write_row(write_row(false, false, {}, {}, {}, {}, "3"), 5, true);
    CHECK(m.retry);
    m = map_write_row(write_row(false, false, {}, {}, {}, {}, std::nullopt), 5, true);
    CHECK(m.retry);
    m = map_write_row(write_row(false, false, {}, {}, {}, {}, "6"), 5, true);
    CHECK_FALSE(m.retry);
    CHECK(m.result.error == errc::stale_token);
}

TEST_CASE("advance row") {
    result_table t;
    t.st = result_table::status::tuples_ok;
    t.columns = {{"applied", 20}, {"seen_fence", 20}};
    t.rows = {{cellv("9"), cellv("7")}};
    CHECK(map_advance_row(t, 9).result.token == 9);
    t.rows = {{std::nullopt, cellv("12")}};
    auto m = map_advance_row(t, 9);
    CHECK(m.result.error == errc::stale_token);
    CHECK(m.result.current_token == 12);
    t.rows = {{std::nullopt, cellv("8")}};
    CHECK(map_advance_row(t, 9).retry);
}

TEST_CASE("write exchange: truthful failures") {
    exec_outcome o;
    o.t = transport::failed_unsent;
    CHECK(map_write(o, 1, true, false).result.error == errc::unavailable);
    o.t = transport::timeout_unsent;
    CHECK(map_write(o, 1, true, false).result.error == errc::unavailable);
    o.t = transport::failed_after_send;
    CHECK(map_write(o, 1, true, false).result.error == errc::outcome_unknown);
    o.t = transport::timeout_after_send;
    CHECK(map_write(o, 1, true, false).result.error == errc::outcome_unknown);
    // The row arrived but the end of the exchange did not: the commit is not proven.
    o = ok_with(write_row(false, false, {}, "1", "1", "t", {}));
    o.t = transport::failed_after_send;
    CHECK(map_write(o, 1, true, false).result.error == errc::outcome_unknown);
    // A server error for the statement is definite, even if the connection died after.
    o = ok_with(server_error("57P01"));
    o.t = transport::failed_after_send;
    CHECK(map_write(o, 1, true, false).result.error == errc::unavailable);
    CHECK(map_write(ok_with(server_error("57014")), 1, true, false).result.error ==
          errc::unavailable);
    CHECK(map_write(ok_with(server_error("42P01")), 1, true, false).result.error == errc::internal);
    CHECK(map_write(ok_with(server_error("FKR01")), 1, true, false).retry);
    // A libpq-made error (no SQLSTATE) proves nothing.
    auto lost = server_error("");
    o = ok_with(lost);
    o.t = transport::failed_after_send;
    CHECK(map_write(o, 1, true, false).result.error == errc::outcome_unknown);
}

TEST_CASE("sqlstate classes") {
    for (auto s : {"08006", "53300", "57P01", "57014", "40001", "40P01", "55P03", "25006", "58030"})
        CHECK(transient_sqlstate(s));
    for (auto s : {"23505", "42P01", "22012", "P0001", "", "FKST1"})
        CHECK_FALSE(transient_sqlstate(s));
}

TEST_CASE("commit verdict: the COMMIT's own result decides, whatever follows it") {
    using kind = commit_verdict::kind;
    result_table ok;
    ok.st = result_table::status::command_ok;
    result_table sync;
    sync.st = result_table::status::pipeline_sync;
    result_table aborted;
    aborted.st = result_table::status::pipeline_aborted;
    auto outcome = [](std::vector<result_table> rs, transport t = transport::ok) {
        exec_outcome o;
        o.results = std::move(rs);
        o.t = t;
        return o;
    };
    // [record, COMMIT, Sync]: COMMIT at 1.
    CHECK(commit_verdict_of(outcome({ok, ok, sync}), 1).what == kind::committed);
    // A backend terminated after COMMIT: its FATAL comes against the Sync, and the
    // connection closes. The transaction committed (this was answered 503 before).
    CHECK(
        commit_verdict_of(outcome({ok, ok, server_error("57P01")}, transport::failed_after_send), 1)
            .what == kind::committed);
    CHECK(commit_verdict_of(outcome({ok, ok}, transport::failed_after_send), 1).what ==
          kind::committed);
    // An error before the COMMIT rolled back, whatever happened to the connection then.
    auto v = commit_verdict_of(
        outcome({server_error("FKR01"), aborted, sync}, transport::failed_after_send), 1);
    CHECK(v.what == kind::rolled_back);
    CHECK(v.error.sqlstate == "FKR01");
    // An ordinary error on the COMMIT, the session alive: rolled back.
    v = commit_verdict_of(outcome({ok, server_error("40001"), sync}), 1);
    CHECK(v.what == kind::rolled_back);
    // A session-ending error on the COMMIT itself, or a lost connection before its
    // result: unknown, also when the Sync had not left (COMMIT runs at its Execute).
    CHECK(commit_verdict_of(outcome({ok, server_error("57P01")}, transport::failed_after_send), 1)
              .what == kind::unknown);
    CHECK(commit_verdict_of(outcome({ok, server_error("57P01"), sync}), 1).what == kind::unknown);
    CHECK(commit_verdict_of(outcome({ok, server_error("08006"), sync}), 1).what == kind::unknown);
    CHECK(commit_verdict_of(outcome({ok}, transport::failed_after_send), 1).what == kind::unknown);
    CHECK(commit_verdict_of(outcome({}, transport::timeout_after_send), 1).what == kind::unknown);
    CHECK(commit_verdict_of(outcome({}, transport::failed_unsent), 1).what == kind::unknown);
    // No error and no COMMIT result: a shape we do not know.
    CHECK(commit_verdict_of(outcome({ok, aborted, sync}), 1).what == kind::malformed);
    CHECK(commit_verdict_of(outcome({aborted, ok, sync}), 1).what == kind::malformed);
}

TEST_CASE("get: binary row, not found, reads never report outcome_unknown") {
    result_table t;
    t.st = result_table::status::tuples_ok;
    t.binary = true;
    auto be8 = [](std::int64_t v) {
        std::string s(8, '\0');
        for (int i = 7; i >= 0; --i, v >>= 8)
            s[static_cast<std::size_t>(i)] = static_cast<char>(v & 0xFF);
        return s;
    };
    t.columns = {{"lock", 25},         {"token", 20}, {"version", 20},
                 {"content_type", 25}, {"size", 20},  {"body", 17}};
    t.rows = {
        {cellv("L"), be8(77), be8(3), cellv("text/plain"), be8(3), cellv(std::string("a\0b", 3))}};
    auto r = map_get(ok_with(t), true);
    CHECK(r.error == errc::ok);
    CHECK(r.lock == "L");
    CHECK(r.token == 77);
    CHECK(r.version == 3);
    CHECK(r.size == 3);
    CHECK(r.body == std::string("a\0b", 3));
    t.rows.clear();
    CHECK(map_get(ok_with(t), true).error == errc::not_found);
    exec_outcome o;
    o.t = transport::failed_after_send;
    CHECK(map_get(o, false).error == errc::unavailable);
    CHECK(decode_int8(be8(-2)) == -2);
    CHECK_FALSE(decode_int8("abc").has_value());
}

TEST_CASE("list: limit + 1 rows give next") {
    result_table t;
    t.st = result_table::status::tuples_ok;
    t.columns = {{"lock", 25}, {"token", 20}, {"updated_ms", 20}};
    t.rows = {{cellv("a"), cellv("1"), cellv("10")},
              {cellv("b"), cellv("2"), cellv("20")},
              {cellv("c"), cellv("3"), cellv("30")}};
    auto r = map_list(ok_with(t), 2);
    REQUIRE(r.fences.size() == 2);
    CHECK(r.fences[1].lock == "b");
    CHECK(r.fences[1].updated_at_ms == 20);
    CHECK(r.next == "b");
    r = map_list(ok_with(t), 3);
    CHECK(r.fences.size() == 3);
    CHECK_FALSE(r.next.has_value());
}

TEST_CASE("operation pipeline outcomes") {
    result_table fence_ok;
    fence_ok.st = result_table::status::tuples_ok;
    result_table user;
    user.st = result_table::status::tuples_ok;
    user.cmd_tuples = "1";
    user.columns = {{"balance", 1700}};
    user.rows = {{cellv("100.50")}};
    result_table sync;
    sync.st = result_table::status::pipeline_sync;
    result_table aborted;
    aborted.st = result_table::status::pipeline_aborted;

    exec_outcome o;
    o.results = {fence_ok, user, sync};
    auto r = map_operation(o, 8);
    CHECK(r.error == errc::ok);
    CHECK(r.token == 8);
    CHECK(r.rows_affected == 1);
    CHECK(r.rows_json == R"([{"balance":100.50}])");

    o.results = {server_error("FKST1", "12"), aborted, sync};
    r = map_operation(o, 8);
    CHECK(r.error == errc::stale_token);
    CHECK(r.current_token == 12);

    o.results = {fence_ok, server_error("23505"), sync};
    r = map_operation(o, 8);
    CHECK(r.error == errc::operation_failed);
    CHECK(r.sqlstate == "23505");

    o.results = {fence_ok, server_error("40P01"), sync};
    CHECK(map_operation(o, 8).error == errc::unavailable);

    o.results = {fence_ok, user};
    o.t = transport::failed_after_send;
    CHECK(map_operation(o, 8).error == errc::outcome_unknown);
    o.results.clear();
    o.t = transport::failed_unsent;
    CHECK(map_operation(o, 8).error == errc::unavailable);
}

TEST_CASE("operation errors: the database's text only where the operation exposes it") {
    result_table fence_ok;
    fence_ok.st = result_table::status::tuples_ok;
    result_table sync;
    sync.st = result_table::status::pipeline_sync;
    // What Postgres says when a value from another table fails a cast, with its DETAIL.
    result_table leak;
    leak.st = result_table::status::error;
    leak.sqlstate = "22P02";
    leak.message = R"(invalid input syntax for type integer: "s3cret-value")";
    leak.detail = "Key (secret_column)=(s3cret-detail).";
    exec_outcome o;
    o.results = {fence_ok, leak, sync};

    auto r = map_operation(o, 8);
    CHECK(r.error == errc::operation_failed);
    CHECK(r.sqlstate == "22P02");
    CHECK(r.message.find("s3cret") == std::string::npos);
    CHECK(r.message.find("SQLSTATE 22P02") != std::string::npos);
    CHECK(r.server_message == leak.message + " DETAIL: " + leak.detail);
    r = map_operation(o, 8, true);
    CHECK(r.error == errc::operation_failed);
    CHECK(r.message == leak.message);
    CHECK(r.server_message == leak.message + " DETAIL: " + leak.detail);

    // Transient: 503, the same rule.
    leak.sqlstate = "40001";
    o.results = {fence_ok, leak, sync};
    r = map_operation(o, 8);
    CHECK(r.error == errc::unavailable);
    CHECK(r.message.find("s3cret") == std::string::npos);
    CHECK(r.message.find("40001") != std::string::npos);
    CHECK(r.server_message.find("s3cret-value") != std::string::npos);
    CHECK(map_operation(o, 8, true).message.find("s3cret-value") != std::string::npos);

    // A statement that does not prepare: no SQL fragment, table or column name.
    result_table prep;
    prep.st = result_table::status::error;
    prep.sqlstate = "42P01";
    prep.message = R"(relation "hidden_table" does not exist)";
    r = map_prepare_failure(prep, "credit", false);
    CHECK(r.error == errc::operation_failed);
    CHECK(r.sqlstate == "42P01");
    CHECK(r.message.find("hidden_table") == std::string::npos);
    CHECK(r.message.find("operation 'credit' does not prepare: SQLSTATE 42P01") == 0);
    CHECK(r.server_message == prep.message);
    r = map_prepare_failure(prep, "credit", true);
    CHECK(r.message == "operation 'credit' does not prepare: " + prep.message);
    prep.sqlstate = "57P03";
    CHECK(map_prepare_failure(prep, "credit", false).error == errc::unavailable);
    // libpq's own error (no SQLSTATE) is about the connection: 503, shown as it is.
    prep.sqlstate.clear();
    prep.message = "server closed the connection unexpectedly";
    r = map_prepare_failure(prep, "credit", false);
    CHECK(r.error == errc::unavailable);
    CHECK(r.message == "operation 'credit' does not prepare: " + prep.message);
    CHECK(r.server_message.empty());
}

TEST_CASE("rows_to_json by type") {
    result_table t;
    t.st = result_table::status::tuples_ok;
    t.columns = {{"i", 23}, {"b", 16},   {"n", 1700}, {"f", 701},
                 {"t", 25}, {"j", 3802}, {"z", 25},   {"q\"", 20}};
    t.rows = {{cellv("-7"), cellv("t"), cellv("NaN"), cellv("1e+100"), cellv("a\"b\n\x01"),
               cellv(R"({"x": [1]})"), std::nullopt, cellv("9223372036854775807")}};
    CHECK(
        rows_to_json(t) ==
        R"([{"i":-7,"b":true,"n":"NaN","f":1e+100,"t":"a\"b\n\u0001","j":{"x": [1]},"z":null,"q\"":9223372036854775807}])");
    t.rows.clear();
    CHECK(rows_to_json(t) == "[]");
}
