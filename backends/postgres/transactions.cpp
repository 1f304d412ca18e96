#include "backends/postgres/transactions.hpp"

#include "backends/postgres/sql.hpp"

namespace fk::store::pg {
namespace {

using transport = exec_outcome::transport;

txn_result refused(errc e, std::size_t op_index, std::string message = {}) {
    txn_result r;
    r.error = e;
    r.op_index = op_index;
    r.message = std::move(message);
    return r;
}

// An operation op's answer from operations::ready_on or its statement, as the
// transaction's.
txn_result from_operation(operation_result o, std::size_t op_index) {
    auto r = refused(o.error, op_index, std::move(o.message));
    r.sqlstate = std::move(o.sqlstate);
    r.server_message = std::move(o.server_message);
    return r;
}

txn_attempt answer(txn_result r) {
    txn_attempt a;
    a.result = std::move(r);
    return a;
}

txn_attempt rerun() {
    txn_attempt a;
    a.rerun = true;
    return a;
}

// Ends the transaction a failed step left open. A failure here leaves the connection
// unusable (not idle): the pool drops it, and the server rolls back when the session ends.
net::awaitable<void> roll_back(detail::connection& c, detail::millis timeout) {
    co_await c.exec_simple("ROLLBACK", timeout);
}

// The failure of an exchange sent before COMMIT, if it failed: nothing committed in any
// case (a server error aborted the transaction; a lost connection makes the server roll
// it back).
struct step_failure {
    bool failed = false;
    txn_attempt attempt;
};

} // namespace

txn_checks map_txn_checks(const result_table& t, const std::vector<txn_op>& ops) {
    txn_checks out;
    // Columns: n, mismatch, key_lock, stale, current_token, floor, pre_failed, token,
    // version, created, unwritten.
    if (!t.ok() || t.rows.size() != ops.size() || t.columns.size() < 11) {
        out.refusal = failure<txn_result>(errc::internal, "unexpected transaction result");
        return out;
    }
    out.results.resize(ops.size());
    for (std::size_t i = 0; i < ops.size(); ++i) {
        if (int_at(t, i, 0) != static_cast<std::int64_t>(i + 1)) {
            out.refusal = failure<txn_result>(errc::internal, "transaction result out of order");
            out.results.clear();
            return out;
        }
        if (bool_at(t, i, 1)) {
            out.refusal = refused(errc::lock_mismatch, i);
            out.refusal.lock = text_at(t, i, 2);
            out.results.clear();
            return out;
        }
        if (bool_at(t, i, 3)) {
            const auto current = int_at(t, i, 4);
            out.results.clear();
            // Refused by a fence that the snapshot does not show: committed after it. A
            // re-run sees it and reports it.
            if (!current || *current <= ops[i].token) {
                out.what = txn_checks::outcome::rerun;
                return out;
            }
            out.refusal = refused(errc::stale_token, i);
            out.refusal.current_token = *current;
            out.refusal.floor = optional_text_at(t, i, 5);
            return out;
        }
        if (bool_at(t, i, 6)) {
            out.refusal = refused(errc::precondition_failed, i);
            out.results.clear();
            return out;
        }
        auto& r = out.results[i];
        r.token = int_at(t, i, 7).value_or(0);
        r.version = int_at(t, i, 8).value_or(0);
        r.created = bool_at(t, i, 9);
    }
    out.what = txn_checks::outcome::passed;
    return out;
}

txn_result replay_txn(const idem_record& rec, std::string_view fingerprint) {
    if (rec.fingerprint != fingerprint)
        return failure<txn_result>(errc::idempotency_key_reused, idempotency_key_reused_message);
    txn_result r;
    r.replayed = true;
    r.results_json = rec.rows_json;
    return r;
}

namespace {

// An exchange sent before COMMIT: a server error (the first one; `op_at[i]` names the op
// whose statement result i is, if it is one) rolls back; then a lost connection, then a
// malformed answer.
net::awaitable<step_failure> check_step(detail::connection& c, const exec_outcome& o,
                                        detail::millis timeout,
                                        const std::vector<std::optional<std::size_t>>& op_at,
                                        const std::vector<const operations::entry*>& entries) {
    step_failure s;
    for (std::size_t i = 0; i < o.results.size(); ++i) {
        const auto& r = o.results[i];
        if (!r.server_error())
            continue;
        s.failed = true;
        co_await roll_back(c, timeout);
        if (rerun_sqlstate(r.sqlstate)) {
            s.attempt = rerun();
        } else if (i < op_at.size() && op_at[i]) {
            const std::size_t op = *op_at[i];
            s.attempt =
                answer(from_operation(map_statement_failure(r, entries[op]->expose_errors), op));
        } else {
            s.attempt = answer(failure<txn_result>(
                transient_sqlstate(r.sqlstate) ? errc::unavailable : errc::internal,
                "database error " + r.sqlstate + ": " + r.message + "; nothing was applied"));
        }
        co_return s;
    }
    if (o.t != transport::ok) {
        s.failed = true;
        s.attempt = answer(failure<txn_result>(
            errc::unavailable,
            o.t == transport::timeout_after_send || o.t == transport::timeout_unsent
                ? "database did not answer in time; nothing was applied"
                : "database unavailable: " + o.error + "; nothing was applied"));
        co_return s;
    }
    bool shape_ok =
        !o.results.empty() && o.results.back().st == result_table::status::pipeline_sync;
    for (std::size_t i = 0; shape_ok && i + 1 < o.results.size(); ++i)
        shape_ok = o.results[i].ok();
    if (!shape_ok) {
        s.failed = true;
        co_await roll_back(c, timeout);
        s.attempt = answer(failure<txn_result>(errc::internal, "unexpected transaction result"));
    }
    co_return s;
}

} // namespace

net::awaitable<txn_attempt> run_txn_on(detail::connection& c, operations& ops,
                                       const std::vector<const operations::entry*>& entries,
                                       const txn_request& req, std::chrono::seconds retention,
                                       detail::millis timeout) {
    // Outside the transaction: a statement that does not prepare must not abort it.
    for (std::size_t i = 0; i < req.ops.size(); ++i)
        if (entries[i])
            if (auto a = co_await ops.ready_on(c, *entries[i], req.ops[i].params.size()))
                co_return answer(from_operation(std::move(*a), i));

    static const sql::param_list none;
    static const std::vector<std::optional<std::size_t>> no_ops;
    const auto params = sql::txn_params(req.ops);
    const std::vector<detail::pipeline_step> check{
        {sql::name::begin, &none}, {sql::name::batch_begin, &none}, {sql::name::txn, &params}};
    auto o = co_await c.exec_pipeline(check, timeout);
    if (auto s = co_await check_step(c, o, timeout, no_ops, entries); s.failed)
        co_return std::move(s.attempt);
    if (o.results.size() != check.size() + 1) {
        co_await roll_back(c, timeout);
        co_return answer(failure<txn_result>(errc::internal, "unexpected transaction result"));
    }
    auto checks = map_txn_checks(o.results[2], req.ops);
    if (checks.what != txn_checks::outcome::passed) {
        co_await roll_back(c, timeout);
        if (checks.what == txn_checks::outcome::rerun)
            co_return rerun();
        co_return answer(std::move(checks.refusal));
    }

    // The operations' statements, in op order, after every op's checks passed. The first
    // that fails aborts the rest.
    // op_at: the op whose statement each result of this exchange is (none for the first).
    std::vector<detail::pipeline_step> run{{sql::name::txn_restore_settings, &none}};
    std::vector<std::optional<std::size_t>> op_at{std::nullopt};
    for (std::size_t i = 0; i < req.ops.size(); ++i) {
        if (!entries[i])
            continue;
        run.push_back({entries[i]->statement.c_str(), nullptr, &req.ops[i].params});
        op_at.push_back(i);
    }
    if (op_at.size() > 1) {
        auto r = co_await c.exec_pipeline(run, timeout);
        if (auto s = co_await check_step(c, r, timeout, op_at, entries); s.failed)
            co_return std::move(s.attempt);
        if (r.results.size() != run.size() + 1) {
            co_await roll_back(c, timeout);
            co_return answer(failure<txn_result>(errc::internal, "unexpected transaction result"));
        }
        for (std::size_t j = 1; j < op_at.size(); ++j) {
            const std::size_t i = *op_at[j];
            auto m = map_statement_rows(r.results[j], checks.results[i].token);
            checks.results[i].rows_affected = m.rows_affected;
            checks.results[i].rows_json = std::move(m.rows_json);
        }
    }

    txn_attempt done;
    done.result.results_json = render_txn_results(req.ops, checks.results);
    std::vector<detail::pipeline_step> finish;
    sql::param_list record;
    if (req.idem) {
        record = sql::op_record_params(*req.idem, 0, 0, done.result.results_json, retention);
        finish.push_back({sql::name::op_record, &record});
    }
    finish.push_back({sql::name::commit, &none});
    auto f = co_await c.exec_pipeline(finish, timeout);
    const auto v = commit_verdict_of(f, finish.size() - 1);
    // A server error for the record (FKR01: a record under the key committed meanwhile),
    // or an ordinary one for the COMMIT: the transaction did not commit.
    if (v.what == commit_verdict::kind::rolled_back) {
        co_await roll_back(c, timeout);
        if (rerun_sqlstate(v.error.sqlstate))
            co_return rerun();
        co_return answer(failure<txn_result>(
            transient_sqlstate(v.error.sqlstate) ? errc::unavailable : errc::internal,
            "database error " + v.error.sqlstate + ": " + v.error.message +
                "; nothing was applied"));
    }
    if (v.what == commit_verdict::kind::unknown)
        co_return answer(failure<txn_result>(
            errc::outcome_unknown,
            "database connection lost while committing; the transaction may or may not have "
            "been applied (a retry with the same Idempotency-Key tells)"));
    if (v.what != commit_verdict::kind::committed)
        co_return answer(failure<txn_result>(errc::internal, "unexpected commit result"));
    done.results = std::move(checks.results);
    co_return done;
}

} // namespace fk::store::pg
