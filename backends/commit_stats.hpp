#pragma once
// Group-commit batch sizes for /metrics (fencekeeper_store_batch_size): how many writes
// each commit of a store carried. Observed by the store's committing path, read on
// scrape; relaxed atomics, no locks, no allocation.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace fk::store {

class commit_stats {
public:
    // Inclusive upper bounds of the buckets; a last, unbounded bucket follows.
    static constexpr std::array<std::uint64_t, 11> bounds = {1,  2,   4,   8,   16,  32,
                                                             64, 128, 256, 512, 1024};

    struct snapshot {
        std::array<std::uint64_t, bounds.size() + 1> buckets{}; // not cumulative
        std::uint64_t writes = 0;                               // sum of all batch sizes
    };

    void observe(std::size_t writes) noexcept {
        std::size_t i = 0;
        while (i < bounds.size() && writes > bounds[i])
            ++i;
        buckets_[i].fetch_add(1, std::memory_order_relaxed);
        writes_.fetch_add(writes, std::memory_order_relaxed);
    }

    snapshot read() const noexcept {
        snapshot s;
        for (std::size_t i = 0; i < buckets_.size(); ++i)
            s.buckets[i] = buckets_[i].load(std::memory_order_relaxed);
        s.writes = writes_.load(std::memory_order_relaxed);
        return s;
    }

private:
    std::array<std::atomic<std::uint64_t>, bounds.size() + 1> buckets_{};
    std::atomic<std::uint64_t> writes_{0};
};

} // namespace fk::store
