#pragma once
// Scoped credentials (docs/operations.md, "Scoped credentials"; docs/api.md#scopes): what
// one caller may read, write and reach, and the checks made with it. Pure functions of a
// scope and a request head or a name: no I/O, so every rule is unit-tested
// (tests/unit/proxy_scopes_test.cpp).
//
// A prefix covers every key and lock name that starts with it, bytewise; "" covers every
// name; an empty list covers none. Write scope implies read scope of the same prefixes.

#include "backends/txn.hpp"
#include "proxy/handlers.hpp"
#include "proxy/router.hpp"

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fk::proxy {

struct client_scope {
    std::string name; // the client's name, for logs; empty for the single token / no auth
    std::vector<std::string> write_prefixes;
    std::vector<std::string> read_prefixes; // the read prefixes and the write prefixes
    bool metrics = false;
    bool admin = false;

    bool may_write(std::string_view name) const noexcept;
    bool may_read(std::string_view name) const noexcept;
    // Reads of every name: listings need no filter.
    bool reads_everything() const noexcept;
};

// Builds a client's scope: the read prefixes become read ∪ write, and prefixes covered by
// a shorter one are dropped (so that those left are disjoint: a listing can query each).
client_scope make_scope(std::string name, std::vector<std::string> write_prefixes,
                        std::vector<std::string> read_prefixes, bool metrics, bool admin);

// The 403 decided from the head (docs/api.md#order-of-checks, step 4): why the caller may
// not make this request, or nullopt. A target that did not match (404, 405, a bad name or
// query) is not refused here: the handler refuses it without touching anything. Nor are
// the listings (filtered by the handler). POST /v1/transactions is refused here only when
// the client may write no name at all; its ops are checked once the body is parsed,
// before any is applied.
//   resource GET/HEAD: read the key. PUT/DELETE: write the key and every Fencing-Lock
//   given (none: the key is the lock). fence GET/HEAD: read the lock; PUT: write it.
//   PUT /v1/floors: admin. POST operation: write every Fencing-Lock given. POST
//   transactions: some write prefix. /metrics: metrics.
std::optional<std::string> forbidden_by_head(const client_scope& s, const request& head,
                                             const route_match& target);

// One op of POST /v1/transactions, after its defaults (lock from Fencing-Lock or the key):
// put and delete write the key and the lock, fence and operation write the lock, check
// reads the lock, check_version reads the key. Why not, or nullopt.
std::optional<std::string> forbidden_op(const client_scope& s, const store::txn_op& op);

// The store queries a listing of `prefix` needs to show only what `s` may read: none
// (nothing readable under it), or disjoint prefixes whose pages, merged, are the filtered
// listing. `{prefix}` alone when all of it is readable.
std::vector<std::string> readable_prefixes_under(const client_scope& s, std::string_view prefix);

} // namespace fk::proxy
