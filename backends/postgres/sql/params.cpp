#include "backends/postgres/sql/params.hpp"

#include "backends/postgres/sql/binary_array.hpp"
#include "backends/postgres/sql/statements.hpp"
#include "fence/utf8.hpp"

namespace fk::store::pg::sql {
namespace {

std::string token_text(token_t t) {
    return std::to_string(t);
}

// If-Match travels as a bigint where 0 means "none" (pgbench cannot send NULL; see
// if_match_param in sql/statements.cpp). Versions start at 1, so a client's If-Match of 0
// or below can never match: it is sent as -1, which keeps it a failing precondition.
std::int64_t if_match_value(const fence::preconditions& pre) {
    return !pre.if_match ? 0 : *pre.if_match <= 0 ? -1 : *pre.if_match;
}

void add_preconditions(param_list& out, const fence::preconditions& pre) {
    out.push_back(param::of(std::to_string(if_match_value(pre))));
    out.push_back(param::of(pre.if_match_any ? "true" : "false"));
    out.push_back(param::of(pre.if_none_match_any ? "true" : "false"));
}

} // namespace

param_list single_write_params(const batch_item& item) {
    param_list out;
    out.reserve(8);
    out.push_back(param::of(std::string(item.key)));
    out.push_back(param::of(std::string(item.lock)));
    out.push_back(param::of(token_text(item.token)));
    if (!item.is_delete) {
        out.push_back(param::bytes(item.body));
        out.push_back(param::of(std::string(item.content_type)));
    }
    add_preconditions(out, item.pre);
    return out;
}

batch_shape write_batch_shape(const std::vector<batch_item>& items) noexcept {
    for (const auto& it : items)
        if (it.idem)
            return batch_shape::keyed;
    return batch_shape::plain;
}

param_list write_batch_params(const std::vector<batch_item>& items, batch_shape shape,
                              std::chrono::seconds retention) {
    const std::size_t n = items.size();
    const bool keyed = shape == batch_shape::keyed;
    const std::size_t m = keyed ? n : 0;
    array_builder key(oid_text, n), lock(oid_text, n), token(oid_int8, n), body(oid_bytea, n),
        ctype(oid_text, n), if_match(oid_int8, n), any(oid_bool, n), none(oid_bool, n),
        del(oid_bool, n), scope(oid_text, m), ikey(oid_text, m), fp(oid_bytea, m);
    for (const auto& it : items) {
        if (keyed && it.idem) {
            scope.add(it.idem->scope);
            ikey.add(it.idem->key);
            fp.add(it.idem->fingerprint);
        } else if (keyed) {
            scope.add_null();
            ikey.add_null();
            fp.add_null();
        }
        key.add(it.key);
        lock.add(it.lock);
        token.add_int8(it.token);
        body.add(it.is_delete ? std::string_view() : it.body);
        ctype.add(it.is_delete ? std::string_view() : it.content_type);
        if_match.add_int8(if_match_value(it.pre));
        any.add_bool(it.pre.if_match_any);
        none.add_bool(it.pre.if_none_match_any);
        del.add_bool(it.is_delete);
    }
    param_list out;
    out.reserve(keyed ? 13 : 9);
    for (auto* b : {&key, &lock, &token, &body, &ctype, &if_match, &any, &none, &del})
        out.push_back(param::owned_bytes(std::move(*b).finish()));
    if (keyed) {
        for (auto* b : {&scope, &ikey, &fp})
            out.push_back(param::owned_bytes(std::move(*b).finish()));
        out.push_back(param::of(std::to_string(retention.count())));
    }
    return out;
}

bound_statement write_batch_statement(const std::vector<batch_item>& items,
                                      std::chrono::seconds retention) {
    const auto shape = write_batch_shape(items);
    return {shape == batch_shape::keyed ? name::write_batch_keyed : name::write_batch,
            write_batch_params(items, shape, retention)};
}

param_list txn_params(const std::vector<txn_op>& ops) {
    using kind = txn_op::kind;
    const std::size_t n = ops.size();
    array_builder op_kind(oid_text, n), key(oid_text, n), lock(oid_text, n), token(oid_int8, n),
        body(oid_bytea, n), ctype(oid_text, n), if_match(oid_int8, n), any(oid_bool, n),
        none(oid_bool, n), want(oid_int8, n);
    for (const auto& op : ops) {
        const bool keyed =
            op.op == kind::put || op.op == kind::remove || op.op == kind::check_version;
        const bool write = op.op == kind::put || op.op == kind::remove;
        op_kind.add(to_string(op.op));
        if (keyed)
            key.add(op.key);
        else
            key.add_null();
        if (op.op == kind::check_version)
            lock.add_null();
        else
            lock.add(op.lock);
        token.add_int8(op.token);
        if (op.op == kind::put) {
            body.add(op.body);
            ctype.add(op.content_type);
        } else {
            body.add_null();
            ctype.add_null();
        }
        const fence::preconditions none_pre;
        const auto& pre = write ? op.pre : none_pre;
        if_match.add_int8(if_match_value(pre));
        any.add_bool(pre.if_match_any);
        none.add_bool(pre.if_none_match_any);
        if (op.op == kind::check_version && op.version)
            want.add_int8(*op.version);
        else
            want.add_null();
    }
    param_list out;
    out.reserve(10);
    for (auto* b : {&op_kind, &key, &lock, &token, &body, &ctype, &if_match, &any, &none, &want})
        out.push_back(param::owned_bytes(std::move(*b).finish()));
    return out;
}

param_list idem_get_params(const idempotency& idem, std::chrono::seconds retention) {
    return {param::of(idem.scope), param::of(idem.key),
            param::of(std::to_string(retention.count()))};
}

param_list advance_idem_params(std::string_view lock, token_t token, const idempotency& idem,
                               std::chrono::seconds retention) {
    return {param::of(std::string(lock)),   param::of(token_text(token)),
            param::of(idem.scope),          param::of(idem.key),
            param::bytes(idem.fingerprint), param::of(std::to_string(retention.count()))};
}

param_list op_record_params(const idempotency& idem, token_t token, std::int64_t rows_affected,
                            const std::string& rows_json, std::chrono::seconds retention) {
    return {param::of(idem.scope),
            param::of(idem.key),
            param::bytes(idem.fingerprint),
            param::of(token_text(token)),
            param::of(std::to_string(rows_affected)),
            param::of(rows_json),
            param::of(std::to_string(retention.count()))};
}

param_list idem_expire_params(std::chrono::seconds retention, std::size_t limit) {
    return {param::of(std::to_string(retention.count())), param::of(std::to_string(limit))};
}

param_list raise_floor_params(const floor_request& req, std::chrono::seconds retention) {
    param_list out{param::of(req.prefix), param::of(token_text(req.token))};
    if (req.idem) {
        out.push_back(param::of(req.idem->scope));
        out.push_back(param::of(req.idem->key));
        out.push_back(param::bytes(req.idem->fingerprint));
    } else {
        out.insert(out.end(), {param::null(), param::null(), param::null()});
    }
    out.push_back(param::of(std::to_string(retention.count())));
    return out;
}

param_list put_params(const put_request& req) {
    return single_write_params(
        {req.key, req.lock, req.token, false, req.body, req.content_type, req.pre});
}

param_list delete_params(const delete_request& req) {
    return single_write_params({req.key, req.lock, req.token, true, {}, {}, req.pre});
}

param_list advance_params(std::string_view lock, token_t token) {
    return {param::of(std::string(lock)), param::of(token_text(token))};
}

param_list key_params(std::string_view key) {
    return {param::of(std::string(key))};
}

param_list lock_params(std::string_view lock) {
    return {param::of(std::string(lock))};
}

bound_statement list_params(const list_request& req) {
    bound_statement q;
    const std::string limit = std::to_string(req.limit + 1);
    q.params.push_back(param::of(req.prefix));
    // Lock names are never empty, so "" excludes nothing.
    q.params.push_back(param::of(req.after.value_or(std::string())));
    if (auto upper = fence::utf8_prefix_successor(req.prefix)) {
        q.statement = name::list_bounded;
        q.params.push_back(param::of(std::move(*upper)));
    } else {
        q.statement = name::list_open;
    }
    q.params.push_back(param::of(limit));
    return q;
}

param_list op_fence_params(std::string_view lock, token_t token) {
    return advance_params(lock, token);
}

} // namespace fk::store::pg::sql
