#pragma once
// The stale-rejection cache (issue 3 §5). A fence never decreases, so a token below the
// highest fence this process has seen for a lock is stale without asking the database.
// Only rejections are answered from here; every accept goes to the database.
//
// Also remembers which lock a key was last seen under, so that a write is rejected as
// stale from the cache only when the key is known to belong to the lock it names: the
// contract checks lock_mismatch before the fence.
//
// Both maps are bounded LRUs, sharded (one mutex per shard) and safe from any thread.

#include "fence/token.hpp"

#include <array>
#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace fk::store::pg {

namespace detail {

// A plain LRU map; not thread-safe. Capacity 0 keeps nothing.
template <class V> class lru_map {
public:
    explicit lru_map(std::size_t capacity) : capacity_(capacity) {}

    // Returns the value and marks it most recently used.
    V* find(const std::string& key) {
        auto it = map_.find(key);
        if (it == map_.end())
            return nullptr;
        order_.splice(order_.begin(), order_, it->second.pos);
        return &it->second.value;
    }

    // Inserts or returns the existing entry (most recently used); evicts the least
    // recently used entry beyond capacity.
    V* upsert(const std::string& key, const V& value) {
        if (capacity_ == 0)
            return nullptr;
        if (auto* v = find(key))
            return v;
        auto [it, inserted] = map_.emplace(key, entry{value, {}});
        order_.push_front(&it->first);
        it->second.pos = order_.begin();
        if (map_.size() > capacity_) {
            const std::string* oldest = order_.back();
            order_.pop_back();
            map_.erase(*oldest);
        }
        return map_.size() <= capacity_ ? &map_.find(key)->second.value : nullptr;
    }

    void erase(const std::string& key) {
        auto it = map_.find(key);
        if (it == map_.end())
            return;
        order_.erase(it->second.pos);
        map_.erase(it);
    }

    std::size_t size() const noexcept { return map_.size(); }

private:
    struct entry {
        V value;
        typename std::list<const std::string*>::iterator pos;
    };
    std::size_t capacity_;
    std::unordered_map<std::string, entry> map_;
    std::list<const std::string*> order_; // front = most recently used
};

// Shards a map by key hash so that threads rarely contend.
template <class V> class sharded_lru {
public:
    static constexpr std::size_t shard_count = 16;

    explicit sharded_lru(std::size_t capacity)
        : shards_(make_shards((capacity + shard_count - 1) / shard_count)) {}

    template <class F> auto with(const std::string& key, F&& f) {
        auto& s = shards_[std::hash<std::string>{}(key) % shard_count];
        std::lock_guard<std::mutex> guard(s.mutex);
        return f(s.map);
    }

    std::size_t size() {
        std::size_t n = 0;
        for (auto& s : shards_) {
            std::lock_guard<std::mutex> guard(s.mutex);
            n += s.map.size();
        }
        return n;
    }

private:
    struct shard {
        explicit shard(std::size_t cap) : map(cap) {}
        std::mutex mutex;
        lru_map<V> map;
    };
    static std::array<shard, shard_count> make_shards(std::size_t per_shard) {
        return make_shards_impl(per_shard, std::make_index_sequence<shard_count>{});
    }
    template <std::size_t... I>
    static std::array<shard, shard_count> make_shards_impl(std::size_t per_shard,
                                                           std::index_sequence<I...>) {
        return {{(static_cast<void>(I), shard(per_shard))...}};
    }
    std::array<shard, shard_count> shards_;
};

} // namespace detail

class fence_cache {
public:
    // `capacity` locks (and as many keys); 0 disables the cache.
    explicit fence_cache(std::size_t capacity);

    // A fence the database reported (accepted write, stale rejection, read).
    void observe_fence(const std::string& lock, fence::token_t token);
    // The highest fence seen for `lock`, when cached.
    std::optional<fence::token_t> fence(const std::string& lock);
    // The fence that makes `token` stale for `lock`, when the cache proves it.
    std::optional<fence::token_t> stale_bound(const std::string& lock, fence::token_t token);

    // The lock `key` belongs to, as last seen; forget it when the key is deleted.
    void observe_key(const std::string& key, const std::string& lock);
    void forget_key(const std::string& key);
    bool key_known_under(const std::string& key, const std::string& lock);

    std::size_t fence_count() { return fences_.size(); }

private:
    detail::sharded_lru<fence::token_t> fences_;
    detail::sharded_lru<std::string> keys_;
};

} // namespace fk::store::pg
