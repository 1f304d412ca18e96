// Longer than 400 lines because every mapping here (writes, batches, reads, listing,
// operations, rows as JSON) decides with the same failure classification at the top:
// splitting it would spread the one rule of what a client may retry over several files.
#include "backends/postgres/result.hpp"

#include "backends/postgres/sql.hpp"
#include "fence/json_string.hpp"

#include <charconv>

namespace fk::store::pg {
namespace {

using transport = exec_outcome::transport;

constexpr unsigned oid_bool = 16, oid_int8 = 20, oid_int2 = 21, oid_int4 = 23, oid_oid = 26,
                   oid_json = 114, oid_float4 = 700, oid_float8 = 701, oid_numeric = 1700,
                   oid_jsonb = 3802;

// fk_fence_step's HINT when a floor rejected the token: "floor:" and its prefix.
constexpr std::string_view floor_hint = "floor:";

// The failures shared by every exchange. `definite_if_unsent` is always true: a request
// that never completely left us cannot have committed.
template <class R> std::optional<R> transport_failure(const exec_outcome& o, bool is_write) {
    switch (o.t) {
    case transport::ok:
        return std::nullopt;
    case transport::failed_unsent:
        return failure<R>(errc::unavailable, "database unavailable: " + o.error);
    case transport::timeout_unsent:
        return failure<R>(errc::unavailable, "database did not answer in time");
    case transport::failed_after_send:
    case transport::timeout_after_send:
        if (!is_write)
            return failure<R>(errc::unavailable, o.t == transport::timeout_after_send
                                                     ? "database did not answer in time"
                                                     : "database connection lost: " + o.error);
        return failure<R>(errc::outcome_unknown,
                          o.t == transport::timeout_after_send
                              ? "database did not answer in time after the write was sent; "
                                "it may or may not have been applied: retry it with the same "
                                "Idempotency-Key to learn which, without applying it twice"
                              : "database connection lost after the write was sent; it may "
                                "or may not have been applied: retry it with the same "
                                "Idempotency-Key to learn which, without applying it twice");
    }
    return std::nullopt;
}

// The database's own text for an error of a user's statement: for the log.
std::string server_text(const result_table& r) {
    return r.detail.empty() ? r.message : r.message + " DETAIL: " + r.detail;
}

// What a client sees of such an error: the server's primary message where the operation
// opts in, else only the SQLSTATE (the message may quote data from any table).
std::string client_text(const result_table& r, bool expose_errors) {
    if (expose_errors)
        return r.message;
    return "SQLSTATE " + r.sqlstate +
           " (the database's message is logged, not returned; see the operation's "
           "expose_errors)";
}

template <class R> R server_failure(const result_table& r) {
    if (transient_sqlstate(r.sqlstate))
        return failure<R>(errc::unavailable, "database error " + r.sqlstate + ": " + r.message);
    return failure<R>(errc::internal, "database error " + r.sqlstate + ": " + r.message);
}

// RFC 8259 number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
bool is_json_number(std::string_view s) noexcept {
    std::size_t i = 0;
    auto digit = [&](std::size_t k) { return k < s.size() && s[k] >= '0' && s[k] <= '9'; };
    if (i < s.size() && s[i] == '-')
        ++i;
    if (!digit(i))
        return false;
    if (s[i] == '0')
        ++i;
    else
        while (digit(i))
            ++i;
    if (i < s.size() && s[i] == '.') {
        ++i;
        if (!digit(i))
            return false;
        while (digit(i))
            ++i;
    }
    if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
        ++i;
        if (i < s.size() && (s[i] == '+' || s[i] == '-'))
            ++i;
        if (!digit(i))
            return false;
        while (digit(i))
            ++i;
    }
    return i == s.size();
}

} // namespace

const std::optional<std::string>* cell(const result_table& t, std::size_t row, std::size_t col) {
    if (row >= t.rows.size() || col >= t.rows[row].size())
        return nullptr;
    return &t.rows[row][col];
}

std::optional<std::int64_t> int_at(const result_table& t, std::size_t row, std::size_t col) {
    auto c = cell(t, row, col);
    if (!c || !*c)
        return std::nullopt;
    return t.binary ? decode_int8(**c) : parse_int(**c);
}

bool bool_at(const result_table& t, std::size_t row, std::size_t col) {
    auto c = cell(t, row, col);
    if (!c || !*c)
        return false;
    if (t.binary)
        return !(*c)->empty() && (**c)[0] != 0;
    return **c == "t";
}

std::string text_at(const result_table& t, std::size_t row, std::size_t col) {
    auto c = cell(t, row, col);
    return c && *c ? **c : std::string();
}

std::optional<std::string> optional_text_at(const result_table& t, std::size_t row,
                                            std::size_t col) {
    auto c = cell(t, row, col);
    return c ? *c : std::nullopt;
}

// The value of the column named `name` (NULL, or no such column: nullopt).
std::optional<std::string> named_at(const result_table& t, std::size_t row, std::string_view name) {
    for (std::size_t c = 0; c < t.columns.size(); ++c)
        if (t.columns[c].name == name) {
            auto v = cell(t, row, c);
            return v ? *v : std::nullopt;
        }
    return std::nullopt;
}

std::optional<std::int64_t> decode_int8(std::string_view bytes) noexcept {
    if (bytes.size() != 8)
        return std::nullopt;
    std::uint64_t v = 0;
    for (char c : bytes)
        v = (v << 8) | static_cast<unsigned char>(c);
    return static_cast<std::int64_t>(v);
}

std::optional<std::int64_t> parse_int(std::string_view text) noexcept {
    std::int64_t v = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || p != text.data() + text.size())
        return std::nullopt;
    return v;
}

bool transient_sqlstate(std::string_view s) noexcept {
    if (s.size() != 5)
        return false;
    const auto cls = s.substr(0, 2);
    return cls == "08" || cls == "53" || cls == "57" || cls == "58" || cls == "40" ||
           s == "55P03" || s == "25006";
}

namespace {

// Columns from `o` on: mismatch, pre_failed, key_lock, applied, version, created,
// seen_fence (the single statements have o = 0, the batch has its row number first).
write_mapping map_write_cells(const result_table& t, std::size_t row, std::size_t o, token_t token,
                              bool is_put) {
    write_mapping m;
    const auto seen = int_at(t, row, o + 6);
    if (bool_at(t, row, o + 0)) {
        m.result.error = errc::lock_mismatch;
        m.result.lock = text_at(t, row, o + 2);
        return m;
    }
    if (auto applied = int_at(t, row, o + 3)) {
        m.result.error = errc::ok;
        m.result.token = *applied;
        if (is_put) {
            m.result.version = int_at(t, row, o + 4).value_or(0);
            m.result.created = bool_at(t, row, o + 5);
        }
        return m;
    }
    if (seen && *seen > token) {
        m.result.error = errc::stale_token;
        m.result.current_token = *seen;
        m.result.floor = named_at(t, row, "floor");
        return m;
    }
    if (bool_at(t, row, o + 1)) {
        m.result.error = errc::precondition_failed;
        return m;
    }
    // The fence step refused the token, yet our snapshot shows a fence at or below it: a
    // concurrent transaction advanced or created the fence after our snapshot. Nothing
    // was written; a re-run sees that fence and reports it.
    m.retry = true;
    return m;
}

// A keyed row answered from the record found before applying: columns `o` (rec_same),
// then rec_created, rec_version, rec_token (the batch); the advance has only rec_same and
// rec_token (`has_put_fields` false).
std::optional<write_mapping> map_answered(const result_table& t, std::size_t row, std::size_t o,
                                          bool is_put, bool has_put_fields) {
    const auto* same = cell(t, row, o);
    if (!same || !*same)
        return std::nullopt;
    write_mapping m;
    if (!bool_at(t, row, o)) {
        m.result =
            failure<write_result>(errc::idempotency_key_reused, idempotency_key_reused_message);
        return m;
    }
    m.result.replayed = true;
    m.result.token = int_at(t, row, o + (has_put_fields ? 3 : 1)).value_or(0);
    if (is_put && has_put_fields) {
        m.result.created = bool_at(t, row, o + 1);
        m.result.version = int_at(t, row, o + 2).value_or(0);
    }
    return m;
}

} // namespace

std::optional<write_result> write_transport_failure(const exec_outcome& o) {
    return transport_failure<write_result>(o, true);
}

bool rerun_sqlstate(std::string_view s) noexcept {
    return s == sql::sqlstate_retry || s == "40P01" || s == "40001";
}

commit_verdict commit_verdict_of(const exec_outcome& o, std::size_t commit_at) {
    commit_verdict v;
    if (commit_at < o.results.size() && o.results[commit_at].ok()) {
        for (std::size_t i = 0; i < commit_at; ++i)
            if (!o.results[i].ok())
                return v; // malformed: after an error the server skips to the Sync
        v.what = commit_verdict::kind::committed;
        return v;
    }
    for (std::size_t i = 0; i <= commit_at && i < o.results.size(); ++i) {
        const auto& r = o.results[i];
        if (!r.server_error())
            continue;
        const auto cls = std::string_view(r.sqlstate).substr(0, 3);
        const bool session_ended =
            o.t != exec_outcome::transport::ok || cls == "57P" || cls.substr(0, 2) == "08";
        if (i == commit_at && session_ended) {
            v.what = commit_verdict::kind::unknown;
            return v;
        }
        v.what = commit_verdict::kind::rolled_back;
        v.error = r;
        return v;
    }
    // Any transport failure, even before the Sync left: the server runs COMMIT when its
    // Execute arrives, so a partly sent pipeline may have committed.
    if (o.t != exec_outcome::transport::ok)
        v.what = commit_verdict::kind::unknown;
    return v;
}

write_mapping map_write_row(const result_table& t, token_t token, bool is_put) {
    // Columns: mismatch, pre_failed, key_lock, applied, version, created, seen_fence, raced.
    if (t.rows.size() != 1 || t.columns.size() < 7) {
        write_mapping m;
        m.result = failure<write_result>(errc::internal, "unexpected write statement result");
        return m;
    }
    return map_write_cells(t, 0, 0, token, is_put);
}

std::vector<write_mapping> map_batch(const exec_outcome& o, const std::vector<batch_row>& rows,
                                     std::size_t leading) {
    std::vector<write_mapping> out(rows.size());
    auto all = [&](const write_mapping& m) {
        for (auto& r : out)
            r = m;
        return out;
    };
    // A server error anywhere aborted the pipeline's one transaction: definite, whatever
    // happened to the connection afterwards.
    for (const auto& r : o.results) {
        if (!r.server_error())
            continue;
        write_mapping m;
        if (rows.size() > 1) {
            m.retry = m.alone = true;
        } else if (rerun_sqlstate(r.sqlstate)) {
            m.retry = true;
        } else {
            m.result = server_failure<write_result>(r);
        }
        return all(m);
    }
    if (auto f = transport_failure<write_result>(o, true)) {
        write_mapping m;
        m.result = std::move(*f);
        return all(m);
    }
    const std::size_t at = leading;
    // Columns: n, mismatch, pre_failed, key_lock, applied, version, created, seen_fence,
    // unwritten, rec_same, rec_created, rec_version, rec_token.
    bool leading_ok = o.results.size() == at + 2;
    for (std::size_t i = 0; leading_ok && i < at; ++i)
        leading_ok = o.results[i].ok();
    if (!leading_ok || !o.results[at].ok() ||
        o.results[at + 1].st != result_table::status::pipeline_sync ||
        o.results[at].rows.size() != rows.size() || o.results[at].columns.size() < 13) {
        write_mapping m;
        m.result = failure<write_result>(errc::internal, "unexpected batch result");
        return all(m);
    }
    const auto& t = o.results[at];
    for (std::size_t i = 0; i < rows.size(); ++i) {
        if (int_at(t, i, 0) != static_cast<std::int64_t>(i + 1)) {
            write_mapping m;
            m.result = failure<write_result>(errc::internal, "batch result out of order");
            return all(m);
        }
        // Columns 9..12: rec_same, rec_created, rec_version, rec_token.
        if (auto answered = map_answered(t, i, 9, rows[i].is_put, true))
            out[i] = std::move(*answered);
        else
            out[i] = map_write_cells(t, i, 1, rows[i].token, rows[i].is_put);
    }
    return out;
}

write_mapping map_advance_row(const result_table& t, token_t token) {
    write_mapping m;
    if (t.rows.size() != 1 || t.columns.size() < 2) {
        m.result = failure<write_result>(errc::internal, "unexpected fence statement result");
        return m;
    }
    // advance_idem_sql: applied, seen_fence, raced, rec_same, rec_token.
    if (t.columns.size() >= 5)
        if (auto answered = map_answered(t, 0, 3, false, false))
            return std::move(*answered);
    if (auto applied = int_at(t, 0, 0)) {
        m.result.token = *applied;
        return m;
    }
    if (auto seen = int_at(t, 0, 1); seen && *seen > token) {
        m.result.error = errc::stale_token;
        m.result.current_token = *seen;
        m.result.floor = named_at(t, 0, "floor");
        return m;
    }
    m.retry = true;
    return m;
}

write_mapping map_write(const exec_outcome& o, token_t token, bool is_put, bool is_advance) {
    write_mapping m;
    // A server error for the statement itself is definite (the statement's transaction
    // aborted), even if the connection died right after it.
    if (!o.results.empty() && o.results.front().server_error()) {
        const auto& r = o.results.front();
        // FKR01 (a concurrent create), a deadlock or a serialization failure: the
        // statement rolled back; a re-run sees the newer state.
        if (rerun_sqlstate(r.sqlstate)) {
            m.retry = true;
            return m;
        }
        m.result = server_failure<write_result>(r);
        return m;
    }
    if (auto f = transport_failure<write_result>(o, true)) {
        m.result = std::move(*f);
        return m;
    }
    if (o.results.empty() || !o.results.front().ok()) {
        m.result = failure<write_result>(
            errc::internal, o.results.empty() ? "no result" : o.results.front().message);
        return m;
    }
    return is_advance ? map_advance_row(o.results.front(), token)
                      : map_write_row(o.results.front(), token, is_put);
}

idem_lookup map_idem_get(const exec_outcome& o) {
    idem_lookup l;
    auto fail = [&](const auto& f) {
        l.error = f.error;
        l.message = f.message;
        return l;
    };
    if (!o.results.empty() && o.results.front().server_error())
        return fail(server_failure<write_result>(o.results.front()));
    if (auto f = transport_failure<write_result>(o, false))
        return fail(*f);
    if (o.results.empty() || !o.results.front().ok() || o.results.front().columns.size() < 6)
        return fail(failure<write_result>(errc::internal, "unexpected idempotency lookup result"));
    const auto& t = o.results.front();
    if (t.rows.empty())
        return l;
    // Columns: fingerprint, created, version, token, rows_affected, rows.
    idem_record r;
    r.fingerprint = text_at(t, 0, 0);
    r.created = bool_at(t, 0, 1);
    r.version = int_at(t, 0, 2).value_or(0);
    r.token = int_at(t, 0, 3).value_or(0);
    r.rows_affected = int_at(t, 0, 4).value_or(0);
    r.rows_json = text_at(t, 0, 5);
    l.record = std::move(r);
    return l;
}

idem_usage_result map_idem_usage(const exec_outcome& o) {
    idem_usage_result u;
    auto fail = [&](const write_result& f) {
        u.error = errc::unavailable;
        u.message = f.message;
        return u;
    };
    if (!o.results.empty() && o.results.front().server_error())
        return fail(server_failure<write_result>(o.results.front()));
    if (auto f = transport_failure<write_result>(o, false))
        return fail(*f);
    if (o.results.empty() || !o.results.front().ok() || o.results.front().columns.size() < 4)
        return fail(failure<write_result>(errc::internal, "unexpected idempotency usage result"));
    const auto& t = o.results.front();
    // Columns: scope, records, bytes, oldest commit (Unix ms).
    for (std::size_t row = 0; row < t.rows.size(); ++row)
        u.scopes.push_back({text_at(t, row, 0),
                            static_cast<std::uint64_t>(int_at(t, row, 1).value_or(0)),
                            static_cast<std::uint64_t>(int_at(t, row, 2).value_or(0)),
                            int_at(t, row, 3).value_or(0)});
    return u;
}

write_result replay_write(const idem_record& rec, std::string_view fingerprint, bool is_put) {
    return replay_from_record(rec.fingerprint, fingerprint, is_put && rec.created,
                              is_put ? rec.version : 0, rec.token);
}

operation_result replay_operation(const idem_record& rec, std::string_view fingerprint) {
    if (rec.fingerprint != fingerprint)
        return failure<operation_result>(errc::idempotency_key_reused,
                                         idempotency_key_reused_message);
    operation_result r;
    r.replayed = true;
    r.token = rec.token;
    r.rows_affected = rec.rows_affected;
    r.rows_json = rec.rows_json;
    return r;
}

object_result map_get(const exec_outcome& o, bool with_body) {
    if (!o.results.empty() && o.results.front().server_error())
        return server_failure<object_result>(o.results.front());
    if (auto f = transport_failure<object_result>(o, false))
        return std::move(*f);
    if (o.results.empty() || !o.results.front().ok())
        return failure<object_result>(errc::internal, "unexpected read result");
    const auto& t = o.results.front();
    if (t.rows.empty())
        return failure<object_result>(errc::not_found, "no such key");
    // Columns: lock, token, version, content_type, size[, body].
    object_result r;
    r.lock = text_at(t, 0, 0);
    r.token = int_at(t, 0, 1).value_or(0);
    r.version = int_at(t, 0, 2).value_or(0);
    r.content_type = text_at(t, 0, 3);
    r.size = static_cast<std::uint64_t>(int_at(t, 0, 4).value_or(0));
    if (with_body)
        r.body = text_at(t, 0, 5);
    return r;
}

fence_result map_read_fence(const exec_outcome& o, std::string lock) {
    if (!o.results.empty() && o.results.front().server_error())
        return server_failure<fence_result>(o.results.front());
    if (auto f = transport_failure<fence_result>(o, false))
        return std::move(*f);
    if (o.results.empty() || !o.results.front().ok())
        return failure<fence_result>(errc::internal, "unexpected read result");
    const auto& t = o.results.front();
    // Columns: token, updated_ms (the own fence), floor, floor_token, floor_updated_ms.
    if (t.rows.size() != 1 || t.columns.size() < 5)
        return failure<fence_result>(errc::internal, "unexpected read result");
    const auto own = int_at(t, 0, 0);
    const auto floor_token = int_at(t, 0, 3);
    const auto* floor_prefix = cell(t, 0, 2);
    fence_result r;
    r.fence.lock = std::move(lock);
    if (floor_token && floor_prefix && *floor_prefix && (!own || *floor_token > *own)) {
        r.fence.token = *floor_token;
        r.fence.updated_at_ms = int_at(t, 0, 4).value_or(0);
        r.fence.floor = **floor_prefix;
        return r;
    }
    if (!own)
        return failure<fence_result>(errc::not_found, "no fence for this lock");
    r.fence.token = *own;
    r.fence.updated_at_ms = int_at(t, 0, 1).value_or(0);
    return r;
}

write_mapping map_raise_floor(const exec_outcome& o, const floor_request& req) {
    constexpr std::size_t leading = 3; // BEGIN and the two LOCKs
    write_mapping m;
    const auto v = commit_verdict_of(o, leading + 1);
    if (v.what == commit_verdict::kind::rolled_back) {
        if (rerun_sqlstate(v.error.sqlstate))
            m.retry = true;
        else
            m.result = server_failure<write_result>(v.error);
        return m;
    }
    if (v.what == commit_verdict::kind::unknown) {
        m.result = failure<write_result>(
            errc::outcome_unknown,
            "database connection lost while committing the floor; it may or may not have "
            "been raised (raising it again to the same token answers 409 if it was)");
        return m;
    }
    // Columns: applied, floor_token, raced, rec_same, rec_token, floor_count.
    if (v.what != commit_verdict::kind::committed || o.results[leading].rows.size() != 1 ||
        o.results[leading].columns.size() < 6) {
        m.result = failure<write_result>(errc::internal, "unexpected floor statement result");
        return m;
    }
    const auto& t = o.results[leading];
    if (auto answered = map_answered(t, 0, 3, false, false))
        return std::move(*answered);
    if (auto applied = int_at(t, 0, 0)) {
        m.result.token = *applied;
        return m;
    }
    if (auto floor = int_at(t, 0, 1)) {
        if (*floor >= req.token) {
            m.result.error = errc::stale_token;
            m.result.current_token = *floor;
            return m;
        }
    } else if (int_at(t, 0, 5).value_or(0) >= static_cast<std::int64_t>(max_floors)) {
        m.result = failure<write_result>(errc::invalid_request,
                                         "this store already holds the maximum of " +
                                             std::to_string(max_floors) +
                                             " fence floors; raise an existing prefix's floor "
                                             "(a shorter prefix covers more locks) instead of "
                                             "adding one");
        return m;
    }
    // Raises are serialized (sql/floors.cpp), so the snapshot's floor is the one the
    // upsert met: not reached. Re-run rather than guess.
    m.retry = true;
    return m;
}

floors_result map_list_floors(const exec_outcome& o) {
    if (!o.results.empty() && o.results.front().server_error())
        return server_failure<floors_result>(o.results.front());
    if (auto f = transport_failure<floors_result>(o, false))
        return std::move(*f);
    if (o.results.empty() || !o.results.front().ok() || o.results.front().columns.size() < 3)
        return failure<floors_result>(errc::internal, "unexpected floors result");
    const auto& t = o.results.front();
    floors_result r;
    r.floors.reserve(t.rows.size());
    for (std::size_t i = 0; i < t.rows.size(); ++i)
        r.floors.push_back(
            {text_at(t, i, 0), int_at(t, i, 1).value_or(0), int_at(t, i, 2).value_or(0)});
    return r;
}

list_result map_list(const exec_outcome& o, std::size_t limit) {
    if (!o.results.empty() && o.results.front().server_error())
        return server_failure<list_result>(o.results.front());
    if (auto f = transport_failure<list_result>(o, false))
        return std::move(*f);
    if (o.results.empty() || !o.results.front().ok())
        return failure<list_result>(errc::internal, "unexpected list result");
    const auto& t = o.results.front();
    list_result r;
    const std::size_t n = std::min(limit, t.rows.size());
    r.fences.reserve(n);
    for (std::size_t i = 0; i < n; ++i)
        r.fences.push_back({text_at(t, i, 0), int_at(t, i, 1).value_or(0),
                            int_at(t, i, 2).value_or(0), std::nullopt});
    if (t.rows.size() > limit && n > 0)
        r.next = r.fences.back().lock;
    return r;
}

operation_result map_statement_failure(const result_table& r, bool expose_errors) {
    auto f =
        transient_sqlstate(r.sqlstate)
            ? failure<operation_result>(errc::unavailable, "database error " + r.sqlstate + ": " +
                                                               client_text(r, expose_errors))
            : failure<operation_result>(
                  errc::operation_failed,
                  expose_errors ? r.message : "the statement failed: " + client_text(r, false));
    f.sqlstate = r.sqlstate;
    f.server_message = server_text(r);
    return f;
}

operation_result map_statement_rows(const result_table& t, token_t token) {
    operation_result r;
    r.token = token;
    r.rows_affected = parse_int(t.cmd_tuples).value_or(0);
    r.rows_json = rows_to_json(t);
    return r;
}

operation_result map_operation(const exec_outcome& o, token_t token, bool expose_errors) {
    // A server error for the fence step or the user's statement aborted the pipeline's
    // implicit transaction: definite, whatever happened to the connection afterwards.
    if (!o.results.empty() && o.results[0].server_error()) {
        const auto& r = o.results[0];
        if (r.sqlstate == sql::sqlstate_stale) {
            operation_result s;
            s.error = errc::stale_token;
            s.current_token = parse_int(r.detail).value_or(0);
            if (r.hint.starts_with(floor_hint))
                s.floor = r.hint.substr(floor_hint.size());
            return s;
        }
        return server_failure<operation_result>(r);
    }
    if (o.results.size() >= 2 && o.results[0].ok() && o.results[1].server_error())
        return map_statement_failure(o.results[1], expose_errors);
    if (auto f = transport_failure<operation_result>(o, true))
        return std::move(*f);
    if (o.results.size() < 3 || !o.results[0].ok() || !o.results[1].ok() ||
        o.results[2].st != result_table::status::pipeline_sync)
        return failure<operation_result>(errc::internal, "unexpected operation result");
    return map_statement_rows(o.results[1], token);
}

operation_result map_prepare_failure(const result_table& r, std::string_view name,
                                     bool expose_errors) {
    operation_result f;
    // No SQLSTATE: libpq's own message about the connection, not the server's.
    const bool from_server = !r.sqlstate.empty();
    f.error =
        transient_sqlstate(r.sqlstate) || !from_server ? errc::unavailable : errc::operation_failed;
    f.sqlstate = r.sqlstate;
    f.message = "operation '" + std::string{name} +
                "' does not prepare: " + (from_server ? client_text(r, expose_errors) : r.message);
    if (from_server)
        f.server_message = server_text(r);
    return f;
}

std::string rows_to_json(const result_table& t) {
    std::string out = "[";
    for (std::size_t i = 0; i < t.rows.size(); ++i) {
        if (i)
            out += ',';
        out += '{';
        for (std::size_t c = 0; c < t.columns.size(); ++c) {
            if (c)
                out += ',';
            fence::append_json_string(out, t.columns[c].name);
            out += ':';
            const auto* v = cell(t, i, c);
            if (!v || !*v) {
                out += "null";
                continue;
            }
            const std::string& s = **v;
            switch (t.columns[c].oid) {
            case oid_int2:
            case oid_int4:
            case oid_int8:
            case oid_oid:
            case oid_float4:
            case oid_float8:
            case oid_numeric:
                if (is_json_number(s))
                    out += s;
                else
                    fence::append_json_string(out, s);
                break;
            case oid_bool:
                out += s == "t" ? "true" : "false";
                break;
            case oid_json:
            case oid_jsonb:
                out += s;
                break;
            default:
                fence::append_json_string(out, s);
            }
        }
        out += '}';
    }
    out += ']';
    return out;
}

} // namespace fk::store::pg
