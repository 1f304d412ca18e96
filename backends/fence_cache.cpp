#include "backends/fence_cache.hpp"

namespace fk::store {

namespace {
// Names the tables cannot hold (never sent by a client: names are at most 1 KiB).
bool too_long(std::size_t bytes) {
    return bytes > cache_detail::packed_name::max_size;
}
} // namespace

fence_cache::fence_cache(std::size_t capacity)
    : enabled_(capacity > 0), fences_(capacity), keys_(capacity) {}

void fence_cache::observe_fence(const std::string& lock, fence::token_t token) {
    if (!enabled_ || too_long(lock.size()))
        return;
    fences_.with(lock, [&](auto& t, std::uint32_t h) {
        if (auto* s = t.find(lock, h)) {
            if (s->token < token)
                s->token = token; // a fence never decreases: keep the maximum seen
        } else {
            t.insert(cache_detail::fence_slot(lock, token, h));
        }
    });
}

void fence_cache::forget_fence(const std::string& lock) {
    if (!enabled_ || too_long(lock.size()))
        return;
    fences_.with(lock, [&](auto& t, std::uint32_t h) { t.erase(lock, h); });
}

std::optional<fence::token_t> fence_cache::fence(const std::string& lock) {
    if (!enabled_)
        return std::nullopt;
    return fences_.with(lock, [&](auto& t, std::uint32_t h) -> std::optional<fence::token_t> {
        if (auto* s = t.find(lock, h))
            return s->token;
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
    if (!enabled_)
        return;
    keys_.with(key, [&](auto& t, std::uint32_t h) {
        auto* s = t.find(key, h);
        if (too_long(key.size() + lock.size())) {
            if (s) // whatever was known about the key is out of date
                t.erase(key, h);
        } else if (!s) {
            t.insert(cache_detail::key_slot(key, lock, h));
        } else if (s->lock() != lock) {
            s->set(key, lock);
        }
    });
}

void fence_cache::forget_key(const std::string& key) {
    if (!enabled_)
        return;
    keys_.with(key, [&](auto& t, std::uint32_t h) { t.erase(key, h); });
}

bool fence_cache::key_known_under(const std::string& key, const std::string& lock) {
    if (!enabled_)
        return false;
    return keys_.with(key, [&](auto& t, std::uint32_t h) {
        const auto* s = t.find(key, h);
        return s && s->lock() == lock;
    });
}

} // namespace fk::store
