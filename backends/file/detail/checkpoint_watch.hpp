#pragma once
// When the file store's checkpoints fall behind, and what to say about it
// (docs/file-store.md, "Checkpoints"). Pure logic over the outcomes the store reports and
// the time it passes in: no SQLite, no threads, so that the rules are unit-tested.
//
// A checkpoint is due once the WAL holds checkpoint_pages; from then on the WAL is
// "behind" until a checkpoint copies every frame it found (done == log). A checkpoint
// that is busy (another connection's checkpoint, SQLITE_BUSY) or stops short (a reader
// still needs the frames) is normal under load and says nothing; only being behind for
// longer than `warn_after` is worth a line, once, and another when it is over.

#include "backends/file_store_health.hpp"

#include <chrono>
#include <string>

namespace fk::store::detail {

class checkpoint_watch {
public:
    using clock = std::chrono::steady_clock;

    struct notice {
        enum class kind { none, stalled, resumed } what = kind::none;
        double lag_s = 0;  // how long the WAL had been behind
        std::string error; // stalled: the last failed checkpoint's error, "" when it was
                           // short or busy
    };

    checkpoint_watch(file_store_health& health, std::chrono::milliseconds warn_after)
        : health_(health), warn_after_(warn_after) {}

    // A commit left `pages` in the WAL; `due_pages`: where a checkpoint becomes due.
    // (Any thread: only the health's atomics.)
    void committed(int pages, int due_pages, clock::time_point now) noexcept;

    // A checkpoint ended: `ok` false when SQLite refused it (`error` says why), else it
    // copied `done` of the WAL's `log` frames. REQUIRES: one caller at a time (the store's
    // checkpoint mutex).
    notice checkpointed(bool ok, int log, int done, const std::string& error,
                        clock::time_point now);

private:
    file_store_health& health_;
    std::chrono::milliseconds warn_after_;
    bool warned_ = false;
};

} // namespace fk::store::detail
