#pragma once
// The file store's flush and checkpoint health for /metrics (docs/operations.md, "Metrics
// reference"; docs/file-store.md, "Bounded restarts" and "Checkpoints"): written by the
// store's committer, flusher and checkpointer, read on scrape. Relaxed atomics, no locks.

#include <atomic>
#include <chrono>
#include <cstdint>

namespace fk::store {

class file_store_health {
public:
    // Redo rows committed whose files the flusher has not yet made durable: what a crash
    // now would leave the next start to verify.
    std::atomic<std::int64_t> redo_backlog_rows{0};
    // Batches that waited for the flusher because the backlog reached file.max_redo_rows
    // or file.max_redo_bytes, and the time they waited in all.
    std::atomic<std::uint64_t> flush_waits{0};
    std::atomic<std::uint64_t> flush_wait_ns{0};
    // Pages in the index's write-ahead log after the last commit.
    std::atomic<std::int64_t> wal_pages{0};

    // The WAL got frames that no checkpoint has copied into the index file yet (steady
    // clock): from the first such commit on, until a checkpoint copies every frame.
    void wal_behind(std::chrono::steady_clock::time_point now) noexcept {
        std::int64_t expected = 0;
        behind_since_ns_.compare_exchange_strong(expected, ns(now), std::memory_order_relaxed);
    }
    void wal_caught_up() noexcept { behind_since_ns_.store(0, std::memory_order_relaxed); }
    // How long the WAL has held frames not yet in the index file; 0 when it holds none.
    double checkpoint_lag_seconds(std::chrono::steady_clock::time_point now) const noexcept {
        const std::int64_t since = behind_since_ns_.load(std::memory_order_relaxed);
        return since == 0 || ns(now) < since ? 0.0 : static_cast<double>(ns(now) - since) / 1e9;
    }

private:
    static std::int64_t ns(std::chrono::steady_clock::time_point t) noexcept {
        // +1: the clock's epoch (0) means "caught up".
        return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count() +
               1;
    }
    std::atomic<std::int64_t> behind_since_ns_{0};
};

} // namespace fk::store
