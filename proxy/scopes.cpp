#include "proxy/scopes.hpp"

#include "fence/names.hpp"
#include "proxy/detail/excerpt.hpp"

#include <algorithm>

namespace fk::proxy {

namespace {

bool covered(const std::vector<std::string>& prefixes, std::string_view name) noexcept {
    return std::any_of(prefixes.begin(), prefixes.end(),
                       [&](const std::string& p) { return name.starts_with(p); });
}

// Sorted, without duplicates and without any prefix that a shorter one covers.
std::vector<std::string> normalise(std::vector<std::string> prefixes) {
    std::sort(prefixes.begin(), prefixes.end());
    prefixes.erase(std::unique(prefixes.begin(), prefixes.end()), prefixes.end());
    std::vector<std::string> out;
    for (auto& p : prefixes) {
        // Sorted: a prefix that covers p sorts before it, and after the last one kept.
        if (!out.empty() && std::string_view{p}.starts_with(out.back()))
            continue;
        out.push_back(std::move(p));
    }
    return out;
}

// Client-supplied names quoted in a 403, cut to a readable length.
std::string in_quotes(std::string_view name) {
    return "'" + detail::excerpt(name) + "'";
}

std::string who(const client_scope& s) {
    return s.name.empty() ? std::string{"this client"} : "client '" + s.name + "'";
}

// Every Fencing-Lock given, as the handler would read it; a value that is not a valid
// lock name is skipped (the handler answers it with 400 before touching anything), and
// so is the field given twice (the same). The first one not writable, or nullopt.
std::optional<std::string> unwritable_lock(const client_scope& s, const request& head) {
    auto [it, end] = head.equal_range("Fencing-Lock");
    for (; it != end; ++it) {
        auto lock = fence::lock_from_header(std::string_view{it->value()});
        if (lock.error == errc::ok && !s.may_write(lock.value))
            return who(s) + " may not write lock " + in_quotes(lock.value) + " (Fencing-Lock)";
    }
    return std::nullopt;
}

} // namespace

bool client_scope::may_write(std::string_view name) const noexcept {
    return covered(write_prefixes, name);
}

bool client_scope::may_read(std::string_view name) const noexcept {
    return covered(read_prefixes, name);
}

bool client_scope::reads_everything() const noexcept {
    return may_read("");
}

client_scope make_scope(std::string name, std::vector<std::string> write_prefixes,
                        std::vector<std::string> read_prefixes, bool metrics, bool admin) {
    read_prefixes.insert(read_prefixes.end(), write_prefixes.begin(), write_prefixes.end());
    return client_scope{std::move(name), normalise(std::move(write_prefixes)),
                        normalise(std::move(read_prefixes)), metrics, admin};
}

std::optional<std::string> forbidden_by_head(const client_scope& s, const request& head,
                                             const route_match& target) {
    if (target.error != errc::ok)
        return std::nullopt;
    const auto method = head.method();
    const bool write = method != http::verb::get && method != http::verb::head;
    switch (target.kind) {
    case route::resource:
        if (!write)
            return s.may_read(target.name)
                       ? std::nullopt
                       : std::optional{who(s) + " may not read key " + in_quotes(target.name)};
        if (!s.may_write(target.name))
            return who(s) + " may not write key " + in_quotes(target.name);
        // Without Fencing-Lock the key is the lock, checked just above.
        return unwritable_lock(s, head);
    case route::fence:
        if (!write)
            return s.may_read(target.name)
                       ? std::nullopt
                       : std::optional{who(s) + " may not read lock " + in_quotes(target.name)};
        return s.may_write(target.name)
                   ? std::nullopt
                   : std::optional{who(s) + " may not write lock " + in_quotes(target.name)};
    case route::floors:
        if (write && !s.admin)
            return who(s) + " may not raise fence floors (needs \"admin\": true)";
        return std::nullopt;
    case route::operation:
        // The lock is the operation's only name: the statement itself is the operator's.
        return unwritable_lock(s, head);
    case route::metrics:
        return s.metrics
                   ? std::nullopt
                   : std::optional{who(s) + " may not read /metrics (needs \"metrics\": true)"};
    case route::transactions:
        // Every op is checked once the body is parsed; a client that may write no name
        // has no transaction to commit, so its body is never read, parsed or recorded.
        if (write && s.write_prefixes.empty())
            return who(s) +
                   " may not write any key or lock, and a transaction needs write scope (read "
                   "keys and fences with GET)";
        return std::nullopt;
    case route::fences_list: // filtered by the handler
    case route::healthz:
    case route::readyz:
    case route::not_found:
        return std::nullopt;
    }
    return std::nullopt;
}

std::optional<std::string> forbidden_op(const client_scope& s, const store::txn_op& op) {
    using kind = store::txn_op::kind;
    switch (op.op) {
    case kind::put:
    case kind::remove:
        if (!s.may_write(op.key))
            return who(s) + " may not write key " + in_quotes(op.key);
        [[fallthrough]];
    case kind::fence:
    case kind::operation:
        if (!s.may_write(op.lock))
            return who(s) + " may not write lock " + in_quotes(op.lock);
        return std::nullopt;
    case kind::check:
        if (!s.may_read(op.lock))
            return who(s) + " may not read lock " + in_quotes(op.lock);
        return std::nullopt;
    case kind::check_version:
        if (!s.may_read(op.key))
            return who(s) + " may not read key " + in_quotes(op.key);
        return std::nullopt;
    }
    return who(s) + " may not run this op";
}

std::vector<std::string> readable_prefixes_under(const client_scope& s, std::string_view prefix) {
    std::vector<std::string> out;
    for (const auto& r : s.read_prefixes) {
        if (prefix.starts_with(r))
            return {std::string{prefix}}; // all of the listing is readable
        if (std::string_view{r}.starts_with(prefix))
            out.push_back(r);
    }
    return out;
}

} // namespace fk::proxy
