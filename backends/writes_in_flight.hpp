#pragma once
// Which locks have a write in flight in this process: what lets a stale rejection that
// the fence cache answers (fence_cache.hpp) report the effective fence at a moment of the
// request, as docs/api.md promises for one proxy ("current_token").
//
// The cache learns a fence when the store's answer comes back, after the commit is
// already visible to every reader of the database: in between, a GET can return a write
// whose fence the cache does not know yet. So the cache answers a rejection only when no
// write that could move the lock's fence was in flight from before it read the cache to
// after: then every fence this process committed for the lock had been learned (each
// write learns before it ends), and with one proxy the cache's fence is the fence. A
// rejection that finds a write in flight goes to the database, which decides it exactly.
//
// One 64-bit word per slot, a lock hashed to one of `slot_count`: the low 16 bits count
// the writes in flight, the rest counts the writes ended (a sequence number, as in a
// seqlock). A reader takes a word with no write in flight, reads the cache, and checks
// that the word has not changed. Two locks sharing a slot only send a rejection to the
// database now and then. A floor raise moves every lock's effective fence: it counts in
// one more word that every reader checks.
//
// Lock-free, safe from any thread; a guard may be held across co_await.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <utility>

namespace fk::store {

class writes_in_flight {
public:
    static constexpr std::size_t slot_count = 4096;

    // A write in flight until destroyed (or moved from).
    class guard {
    public:
        guard() = default;
        guard(guard&& o) noexcept : word_(std::exchange(o.word_, nullptr)) {}
        guard& operator=(guard&& o) noexcept {
            if (this != &o) {
                end();
                word_ = std::exchange(o.word_, nullptr);
            }
            return *this;
        }
        guard(const guard&) = delete;
        guard& operator=(const guard&) = delete;
        ~guard() { end(); }

    private:
        friend class writes_in_flight;
        explicit guard(std::atomic<std::uint64_t>* w) : word_(w) {
            word_->fetch_add(1, std::memory_order_seq_cst);
        }
        void end() {
            if (word_)
                std::exchange(word_, nullptr)->fetch_add(ended - 1, std::memory_order_seq_cst);
        }
        std::atomic<std::uint64_t>* word_ = nullptr;
    };

    // Before a write that can move `lock`'s fence is sent; held until the cache has
    // learned its answer.
    guard begin(std::string_view lock) { return guard(&slots_[slot_of(lock)]); }
    // Before a floor raise: every lock's effective fence may move.
    guard begin_every_lock() { return guard(&every_); }

    struct stamp {
        std::uint64_t slot, every;
    };
    // The words of `lock`, when no write that could move its fence is in flight.
    std::optional<stamp> quiet(std::string_view lock) const {
        const stamp s{slots_[slot_of(lock)].load(std::memory_order_seq_cst),
                      every_.load(std::memory_order_seq_cst)};
        if ((s.slot & in_flight_mask) != 0 || (s.every & in_flight_mask) != 0)
            return std::nullopt;
        return s;
    }
    // True when no write of `lock`'s slot (or floor raise) began or ended since `s`.
    bool still(std::string_view lock, const stamp& s) const {
        return slots_[slot_of(lock)].load(std::memory_order_seq_cst) == s.slot &&
               every_.load(std::memory_order_seq_cst) == s.every;
    }

private:
    static constexpr std::uint64_t ended = std::uint64_t{1} << 16;
    static constexpr std::uint64_t in_flight_mask = ended - 1;
    static std::size_t slot_of(std::string_view lock) {
        return std::hash<std::string_view>{}(lock) % slot_count;
    }
    std::array<std::atomic<std::uint64_t>, slot_count> slots_{};
    std::atomic<std::uint64_t> every_{0};
};

} // namespace fk::store
