#include "backends/txn.hpp"

#include <nlohmann/json.hpp>

#include <unordered_map>

namespace fk::store {

std::string_view to_string(txn_op::kind k) noexcept {
    switch (k) {
    case txn_op::kind::put:
        return "put";
    case txn_op::kind::remove:
        return "delete";
    case txn_op::kind::fence:
        return "fence";
    case txn_op::kind::check:
        return "check";
    case txn_op::kind::check_version:
        return "check_version";
    case txn_op::kind::operation:
        return "operation";
    }
    return "?";
}

namespace {

bool names_key(txn_op::kind k) {
    return k == txn_op::kind::put || k == txn_op::kind::remove || k == txn_op::kind::check_version;
}

bool names_lock(txn_op::kind k) {
    return k != txn_op::kind::check_version;
}

std::string json_string(std::string_view s) {
    // Keys and locks are validated UTF-8 (fence/names.hpp); replace rather than throw anyway.
    return nlohmann::json(std::string(s))
        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

} // namespace

std::optional<txn_shape_error> validate_txn(const std::vector<txn_op>& ops, std::size_t max_ops) {
    if (ops.empty())
        return txn_shape_error{0, "a transaction needs at least one op"};
    if (ops.size() > max_ops)
        return txn_shape_error{max_ops, "a transaction holds at most " + std::to_string(max_ops) +
                                            " ops (limits.max_txn_ops); this one has " +
                                            std::to_string(ops.size())};
    std::unordered_map<std::string_view, std::size_t> keys;
    std::unordered_map<std::string_view, std::size_t> locks;
    for (std::size_t i = 0; i < ops.size(); ++i) {
        const auto& op = ops[i];
        if (names_key(op.op)) {
            auto [it, fresh] = keys.try_emplace(op.key, i);
            if (!fresh)
                return txn_shape_error{i, "key '" + op.key + "' is named by op " +
                                              std::to_string(it->second) + " and op " +
                                              std::to_string(i) +
                                              ": a transaction names each key at most once"};
        }
        if (names_lock(op.op)) {
            auto [it, fresh] = locks.try_emplace(op.lock, i);
            if (!fresh && ops[it->second].token != op.token)
                return txn_shape_error{
                    i, "lock '" + op.lock + "' has token " + std::to_string(ops[it->second].token) +
                           " in op " + std::to_string(it->second) + " and " +
                           std::to_string(op.token) + " in op " + std::to_string(i) +
                           ": every op on one lock carries the same token"};
        }
    }
    return std::nullopt;
}

std::string render_txn_results(const std::vector<txn_op>& ops,
                               const std::vector<txn_op_result>& results) {
    std::string out = "[";
    for (std::size_t i = 0; i < ops.size() && i < results.size(); ++i) {
        const auto& op = ops[i];
        const auto& r = results[i];
        if (i != 0)
            out += ',';
        out += "{\"op\":\"";
        out += to_string(op.op);
        out += '"';
        if (names_key(op.op))
            out += ",\"key\":" + json_string(op.key);
        if (op.op == txn_op::kind::operation)
            out += ",\"name\":" + json_string(op.name);
        if (names_lock(op.op))
            out += ",\"lock\":" + json_string(op.lock) + ",\"token\":" + std::to_string(r.token);
        if (names_key(op.op))
            out += ",\"version\":" + std::to_string(r.version);
        if (op.op == txn_op::kind::put)
            out += r.created ? ",\"created\":true" : ",\"created\":false";
        if (op.op == txn_op::kind::operation)
            out += ",\"rows_affected\":" + std::to_string(r.rows_affected) +
                   ",\"rows\":" + (r.rows_json.empty() ? std::string("[]") : r.rows_json);
        out += '}';
    }
    out += ']';
    return out;
}

} // namespace fk::store
