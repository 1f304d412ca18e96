#pragma once
// The fence floors a proxy has learned from its store's answers, kept beside the fence
// cache (fence_cache.hpp) for one purpose: a stale rejection that the cache answers can
// name the floor that set its fence, as the store's own rejection does
// (docs/api.md#fence-floors; docs/postgres.md, "Fence floors"). It decides nothing: the
// cache's bound is what refuses, and a floor learned here only names it when the floor's
// token is exactly that bound. Floors only go up, so a learned floor stays true.
//
// Safe from any thread. Holds at most store::max_floors prefixes (a store never has
// more). Empty until a floor is seen: then every lookup costs one atomic load.
#include "backends/store.hpp"
#include "fence/floors.hpp"

#include <atomic>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>

namespace fk::store {

class floor_names {
public:
    // A floor the store reported: `prefix` is at least `token`.
    void learn(std::string_view prefix, fence::token_t token) {
        std::unique_lock lock(mutex_);
        if (floors_.size() >= max_floors && !floors_.floor_of(prefix))
            return;
        floors_.load({std::string(prefix), token, 0});
        any_.store(true, std::memory_order_release);
    }

    // The prefix of the highest learned floor over `lock` when its token is `bound` (the
    // cache's fence for the lock), else nothing.
    std::optional<std::string> name_for(std::string_view lock, fence::token_t bound) const {
        if (!any_.load(std::memory_order_acquire))
            return std::nullopt;
        std::shared_lock lock_guard(mutex_);
        auto hit = floors_.highest_for(lock);
        if (hit && hit->token == bound)
            return std::string(hit->prefix);
        return std::nullopt;
    }

    // The token of the highest learned floor over `lock`, if any.
    std::optional<fence::token_t> highest(std::string_view lock) const {
        if (!any_.load(std::memory_order_acquire))
            return std::nullopt;
        std::shared_lock lock_guard(mutex_);
        if (auto hit = floors_.highest_for(lock))
            return hit->token;
        return std::nullopt;
    }

private:
    mutable std::shared_mutex mutex_;
    fence::floor_set floors_;
    std::atomic<bool> any_{false};
};

} // namespace fk::store
