#pragma once
// The fence rule (docs/api.md#the-fence-rule) and the checks that share its atomic step. Stores
// call these while they hold whatever makes the step atomic (a committer thread, a SQL statement's
// row locks), so the rule is written once and tested without I/O.

#include "fence/error.hpp"
#include "fence/token.hpp"

#include <cstdint>
#include <optional>
#include <string_view>

namespace fk::fence {

// t < fence → stale; no fence yet or t >= fence → accepted.
inline bool accepts(std::optional<token_t> fence, token_t token) noexcept {
    return !fence || token >= *fence;
}

// The new fence after an accepted write.
inline token_t advanced(std::optional<token_t> fence, token_t token) noexcept {
    return fence && *fence > token ? *fence : token;
}

// What a store knows about a key before the write.
struct key_state {
    bool exists = false;      // present and not deleted
    std::string_view lock;    // the lock it was created under (when exists)
    std::int64_t version = 0; // last version, also kept across deletes (0 = never written)
};

struct preconditions {
    std::optional<std::int64_t> if_match; // If-Match: "version"
    bool if_match_any = false;            // If-Match: * (the key must exist)
    bool if_none_match_any = false;       // If-None-Match: *
};

// The full decision for a write or delete of a key under `lock` with `token`, in the
// contract's order: lock_mismatch (the key belongs to another lock), then stale_token,
// then precondition_failed. Returns ok when the write must be applied.
errc check_write(const key_state& key, std::string_view lock, std::optional<token_t> fence,
                 token_t token, const preconditions& pre) noexcept;

} // namespace fk::fence
