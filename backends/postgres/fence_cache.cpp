#include "backends/postgres/fence_cache.hpp"

namespace fk::store::pg {

fence_cache::fence_cache(std::size_t capacity) : fences_(capacity), keys_(capacity) {}

void fence_cache::observe_fence(const std::string& lock, fence::token_t token) {
    fences_.with(lock, [&](auto& m) {
        if (auto* v = m.upsert(lock, token); v && *v < token)
            *v = token; // a fence never decreases: keep the maximum seen
    });
}

std::optional<fence::token_t> fence_cache::fence(const std::string& lock) {
    return fences_.with(lock, [&](auto& m) -> std::optional<fence::token_t> {
        if (auto* v = m.find(lock))
            return *v;
        return std::nullopt;
    });
}

std::optional<fence::token_t> fence_cache::stale_bound(const std::string& lock,
                                                       fence::token_t token) {
    auto f = fence(lock);
    if (f && *f > token)
        return f;
    return std::nullopt;
}

void fence_cache::observe_key(const std::string& key, const std::string& lock) {
    keys_.with(key, [&](auto& m) {
        if (auto* v = m.upsert(key, lock))
            *v = lock;
    });
}

void fence_cache::forget_key(const std::string& key) {
    keys_.with(key, [&](auto& m) { m.erase(key); });
}

bool fence_cache::key_known_under(const std::string& key, const std::string& lock) {
    return keys_.with(key, [&](auto& m) {
        auto* v = m.find(key);
        return v && *v == lock;
    });
}

} // namespace fk::store::pg
