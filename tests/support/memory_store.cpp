#include "tests/support/memory_store.hpp"

#include "fence/rule.hpp"

#include <algorithm>
#include <chrono>

namespace fk::test {

using fk::store::token_t;

memory_store::memory_store()
    : now_ms_([] {
          return std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::system_clock::now().time_since_epoch())
              .count();
      }) {}

void memory_store::stop() {
    std::lock_guard lock{mu_};
    stopped_ = true;
}

void memory_store::add_operation(std::string name, operation_fn fn,
                                 std::optional<std::size_t> takes) {
    std::lock_guard lock{mu_};
    if (takes)
        param_counts_[name] = *takes;
    else
        param_counts_.erase(name);
    operations_[std::move(name)] = std::move(fn);
}

std::optional<std::size_t> memory_store::operation_param_count(const std::string& name) const {
    std::lock_guard lock{mu_};
    auto it = param_counts_.find(name);
    return it == param_counts_.end() ? std::nullopt : std::optional<std::size_t>(it->second);
}

bool memory_store::has_operation(const std::string& name) const {
    std::lock_guard lock{mu_};
    return operations_.count(name) != 0;
}

void memory_store::fail_next(errc e, int count) {
    std::lock_guard lock{mu_};
    fail_with_ = e;
    fail_count_ = count;
}

void memory_store::set_clock(std::function<std::int64_t()> now_ms) {
    std::lock_guard lock{mu_};
    now_ms_ = std::move(now_ms);
}

std::optional<token_t> memory_store::fence_of(const std::string& lock) const {
    std::lock_guard guard{mu_};
    return fence_locked(lock);
}

std::optional<token_t> memory_store::effective_fence_of(const std::string& lock) const {
    std::lock_guard guard{mu_};
    return effective_locked(lock).token;
}

std::optional<token_t> memory_store::floor_of(const std::string& prefix) const {
    std::lock_guard guard{mu_};
    return floors_.floor_of(prefix);
}

std::size_t memory_store::floor_count() const {
    std::lock_guard guard{mu_};
    return floors_.size();
}

std::optional<std::string> memory_store::body_of(const std::string& key) const {
    std::lock_guard lock{mu_};
    auto it = keys_.find(key);
    if (it == keys_.end() || !it->second.exists)
        return std::nullopt;
    return it->second.body;
}

std::optional<errc> memory_store::take_failure() {
    ++calls_;
    if (stopped_)
        return errc::unavailable;
    if (!ready_.load())
        return errc::unavailable;
    if (fail_count_ > 0) {
        --fail_count_;
        return fail_with_;
    }
    return std::nullopt;
}

std::optional<token_t> memory_store::fence_locked(const std::string& lock) const {
    auto it = fences_.find(lock);
    if (it == fences_.end())
        return std::nullopt;
    return it->second.token;
}

fence::effective_fence memory_store::effective_locked(const std::string& lock) const {
    return floors_.effective(lock, fence_locked(lock));
}

namespace {

// A write refused by the effective fence: the fence, and the floor when a floor set it.
template <class Result> Result stale_result(const fence::effective_fence& e) {
    Result r;
    r.error = errc::stale_token;
    r.current_token = e.token.value_or(0);
    if (e.floor)
        r.floor = std::string{e.floor->prefix};
    return r;
}

} // namespace

token_t memory_store::advance_locked(const std::string& lock, token_t token) {
    auto [it, inserted] = fences_.try_emplace(lock);
    if (inserted || token > it->second.token) {
        it->second.token = token;
        it->second.updated_at_ms = now_ms_();
    }
    return it->second.token;
}

fk::store::write_result memory_store::check_write_locked(const std::string& key,
                                                         const std::string& lock, token_t token,
                                                         const fence::preconditions& pre) const {
    fk::store::write_result r;
    auto it = keys_.find(key);
    fence::key_state state;
    if (it != keys_.end()) {
        state.exists = it->second.exists;
        state.lock = it->second.lock;
        state.version = it->second.version;
    }
    const auto fence = effective_locked(lock);
    r.error = fence::check_write(state, lock, fence.token, token, pre);
    switch (r.error) {
    case errc::lock_mismatch:
        r.lock = it->second.lock;
        return r;
    case errc::stale_token:
        return stale_result<fk::store::write_result>(fence);
    default:
        return r;
    }
}

fk::store::write_result memory_store::write_locked(const std::string& key, const std::string& lock,
                                                   token_t token, const fence::preconditions& pre,
                                                   bool is_delete, std::string content_type,
                                                   std::string body) {
    fk::store::write_result r;
    if (auto e = take_failure()) {
        r.error = *e;
        r.message = "injected failure";
        return r;
    }
    r = check_write_locked(key, lock, token, pre);
    if (r.error != errc::ok)
        return r;

    auto it = keys_.find(key);
    if (it == keys_.end())
        it = keys_.try_emplace(key).first;
    key_entry& k = it->second;
    r.token = advance_locked(lock, token);
    if (is_delete) {
        k.exists = false;
        k.body.clear();
        k.content_type.clear();
        r.version = k.version;
        return r;
    }
    r.created = !k.exists;
    k.exists = true;
    k.lock = lock;
    k.version += 1;
    k.token = token;
    k.content_type = std::move(content_type);
    k.body = std::move(body);
    r.version = k.version;
    return r;
}

namespace {
std::string idem_id(const fk::store::idempotency& idem) {
    return idem.scope + '\n' + idem.key;
}
} // namespace

const memory_store::idem_record*
memory_store::idem_find(const std::optional<fk::store::idempotency>& idem, bool& reused) const {
    reused = false;
    if (!idem)
        return nullptr;
    auto it = idem_.find(idem_id(*idem));
    if (it == idem_.end())
        return nullptr;
    reused = it->second.fingerprint != idem->fingerprint;
    return &it->second;
}

void memory_store::idem_save(const std::optional<fk::store::idempotency>& idem,
                             const fk::store::write_result* w,
                             const fk::store::operation_result* o) {
    if (!idem)
        return;
    idem_record rec;
    rec.fingerprint = idem->fingerprint;
    if (w)
        rec.write = *w;
    if (o)
        rec.operation = *o;
    idem_[idem_id(*idem)] = std::move(rec);
}

// A keyed write answered from its record: the recorded outcome, or idempotency_key_reused.
template <class Result>
std::optional<Result> replay_of(const void* found, bool reused, const Result& recorded) {
    if (!found)
        return std::nullopt;
    Result r;
    if (reused) {
        r.error = errc::idempotency_key_reused;
        return r;
    }
    r = recorded;
    r.replayed = true;
    return r;
}

net::awaitable<fk::store::write_result> memory_store::put(fk::store::put_request req) {
    std::lock_guard lock{mu_};
    bool reused = false;
    if (auto* rec = idem_find(req.idem, reused))
        co_return *replay_of(rec, reused, rec->write);
    auto r = write_locked(req.key, req.lock, req.token, req.pre, false, std::move(req.content_type),
                          std::move(req.body));
    if (r.error == errc::ok)
        idem_save(req.idem, &r, nullptr);
    co_return r;
}

net::awaitable<fk::store::write_result> memory_store::remove(fk::store::delete_request req) {
    std::lock_guard lock{mu_};
    bool reused = false;
    if (auto* rec = idem_find(req.idem, reused))
        co_return *replay_of(rec, reused, rec->write);
    auto r = write_locked(req.key, req.lock, req.token, req.pre, true, {}, {});
    if (r.error == errc::ok)
        idem_save(req.idem, &r, nullptr);
    co_return r;
}

net::awaitable<fk::store::object_result> memory_store::get(std::string key, bool with_body) {
    std::lock_guard lock{mu_};
    fk::store::object_result r;
    if (auto e = take_failure()) {
        r.error = *e;
        r.message = "injected failure";
        co_return r;
    }
    auto it = keys_.find(key);
    if (it == keys_.end() || !it->second.exists) {
        r.error = errc::not_found;
        co_return r;
    }
    const key_entry& k = it->second;
    if (with_body)
        r.body = k.body;
    r.size = k.body.size();
    r.content_type = k.content_type;
    r.version = k.version;
    r.token = k.token;
    r.lock = k.lock;
    co_return r;
}

net::awaitable<fk::store::write_result> memory_store::advance_fence(fk::store::fence_request req) {
    const std::string& lock_name = req.lock;
    const token_t token = req.token;
    std::lock_guard lock{mu_};
    fk::store::write_result r;
    if (auto e = take_failure()) {
        r.error = *e;
        r.message = "injected failure";
        co_return r;
    }
    bool reused = false;
    if (auto* rec = idem_find(req.idem, reused))
        co_return *replay_of(rec, reused, rec->write);
    const auto fence = effective_locked(lock_name);
    if (!fence::accepts(fence.token, token))
        co_return stale_result<fk::store::write_result>(fence);
    r.token = advance_locked(lock_name, token);
    idem_save(req.idem, &r, nullptr);
    co_return r;
}

net::awaitable<fk::store::fence_result> memory_store::read_fence(std::string lock_name) {
    std::lock_guard lock{mu_};
    fk::store::fence_result r;
    if (auto e = take_failure()) {
        r.error = *e;
        r.message = "injected failure";
        co_return r;
    }
    // The effective fence: a floor above the own fence (or without one) stands in for it.
    auto it = fences_.find(lock_name);
    const auto e = floors_.effective(
        lock_name, it == fences_.end() ? std::nullopt : std::optional{it->second.token});
    if (e.floor) {
        r.fence = {lock_name, e.floor->token, e.floor->updated_at_ms, std::string{e.floor->prefix}};
        co_return r;
    }
    if (it == fences_.end()) {
        r.error = errc::not_found;
        co_return r;
    }
    r.fence = {it->first, it->second.token, it->second.updated_at_ms, std::nullopt};
    co_return r;
}

net::awaitable<fk::store::list_result> memory_store::list_fences(fk::store::list_request req) {
    std::lock_guard lock{mu_};
    fk::store::list_result r;
    if (auto e = take_failure()) {
        r.error = *e;
        r.message = "injected failure";
        co_return r;
    }
    auto it = fences_.lower_bound(req.prefix);
    if (req.after) {
        auto after = fences_.upper_bound(*req.after);
        if (after == fences_.end() || (it != fences_.end() && after->first > it->first))
            it = after;
    }
    auto matches = [&](const std::string& lock_name) {
        return lock_name.compare(0, req.prefix.size(), req.prefix) == 0;
    };
    for (; it != fences_.end() && matches(it->first); ++it) {
        if (r.fences.size() >= std::max<std::size_t>(req.limit, 1)) {
            r.next = r.fences.back().lock;
            break;
        }
        r.fences.push_back({it->first, it->second.token, it->second.updated_at_ms, std::nullopt});
    }
    co_return r;
}

net::awaitable<fk::store::operation_result>
memory_store::run_operation(fk::store::operation_request req) {
    std::lock_guard lock{mu_};
    fk::store::operation_result r;
    if (auto e = take_failure()) {
        r.error = *e;
        r.message = "injected failure";
        co_return r;
    }
    auto op = operations_.find(req.name);
    if (op == operations_.end()) {
        r.error = errc::not_found;
        r.message = "no operation '" + req.name + "'";
        co_return r;
    }
    bool reused = false;
    if (auto* rec = idem_find(req.idem, reused))
        co_return *replay_of(rec, reused, rec->operation);
    const auto fence = effective_locked(req.lock);
    if (!fence::accepts(fence.token, req.token))
        co_return stale_result<fk::store::operation_result>(fence);
    r = op->second(req);
    if (r.error != errc::ok)
        co_return r;
    r.token = advance_locked(req.lock, req.token);
    idem_save(req.idem, nullptr, &r);
    co_return r;
}

net::awaitable<fk::store::write_result> memory_store::raise_floor(fk::store::floor_request req) {
    std::lock_guard lock{mu_};
    fk::store::write_result r;
    if (auto e = take_failure()) {
        r.error = *e;
        r.message = "injected failure";
        co_return r;
    }
    bool reused = false;
    if (auto* rec = idem_find(req.idem, reused))
        co_return *replay_of(rec, reused, rec->write);
    switch (floors_.raise(req.prefix, req.token, now_ms_(), fk::store::max_floors)) {
    case fence::floor_set::raise_outcome::raised:
        r.token = req.token;
        idem_save(req.idem, &r, nullptr);
        co_return r;
    case fence::floor_set::raise_outcome::not_above:
        r.error = errc::stale_token;
        r.current_token = floors_.floor_of(req.prefix).value_or(0);
        co_return r;
    case fence::floor_set::raise_outcome::full:
        break;
    }
    r.error = errc::invalid_request;
    r.message = "there are already " + std::to_string(fk::store::max_floors) +
                " fence floors, the most a store keeps; raise one of them instead";
    co_return r;
}

net::awaitable<fk::store::floors_result> memory_store::list_floors() {
    std::lock_guard lock{mu_};
    fk::store::floors_result r;
    if (auto e = take_failure()) {
        r.error = *e;
        r.message = "injected failure";
        co_return r;
    }
    for (auto& f : floors_.list())
        r.floors.push_back({std::move(f.prefix), f.token, f.updated_at_ms});
    co_return r;
}

net::awaitable<fk::store::txn_result> memory_store::transact(fk::store::txn_request req) {
    using kind = fk::store::txn_op::kind;
    std::lock_guard lock{mu_};
    fk::store::txn_result r;
    if (auto e = take_failure()) {
        r.error = *e;
        r.message = "injected failure";
        co_return r;
    }
    bool reused = false;
    if (auto* rec = idem_find(req.idem, reused)) {
        if (reused) {
            r.error = errc::idempotency_key_reused;
            co_return r;
        }
        r.replayed = true;
        r.results_json = rec->txn_results;
        co_return r;
    }
    auto refuse = [&](std::size_t i, errc e) {
        r.error = e;
        r.op_index = i;
        return r;
    };

    // 1. Every op's checks, in op order, against the state before the transaction.
    const auto& ops = req.ops;
    std::vector<fk::store::txn_op_result> results(ops.size());
    for (std::size_t i = 0; i < ops.size(); ++i) {
        const auto& op = ops[i];
        switch (op.op) {
        case kind::put:
        case kind::remove: {
            auto w = check_write_locked(op.key, op.lock, op.token, op.pre);
            if (w.error != errc::ok) {
                refuse(i, w.error);
                r.current_token = w.current_token;
                r.floor = w.floor;
                r.lock = w.lock;
                co_return r;
            }
            break;
        }
        case kind::fence:
        case kind::check:
        case kind::operation: {
            if (op.op == kind::operation && !operations_.contains(op.name)) {
                refuse(i, errc::invalid_request);
                r.message = operations_.empty() ? "operation ops run on the Postgres store only"
                                                : "no operation '" + op.name + "'";
                co_return r;
            }
            const auto fence = effective_locked(op.lock);
            if (!fence::accepts(fence.token, op.token)) {
                auto stale = stale_result<fk::store::txn_result>(fence);
                stale.op_index = i;
                co_return stale;
            }
            if (op.op == kind::check) {
                // In op order: an earlier op of this transaction on the lock has moved its
                // fence to the transaction's token (docs/api.md#post-v1transactions).
                bool moved = false;
                for (std::size_t j = 0; j < i; ++j)
                    moved = moved || (ops[j].lock == op.lock && ops[j].op != kind::check &&
                                      ops[j].op != kind::check_version);
                results[i].token = moved ? op.token : fence.token.value_or(0);
            }
            break;
        }
        case kind::check_version: {
            auto it = keys_.find(op.key);
            const std::int64_t found =
                it != keys_.end() && it->second.exists ? it->second.version : 0;
            if (op.version ? found != *op.version : found != 0)
                co_return refuse(i, errc::precondition_failed);
            results[i].version = found;
            break;
        }
        }
    }

    // 2. The operations, in op order, once every other check has passed.
    for (std::size_t i = 0; i < ops.size(); ++i) {
        const auto& op = ops[i];
        if (op.op != kind::operation)
            continue;
        fk::store::operation_request o;
        o.name = op.name;
        o.lock = op.lock;
        o.token = op.token;
        o.params = op.params;
        auto out = operations_.at(op.name)(o);
        if (out.error != errc::ok) {
            refuse(i, out.error);
            r.sqlstate = out.sqlstate;
            r.message = out.message;
            r.server_message = out.server_message;
            co_return r;
        }
        results[i].rows_affected = out.rows_affected;
        results[i].rows_json = std::move(out.rows_json);
    }

    // 3. Apply: nothing can fail from here on.
    for (std::size_t i = 0; i < ops.size(); ++i) {
        const auto& op = ops[i];
        if (op.op != kind::put && op.op != kind::remove)
            continue;
        key_entry& k = keys_[op.key];
        if (op.op == kind::remove) {
            results[i].version = k.exists ? k.version : 0; // 0: there was nothing to delete
            k.exists = false;
            k.body.clear();
            k.content_type.clear();
            continue;
        }
        results[i].created = !k.exists;
        k.exists = true;
        k.lock = op.lock;
        k.version += 1;
        k.token = op.token;
        k.content_type = op.content_type;
        k.body = op.body;
        results[i].version = k.version;
    }
    for (const auto& op : ops)
        if (op.op == kind::put || op.op == kind::remove || op.op == kind::fence ||
            op.op == kind::operation)
            advance_locked(op.lock, op.token);
    for (std::size_t i = 0; i < ops.size(); ++i)
        if (ops[i].op != kind::check && ops[i].op != kind::check_version)
            results[i].token = fence_locked(ops[i].lock).value_or(0);

    r.results_json = fk::store::render_txn_results(ops, results);
    if (req.idem) {
        idem_record rec;
        rec.fingerprint = req.idem->fingerprint;
        rec.txn_results = r.results_json;
        idem_[idem_id(*req.idem)] = std::move(rec);
    }
    co_return r;
}

} // namespace fk::test
