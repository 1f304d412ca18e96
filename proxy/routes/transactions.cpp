// POST /v1/transactions (docs/api.md#post-v1transactions): one store call decides every
// op of the body.
#include "proxy/routes/routes.hpp"

#include "backends/log/logging.hpp"
#include "proxy/detail/txn_body.hpp"
#include "proxy/routes/pipeline.hpp"
#include "proxy/scopes.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/field.hpp>

#include <algorithm>

namespace fk::proxy::routes {

checked<txn_defaults> txn_defaults_of(const request& req) {
    auto token = optional_token_of(req);
    if (token.failure)
        return {std::nullopt, std::move(token.failure)};
    txn_defaults d{*token.value, std::nullopt};
    if (fields_named(req, fencing_lock_field).count > 0) {
        auto l = lock_of(req, std::nullopt);
        if (l.failure)
            return {std::nullopt, std::move(l.failure)};
        d.lock = std::move(*l.value);
    }
    return {std::move(d), std::nullopt};
}

namespace {

// What a transaction's error replies and log lines need of each op, kept when the ops
// move into the store's request.
struct txn_op_ref {
    store::txn_op::kind kind;
    std::string key;
    std::string lock;
    token_t token = 0;
    std::string name; // operation
};

// A transaction's error: the op that decided it, by its index, in the body.
response with_op_index(response res, std::optional<std::size_t> op_index) {
    if (op_index)
        add_error_field(res, "op_index", *op_index);
    return res;
}

void log_txn_operation_error(const call& c, const store::txn_result& r, std::string_view name) {
    if (!logging::enabled(logging::level::warn))
        return;
    auto f = log_fields(c);
    f["operation"] = name;
    f["op_index"] = r.op_index ? nlohmann::json(*r.op_index) : nlohmann::json(nullptr);
    f["error"] = to_string(r.error);
    f["sqlstate"] = r.sqlstate;
    f["detail"] = r.server_message;
    logging::write(logging::level::warn, "operation error", f);
}

// The store's refusal of a transaction, naming the op that decided it.
response txn_failure(const call& c, const store::txn_result& r,
                     const std::vector<txn_op_ref>& ops) {
    const txn_op_ref* op = r.op_index && *r.op_index < ops.size() ? &ops[*r.op_index] : nullptr;
    switch (r.error) {
    case errc::stale_token:
        if (!op)
            break;
        log_stale(c, op->key.empty() ? std::nullopt : std::optional<std::string_view>{op->key},
                  op->lock, op->token, r.current_token, r.floor);
        return with_op_index(
            stale_token_response(op->lock, op->token, r.current_token, floor_of(r.floor)),
            r.op_index);
    case errc::lock_mismatch:
        if (!op)
            break;
        return with_op_index(lock_mismatch_response(op->key, visible_lock(c, r.lock)), r.op_index);
    case errc::precondition_failed:
        if (!op)
            break;
        if (op->kind == store::txn_op::kind::check_version)
            return with_op_index(
                make_error_response(error_reply{errc::precondition_failed,
                                                "check_version does not hold for key '" + op->key +
                                                    "'; nothing was written",
                                                {{"key", op->key}},
                                                {}}),
                r.op_index);
        return with_op_index(precondition_failed_response(op->key), r.op_index);
    case errc::operation_failed:
        return with_op_index(operation_failed_response(r.sqlstate, r.message), r.op_index);
    case errc::invalid_request:
    case errc::not_found:
        // A request the store cannot run (e.g. an operation it does not know): the
        // client's to fix, so 400 whatever the store's code.
        return with_op_index(make_error_response(errc::invalid_request, r.message), r.op_index);
    case errc::idempotency_key_reused:
        return make_error_response(r.error, r.message);
    default:
        break;
    }
    // unavailable, outcome_unknown, internal, or an op error without its op (a store bug).
    return store_failure(c,
                         r.error == errc::stale_token || r.error == errc::lock_mismatch ||
                                 r.error == errc::precondition_failed
                             ? errc::internal
                             : r.error,
                         r.message);
}

// The coroutine parse_pool runs: its arguments live in its own frame. It was a coroutine
// lambda with the rules as a capture, and our GCC 12 build aborted destroying it
// (`free(): invalid pointer`) after every transaction above inline_parse_bytes with a
// Fencing-Lock header: one request took the process down (test_hostile_memory.py and
// test_hostile_disk.py send such bodies).
net::awaitable<detail::txn_body> parse_txn_there(std::string_view body,
                                                 detail::txn_body_rules rules) {
    co_return detail::parse_txn_body(body, rules);
}

// `body` outlives the call (the awaiting request owns it); `rules` is copied.
net::awaitable<detail::txn_body> parse_txn(std::string_view body, detail::txn_body_rules rules) {
    if (body.size() <= inline_parse_bytes)
        co_return detail::parse_txn_body(body, rules);
    co_return co_await net::co_spawn(parse_pool(), parse_txn_there(body, std::move(rules)),
                                     net::use_awaitable);
}

// A transaction of guards only (check, check_version) changes nothing: a retry cannot
// apply it twice, so its Idempotency-Key is checked for form and neither claimed nor
// recorded (a record would be storage held for a request that wrote nothing). Any other
// transaction's key as on the other routes. (A coroutine of its own: a co_await inside a
// conditional expression double-destroyed its temporary under GCC 12.)
net::awaitable<checked<keyed>> txn_idempotency_of(const call& c, const request_identity& id,
                                                  const std::vector<store::txn_op>& ops) {
    const bool writes = std::any_of(ops.begin(), ops.end(), [](const store::txn_op& op) {
        return op.op != store::txn_op::kind::check && op.op != store::txn_op::kind::check_version;
    });
    if (!writes)
        co_return checked<keyed>{keyed{}, idempotency_key_problem(c.req)};
    co_return co_await idempotency_of(c, id);
}

} // namespace

// POST /v1/transactions (docs/api.md#post-v1transactions). Checked in this order: the
// header defaults (Fencing-Token, Fencing-Lock), the body (every op, then
// store::validate_txn), the Idempotency-Key; then one store call decides every op.
net::awaitable<response> post_transaction(call c) {
    auto defaults = txn_defaults_of(c.req);
    if (defaults.failure)
        co_return std::move(*defaults.failure);
    auto& [token, lock] = *defaults.value;

    detail::txn_body_rules rules;
    rules.max_ops = c.ctx.settings.http.max_txn_ops;
    rules.max_op_body_bytes = c.ctx.settings.http.max_txn_op_body_bytes;
    rules.token = token;
    rules.lock = lock;
    rules.operations = c.ctx.store.supports_operations();
    rules.param_count = [&store = c.ctx.store](const std::string& name) {
        return store.operation_param_count(name);
    };
    rules.known = [&store = c.ctx.store](const std::string& name) {
        return store.has_operation(name);
    };
    auto parsed = co_await parse_txn(c.req.body(), std::move(rules));
    if (parsed.error != errc::ok)
        co_return with_op_index(make_error_response(parsed.error, std::move(parsed.message)),
                                parsed.op_index);
    // A scoped client: every op's key and lock (after the defaults) in scope, before the
    // Idempotency-Key is looked at and before any op runs (docs/api.md#scopes).
    if (c.ctx.scope)
        for (std::size_t i = 0; i < parsed.ops.size(); ++i)
            if (auto why = forbidden_op(*c.ctx.scope, parsed.ops[i])) {
                log_forbidden(c, *why);
                co_return with_op_index(
                    make_error_response(errc::forbidden, "op " + std::to_string(i) + ": " + *why),
                    i);
            }

    // The fingerprint covers the body as sent and the headers that give it meaning, as on
    // the other routes. A Fencing-Token of 0 and none at all hash alike: they differ only
    // for a body with an op without a token, which is refused without one (400 above).
    // identity_of keeps views: the lock's text must outlive the fingerprint (a temporary
    // here was a stack-use-after-scope under ASan).
    const std::string lock_text = lock.value_or("");
    const auto id = identity_of(c, lock_text, token.value_or(0), {});
    auto k = co_await txn_idempotency_of(c, id, parsed.ops);
    if (k.failure)
        co_return std::move(*k.failure);
    // The ops hold what the store needs; the body is not kept while the store works.
    std::string{}.swap(c.req.body());

    std::vector<txn_op_ref> refs;
    refs.reserve(parsed.ops.size());
    for (const auto& op : parsed.ops)
        refs.push_back({op.op, op.key, op.lock, op.token, op.name});

    store::txn_result r;
    if (parsed.unknown_operation) {
        // The store's first check, answered here: the parser kept no parameters of a
        // transaction it cannot run (docs/operations.md, "Memory").
        r.error = errc::invalid_request;
        r.op_index = *parsed.unknown_operation;
        r.message = "no operation '" + refs[*r.op_index].name + "'";
    } else {
        store::txn_request t;
        t.ops = std::move(parsed.ops);
        t.idem = std::move(k.value->idem);
        r = co_await timed(c, store_op::transaction, c.ctx.store.transact(std::move(t)));
    }
    const txn_op_ref* failing =
        r.op_index && *r.op_index < refs.size() ? &refs[*r.op_index] : nullptr;
    if (!r.server_message.empty()) {
        const bool named = failing && failing->kind == store::txn_op::kind::operation;
        log_txn_operation_error(c, r, named ? std::string_view{failing->name} : "");
    }
    co_return finish_write(
        c, r, failing ? failing->token : 0,
        [&](const store::txn_result& refused) { return txn_failure(c, refused, refs); },
        [&](const store::txn_result& applied) {
            if (!applied.replayed && logging::enabled(logging::level::debug)) {
                auto f = log_fields(c);
                f["ops"] = refs.size();
                auto locks = nlohmann::json::array();
                for (std::size_t i = 0; i < refs.size(); ++i) {
                    if (refs[i].kind == store::txn_op::kind::check_version)
                        continue;
                    bool seen = false;
                    for (std::size_t j = 0; j < i && !seen; ++j)
                        seen = refs[j].kind != store::txn_op::kind::check_version &&
                               refs[j].lock == refs[i].lock;
                    if (!seen)
                        locks.push_back({{"lock", refs[i].lock}, {"token", refs[i].token}});
                }
                f["locks"] = std::move(locks);
                logging::write(logging::level::debug, "transaction committed", f);
            }
            // results_json is already a JSON array; spliced in rather than parsed and
            // re-serialised.
            response res{http::status::ok, 11};
            res.set(http::field::content_type, "application/json");
            res.body() = "{\"results\":" +
                         (applied.results_json.empty() ? std::string{"[]"} : applied.results_json) +
                         "}";
            return res;
        });
}

} // namespace fk::proxy::routes
