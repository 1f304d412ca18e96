#pragma once
// Fence floors (docs/api.md#fence-floors) as a pure set: prefix → (token, updated_at). A
// floor gives every lock whose name starts with its prefix an effective fence of at least
// its token; the effective fence of a lock is the highest of its own fence and every
// matching floor. Not thread-safe: its owner (the file store's committer, the in-memory
// test store) holds it where its fence check is atomic. The Postgres store keeps the same
// rule in SQL (backends/postgres/sql/batch.cpp) and its unit tests compare the two.

#include "fence/token.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fk::fence {

struct floor_entry {
    std::string prefix;
    token_t token = 0;
    std::int64_t updated_at_ms = 0;
};

// The floor that decides a lock's effective fence.
struct floor_hit {
    std::string_view prefix; // valid until the set changes
    token_t token = 0;
    std::int64_t updated_at_ms = 0;
};

// Where a lock's effective fence comes from.
struct effective_fence {
    std::optional<token_t> token;   // nullopt: no own fence and no floor
    std::optional<floor_hit> floor; // set when a floor is above the own fence (or there is none)
};

class floor_set {
public:
    enum class raise_outcome { raised, not_above, full };

    // Raises the floor of `prefix` to `token`: not_above when the prefix's floor is already
    // >= token (floors only go up: an equal token is refused too); full when `limit`
    // floors exist and `prefix` has none.
    raise_outcome raise(std::string_view prefix, token_t token, std::int64_t now_ms,
                        std::size_t limit);
    // Restores a floor as stored (recovery); keeps the higher of two for one prefix.
    void load(floor_entry e);

    // The prefix's own floor.
    std::optional<token_t> floor_of(std::string_view prefix) const;
    // The highest floor whose prefix `lock` starts with (on a tie, the longest prefix).
    std::optional<floor_hit> highest_for(std::string_view lock) const;
    // max(own, highest_for(lock)); the floor is named when it is strictly above `own`.
    effective_fence effective(std::string_view lock, std::optional<token_t> own) const;

    std::vector<floor_entry> list() const; // sorted bytewise by prefix
    std::size_t size() const noexcept { return floors_.size(); }
    bool empty() const noexcept { return floors_.empty(); }

private:
    struct value {
        token_t token = 0;
        std::int64_t updated_at_ms = 0;
    };
    std::map<std::string, value, std::less<>> floors_;
    // How many floors have a prefix of each length: a lookup probes one length at a time.
    std::map<std::size_t, std::size_t> lengths_;
};

} // namespace fk::fence
