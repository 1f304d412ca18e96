#pragma once
// The stale-rejection cache (docs/architecture.md, "The fence cache"; docs/postgres.md). A fence
// never decreases, so a token below the highest fence this process has seen for a lock is stale
// without asking the database. Only rejections are answered from here; every accept goes to the
// database.
//
// Also remembers which lock a key was last seen under, so that a write is rejected as
// stale from the cache only when the key is known to belong to the lock it names: the
// contract checks lock_mismatch before the fence.
//
// Both maps are bounded and sharded (one mutex per shard), safe from any thread. Memory
// matters here (1M locks in well under 256 MiB: docs/benchmarks.md), so each shard is one flat
// open-addressing table (Robin Hood probing, backward-shift deletion) of 32-byte slots
// that hold the full names: up to 15 bytes inline, longer ones in one exact-size heap
// block. A key whose lock is the key itself (the common case) stores its name once.
// About 80 bytes per lock in all, plus the heap blocks of names longer than 15 bytes.
//
// Eviction is approximately LRU: every hit or insert stamps the entry from a per-shard
// counter, and when a shard is full the oldest of the next `eviction_sample` entries at a
// rotating hand is dropped (exact LRU while a shard holds no more than that many). A
// freshly inserted or recently used entry is never the one dropped while older ones are
// in the sample.

#include "fence/token.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fk::store {

namespace cache_detail {

// A byte string in 16 bytes: up to 15 bytes inline, longer ones in an exact-size heap
// block. It can hold two strings back to back (the caller remembers where they split).
class packed_name {
public:
    static constexpr std::size_t inline_capacity = 15;
    static constexpr std::size_t max_size = 0xFFFF'FFFFu;

    packed_name() noexcept { bytes_.fill(0); }
    // `a` followed by `b`; a.size() + b.size() must not exceed max_size.
    explicit packed_name(std::string_view a, std::string_view b = {}) {
        bytes_.fill(0);
        const std::size_t n = a.size() + b.size();
        char* p = bytes_.data();
        if (n > inline_capacity) {
            p = static_cast<char*>(::operator new(n));
            const auto n32 = static_cast<std::uint32_t>(n);
            std::memcpy(bytes_.data(), &p, sizeof p);
            std::memcpy(bytes_.data() + sizeof p, &n32, sizeof n32);
            bytes_[tag_at] = heap_tag;
        } else {
            bytes_[tag_at] = static_cast<char>(n);
        }
        if (!a.empty())
            std::memcpy(p, a.data(), a.size());
        if (!b.empty())
            std::memcpy(p + a.size(), b.data(), b.size());
    }
    packed_name(packed_name&& o) noexcept : bytes_(o.bytes_) { o.bytes_.fill(0); }
    packed_name& operator=(packed_name&& o) noexcept {
        if (this != &o) {
            release();
            bytes_ = o.bytes_;
            o.bytes_.fill(0);
        }
        return *this;
    }
    packed_name(const packed_name&) = delete;
    packed_name& operator=(const packed_name&) = delete;
    ~packed_name() { release(); }

    std::string_view view() const noexcept {
        if (!on_heap())
            return {bytes_.data(), static_cast<std::size_t>(bytes_[tag_at])};
        const char* p = nullptr;
        std::uint32_t n = 0;
        std::memcpy(&p, bytes_.data(), sizeof p);
        std::memcpy(&n, bytes_.data() + sizeof p, sizeof n);
        return {p, n};
    }
    bool on_heap() const noexcept { return bytes_[tag_at] == heap_tag; }

private:
    static constexpr std::size_t tag_at = 15;
    static constexpr char heap_tag = static_cast<char>(0x80);
    static_assert(sizeof(char*) + sizeof(std::uint32_t) <= tag_at);

    void release() noexcept {
        if (on_heap()) {
            char* p = nullptr;
            std::memcpy(&p, bytes_.data(), sizeof p);
            ::operator delete(p);
        }
    }
    alignas(8) std::array<char, 16> bytes_;
};

// What every slot starts its bookkeeping with: the name's hash (0 = empty slot; moving a
// slot out leaves it empty) and the stamp of its last use.
struct slot_meta {
    std::uint32_t hash = 0;
    std::uint32_t stamp = 0;

    slot_meta() = default;
    explicit slot_meta(std::uint32_t h) noexcept : hash(h) {}
    slot_meta(slot_meta&& o) noexcept : hash(std::exchange(o.hash, 0)), stamp(o.stamp) {}
    slot_meta& operator=(slot_meta&& o) noexcept {
        hash = std::exchange(o.hash, 0);
        stamp = o.stamp;
        return *this;
    }
};

// lock → highest fence seen.
struct fence_slot {
    packed_name name;
    fence::token_t token = 0;
    slot_meta meta;

    fence_slot() = default;
    fence_slot(std::string_view lock, fence::token_t t, std::uint32_t h)
        : name(lock), token(t), meta(h) {}
    std::string_view key() const noexcept { return name.view(); }
};

// key → the lock it was last seen under. The key and, unless it is the key itself, the
// lock share one packed_name.
struct key_slot {
    packed_name names;
    slot_meta meta;
    std::uint32_t key_size = 0;
    bool lock_is_key = false;

    key_slot() = default;
    key_slot(std::string_view key, std::string_view lock, std::uint32_t h) : meta(h) {
        set(key, lock);
    }
    void set(std::string_view key, std::string_view lock) {
        lock_is_key = key == lock;
        names = packed_name(key, lock_is_key ? std::string_view{} : lock);
        key_size = static_cast<std::uint32_t>(key.size());
    }
    std::string_view key() const noexcept { return names.view().substr(0, key_size); }
    std::string_view lock() const noexcept {
        return lock_is_key ? key() : names.view().substr(key_size);
    }
};

static_assert(sizeof(fence_slot) == 32 && sizeof(key_slot) == 32);

// A bounded map from a name to a Slot: one flat Robin Hood table; not thread-safe.
// Capacity 0 keeps nothing. Slot has `slot_meta meta`, `std::string_view key() const`,
// a default (empty) state and moves that leave the source empty.
template <class Slot> class lru_table {
public:
    // Entries examined per eviction; the oldest of them goes.
    static constexpr std::size_t eviction_sample = 8;

    lru_table() = default;
    explicit lru_table(std::size_t capacity)
        : capacity_(capacity), max_slots_(capacity == 0 ? 0 : capacity + capacity / 4 + 1) {}

    // The entry for `key` (whose hash is `h`, never 0), marked as just used.
    Slot* find(std::string_view key, std::uint32_t h) noexcept {
        const std::size_t n = slots_.size();
        if (n == 0)
            return nullptr;
        for (std::size_t i = home(h, n), dist = 0;; i = next(i, n), ++dist) {
            Slot& s = slots_[i];
            if (s.meta.hash == 0 || distance(s.meta.hash, i, n) < dist)
                return nullptr;
            if (s.meta.hash == h && s.key() == key) {
                s.meta.stamp = ++clock_;
                return &s;
            }
        }
    }

    // Adds `s`, whose key must not be present; drops the least recently used entry (as
    // sampled) when full. Returns the new entry, or nullptr when the capacity is 0.
    Slot* insert(Slot s) {
        if (capacity_ == 0)
            return nullptr;
        if (size_ >= capacity_)
            evict_one();
        else if (slots_.size() < max_slots_ && (size_ + 1) * 5 > slots_.size() * 4)
            grow();
        s.meta.stamp = ++clock_;
        return place(std::move(s));
    }

    bool erase(std::string_view key, std::uint32_t h) noexcept {
        Slot* s = find(key, h);
        if (!s)
            return false;
        erase_at(static_cast<std::size_t>(s - slots_.data()));
        return true;
    }

    std::size_t size() const noexcept { return size_; }
    std::size_t capacity() const noexcept { return capacity_; }
    std::size_t slot_count() const noexcept { return slots_.size(); }

private:
    static constexpr std::size_t min_slots = 16;

    // Maps the hash onto [0, n) without a division (Lemire's multiply-shift).
    static std::size_t home(std::uint32_t h, std::size_t n) noexcept {
        return static_cast<std::size_t>((static_cast<std::uint64_t>(h) * n) >> 32);
    }
    static std::size_t next(std::size_t i, std::size_t n) noexcept {
        return i + 1 == n ? 0 : i + 1;
    }
    static std::size_t distance(std::uint32_t h, std::size_t i, std::size_t n) noexcept {
        const std::size_t at = home(h, n);
        return i >= at ? i - at : i + n - at;
    }

    // Robin Hood insertion: `s` takes the place of the first entry nearer its home than
    // `s` is to its own, which moves on in turn. There is always an empty slot.
    Slot* place(Slot&& s) noexcept {
        const std::size_t n = slots_.size();
        Slot* placed = nullptr;
        for (std::size_t i = home(s.meta.hash, n), dist = 0;; i = next(i, n), ++dist) {
            Slot& cur = slots_[i];
            if (cur.meta.hash == 0) {
                cur = std::move(s);
                ++size_;
                return placed ? placed : &cur;
            }
            if (const std::size_t d = distance(cur.meta.hash, i, n); d < dist) {
                std::swap(cur, s);
                if (!placed)
                    placed = &cur;
                dist = d;
            }
        }
    }

    // Backward-shift deletion: the entries after `i` that are away from home move back.
    void erase_at(std::size_t i) noexcept {
        const std::size_t n = slots_.size();
        slots_[i] = Slot{};
        for (std::size_t j = next(i, n);; i = j, j = next(j, n)) {
            Slot& s = slots_[j];
            if (s.meta.hash == 0 || distance(s.meta.hash, j, n) == 0)
                break;
            slots_[i] = std::move(s);
        }
        --size_;
    }

    // Drops the oldest of the next eviction_sample entries from the hand on; the hand
    // then moves past them, so successive evictions sample the whole table in turn.
    void evict_one() noexcept {
        const std::size_t n = slots_.size();
        const std::size_t want = size_ < eviction_sample ? size_ : eviction_sample;
        std::size_t i = hand_ < n ? hand_ : 0;
        std::size_t victim = 0;
        std::uint32_t oldest = 0;
        for (std::size_t seen = 0; seen < want; i = next(i, n)) {
            const Slot& s = slots_[i];
            if (s.meta.hash == 0)
                continue;
            // Stamps wrap around; the age is right while it is below 2^32 uses.
            const std::uint32_t age = clock_ - s.meta.stamp;
            if (seen++ == 0 || age > oldest) {
                victim = i;
                oldest = age;
            }
        }
        hand_ = i;
        erase_at(victim);
    }

    // Doubles the table, up to max_slots_ (capacity / 0.8): only as much as is used.
    void grow() {
        std::size_t n = slots_.empty() ? min_slots : slots_.size() * 2;
        if (n > max_slots_)
            n = max_slots_;
        std::vector<Slot> old(n);
        old.swap(slots_);
        size_ = 0;
        hand_ = 0;
        for (Slot& s : old)
            if (s.meta.hash != 0)
                place(std::move(s));
    }

    std::size_t capacity_ = 0;
    std::size_t max_slots_ = 0;
    std::size_t size_ = 0;
    std::size_t hand_ = 0;
    std::uint32_t clock_ = 0;
    std::vector<Slot> slots_;
};

// A name's hash: the top bits pick the shard, the low 32 bits (never 0) go to the table.
struct name_hash {
    std::uint64_t bits;

    explicit name_hash(std::string_view name) noexcept {
        // std::hash, then the splitmix64 finaliser, so every bit depends on every byte.
        std::uint64_t x = std::hash<std::string_view>{}(name);
        x ^= x >> 30;
        x *= 0xbf58476d1ce4e5b9ull;
        x ^= x >> 27;
        x *= 0x94d049bb133111ebull;
        x ^= x >> 31;
        bits = x;
    }
    std::uint32_t table_hash() const noexcept {
        const auto h = static_cast<std::uint32_t>(bits);
        return h != 0 ? h : 1;
    }
};

// Shards tables by hash so that threads rarely contend. Each shard holds up to
// ceil(capacity / shard_count) entries.
template <class Slot> class sharded_table {
public:
    static constexpr std::size_t shard_count = 16;

    explicit sharded_table(std::size_t capacity) {
        const std::size_t per_shard = (capacity + shard_count - 1) / shard_count;
        for (auto& s : shards_)
            s.table = lru_table<Slot>(per_shard);
    }

    // Calls f(table, table_hash) under the shard's lock.
    template <class F> decltype(auto) with(std::string_view name, F&& f) {
        const name_hash h(name);
        auto& s = shards_[h.bits >> 60];
        std::lock_guard<std::mutex> guard(s.mutex);
        return f(s.table, h.table_hash());
    }

    std::size_t size() {
        std::size_t n = 0;
        for (auto& s : shards_) {
            std::lock_guard<std::mutex> guard(s.mutex);
            n += s.table.size();
        }
        return n;
    }

private:
    static_assert(shard_count == 16, "with() picks the shard from the top 4 bits");
    struct alignas(64) shard {
        std::mutex mutex;
        lru_table<Slot> table;
    };
    std::array<shard, shard_count> shards_;
};

} // namespace cache_detail

class fence_cache {
public:
    // `capacity` locks (and as many keys); 0 disables the cache.
    explicit fence_cache(std::size_t capacity);

    // A fence the database reported (accepted write, stale rejection, read).
    void observe_fence(const std::string& lock, fence::token_t token);
    // Forgets `lock`'s fence: a write of unknown outcome may have moved it.
    void forget_fence(const std::string& lock);
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
    bool enabled_;
    cache_detail::sharded_table<cache_detail::fence_slot> fences_;
    cache_detail::sharded_table<cache_detail::key_slot> keys_;
};

} // namespace fk::store
