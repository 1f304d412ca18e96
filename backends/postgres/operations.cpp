#include "backends/postgres/operations.hpp"

#include "backends/log/logging.hpp"
#include "backends/postgres/result.hpp"
#include "backends/postgres/sql.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace fk::store::pg {

operations::operations(const std::map<std::string, config::operation>& ops, detail::millis timeout)
    : timeout_(timeout) {
    for (const auto& [name, op] : ops) {
        auto e = std::make_unique<entry>();
        e->name = name;
        e->sql = op.sql;
        e->expose_errors = op.expose_errors;
        e->index = entries_.size();
        e->statement = sql::op_statement_name(e->index);
        entries_.push_back(std::move(e));
    }
}

const operations::entry* operations::find(const std::string& name) const {
    auto it = std::find_if(entries_.begin(), entries_.end(),
                           [&](const auto& e) { return e->name == name; });
    return it == entries_.end() ? nullptr : it->get();
}

std::optional<std::size_t> operations::param_count(const std::string& name) const {
    const entry* op = find(name);
    const int n = op ? op->nparams.load() : -1;
    return n < 0 ? std::nullopt : std::optional<std::size_t>(static_cast<std::size_t>(n));
}

std::optional<operation_result> operations::check_param_count(const entry& op, std::size_t got) {
    const int n = op.nparams.load();
    if (n < 0 || static_cast<std::size_t>(n) == got)
        return std::nullopt;
    operation_result f;
    f.error = errc::invalid_request;
    f.message = "operation '" + op.name + "' takes " + std::to_string(n) + " parameters, got " +
                std::to_string(got);
    return f;
}

net::awaitable<exec_outcome> operations::prepare(detail::connection& c, const entry& op) {
    auto o = co_await c.prepare(op.statement.c_str(), op.sql, timeout_);
    if (o.t != exec_outcome::transport::ok || o.results.empty() || !o.results.front().ok())
        co_return o;
    if (op.nparams.load() < 0) {
        auto d = co_await c.describe(op.statement.c_str(), timeout_);
        if (d.t != exec_outcome::transport::ok)
            co_return d;
        if (!d.results.empty() && d.results.front().ok())
            op.nparams.store(
                static_cast<int>(parse_int(d.results.front().cmd_tuples).value_or(-1)));
    }
    c.op_prepared[op.index] = true;
    co_return o;
}

net::awaitable<std::string> operations::prepare_all(detail::connection& c, bool log_failures) {
    c.op_prepared.assign(entries_.size(), false);
    for (const auto& e : entries_) {
        auto o = co_await prepare(c, *e);
        if (o.t != exec_outcome::transport::ok)
            co_return "prepare operation: " + o.error;
        if (!o.results.empty() && !o.results.front().ok() && log_failures)
            logging::write(logging::level::warn, "operation does not prepare",
                           {{"operation", e->name},
                            {"sqlstate", o.results.front().sqlstate},
                            {"error", o.results.front().message}});
    }
    co_return std::string();
}

net::awaitable<std::optional<operation_result>>
operations::ready_on(detail::connection& c, const entry& op, std::size_t nparams) {
    if (!c.op_prepared[op.index]) {
        auto o = co_await prepare(c, op);
        if (o.t != exec_outcome::transport::ok)
            co_return unavailable<operation_result>("database unavailable: " + o.error);
        if (!o.results.empty() && !o.results.front().ok())
            co_return map_prepare_failure(o.results.front(), op.name, op.expose_errors);
    }
    co_return check_param_count(op, nparams);
}

net::awaitable<operation_result> operations::run_on(detail::connection& c, const entry& op,
                                                    operation_request req) {
    if (auto answer = co_await ready_on(c, op, req.params.size()))
        co_return std::move(*answer);
    const auto fence_params = sql::op_fence_params(req.lock, req.token);
    const std::vector<detail::pipeline_step> steps{{sql::name::op_fence, &fence_params},
                                                   {op.statement.c_str(), nullptr, &req.params}};
    auto o = co_await c.exec_pipeline(steps, timeout_);
    co_return map_operation(o, req.token, op.expose_errors);
}

net::awaitable<void> operations::roll_back(detail::connection& c) {
    // A failure here leaves the connection unusable; the pool then drops it, and the
    // server rolls back when the session ends.
    co_await c.exec_simple("ROLLBACK", timeout_);
}

net::awaitable<std::optional<operation_result>>
operations::run_keyed_on(detail::connection& c, const entry& op, const operation_request& req,
                         std::chrono::seconds retention) {
    if (auto answer = co_await ready_on(c, op, req.params.size()))
        co_return std::move(*answer);
    static const sql::param_list none;
    const auto fence_params = sql::op_fence_params(req.lock, req.token);
    const std::vector<detail::pipeline_step> steps{{sql::name::begin, &none},
                                                   {sql::name::op_fence, &fence_params},
                                                   {op.statement.c_str(), nullptr, &req.params}};
    auto o = co_await c.exec_pipeline(steps, timeout_);
    // Nothing commits before our COMMIT: a lost or timed-out exchange is definite (the
    // connection is dropped and the server rolls back).
    if (o.t != exec_outcome::transport::ok)
        co_return unavailable<operation_result>(
            o.t == exec_outcome::transport::timeout_after_send ||
                    o.t == exec_outcome::transport::timeout_unsent
                ? "database did not answer in time; nothing was applied"
                : "database unavailable: " + o.error);
    if (o.results.empty() || !o.results.front().ok()) {
        co_await roll_back(c);
        co_return failure<operation_result>(errc::internal, "BEGIN failed");
    }
    o.results.erase(o.results.begin()); // BEGIN's: now as map_operation expects
    auto r = map_operation(o, req.token, op.expose_errors);
    if (r.error != errc::ok) {
        co_await roll_back(c);
        co_return r;
    }
    const auto record_params =
        sql::op_record_params(*req.idem, r.token, r.rows_affected, r.rows_json, retention);
    const std::vector<detail::pipeline_step> finish{{sql::name::op_record, &record_params},
                                                    {sql::name::commit, &none}};
    auto f = co_await c.exec_pipeline(finish, timeout_);
    const auto v = commit_verdict_of(f, finish.size() - 1);
    // A server error for the record (FKR01: the key's record committed meanwhile), or an
    // ordinary one for the COMMIT: the transaction did not commit.
    if (v.what == commit_verdict::kind::rolled_back) {
        co_await roll_back(c);
        if (v.error.sqlstate == sql::sqlstate_retry)
            co_return std::nullopt;
        co_return failure<operation_result>(transient_sqlstate(v.error.sqlstate) ? errc::unavailable
                                                                                 : errc::internal,
                                            "database error " + v.error.sqlstate + ": " +
                                                v.error.message + "; nothing was applied");
    }
    if (v.what == commit_verdict::kind::unknown)
        co_return failure<operation_result>(
            errc::outcome_unknown, "database connection lost while committing; the operation "
                                   "may or may not have been applied (a retry with the same "
                                   "Idempotency-Key tells)");
    if (v.what != commit_verdict::kind::committed)
        co_return failure<operation_result>(errc::internal, "unexpected commit result");
    co_return r;
}

} // namespace fk::store::pg
