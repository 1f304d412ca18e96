#pragma once
// The named operations (config "operations"): one prepared statement each, named by its
// position (sql::op_statement_name), run as [fence step, the operator's statement, Sync]
// in one pipeline. Owns the registry and what is learnt about each statement (its
// parameter count); which statements a connection has prepared lives on the connection.
// find()/param_count() are safe from any thread (the registry is fixed at construction,
// the count an atomic); prepare_all() and run_on() run on the connection's strand. It
// never acquires or releases a connection: the caller (postgres_store) does.

#include "backends/postgres/detail/connection.hpp"
#include "config/settings.hpp"

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fk::store::pg {

class operations {
public:
    struct entry {
        std::string name;
        std::string sql;
        std::string statement; // fk_op_<index>
        std::size_t index = 0;
        bool expose_errors = false;
        mutable std::atomic<int> nparams{-1}; // -1 until a connection has described the statement
    };

    // `ops` in the config's (sorted) order, which fixes each one's statement name.
    explicit operations(const std::map<std::string, config::operation>& ops,
                        detail::millis timeout);

    const entry* find(const std::string& name) const;
    // The parameter count, once a connection has prepared the statement.
    std::optional<std::size_t> param_count(const std::string& name) const;
    std::size_t size() const noexcept { return entries_.size(); }

    // A call with the wrong number of parameters (when the count is known): the answer,
    // which names the operation and both counts.
    static std::optional<operation_result> check_param_count(const entry& op, std::size_t got);

    // On `c`'s strand, at connection set-up: prepares every operation. A statement that
    // does not prepare (a table not created yet) is not fatal: it is prepared again when
    // called, and its error goes to that caller; with `log_failures` (the first
    // connection) it is logged once. Empty on success, else the transport failure.
    net::awaitable<std::string> prepare_all(detail::connection& c, bool log_failures);

    // On `c`'s strand: prepares `op` here if needed, checks the parameter count, then the
    // pipeline; maps the outcome (result.hpp).
    net::awaitable<operation_result> run_on(detail::connection& c, const entry& op,
                                            operation_request req);

    // On `c`'s strand, for a request with an Idempotency-Key: [BEGIN, fence step, the
    // statement, Sync], then, only when both succeeded, [the record with the rows as
    // returned, COMMIT, Sync]: the record commits with the fence step and the statement,
    // and a failed operation records nothing (ROLLBACK). nullopt when an unexpired record
    // under the key committed meanwhile (FKR01): everything rolled back; the caller looks
    // the record up again.
    net::awaitable<std::optional<operation_result>> run_keyed_on(detail::connection& c,
                                                                 const entry& op,
                                                                 const operation_request& req,
                                                                 std::chrono::seconds retention);

    // On `c`'s strand, outside any transaction: prepares `op` on `c` if needed and checks
    // the parameter count: an answer when the call cannot go ahead (also used by a
    // transaction for each of its operation ops, before its BEGIN).
    net::awaitable<std::optional<operation_result>> ready_on(detail::connection& c, const entry& op,
                                                             std::size_t nparams);

private:
    // Ends the transaction a keyed operation left open (after an error): the connection
    // is reusable only once it is idle again (detail::connection::reusable).
    net::awaitable<void> roll_back(detail::connection& c);
    // Prepares one operation on `c` and learns its parameter count once.
    net::awaitable<exec_outcome> prepare(detail::connection& c, const entry& op);

    std::vector<std::unique_ptr<entry>> entries_;
    detail::millis timeout_;
};

} // namespace fk::store::pg
