#include "backends/file/detail/checkpoint_watch.hpp"

namespace fk::store::detail {

void checkpoint_watch::committed(int pages, int due_pages, clock::time_point now) noexcept {
    health_.wal_pages.store(pages, std::memory_order_relaxed);
    if (pages >= due_pages)
        health_.wal_behind(now);
}

checkpoint_watch::notice checkpoint_watch::checkpointed(bool ok, int log, int done,
                                                        const std::string& error,
                                                        clock::time_point now) {
    notice n;
    n.lag_s = health_.checkpoint_lag_seconds(now);
    if (ok && done >= log) {
        health_.wal_caught_up();
        if (warned_) {
            warned_ = false;
            n.what = notice::kind::resumed;
        }
        return n;
    }
    if (!warned_ && n.lag_s * 1000 >= static_cast<double>(warn_after_.count())) {
        warned_ = true;
        n.what = notice::kind::stalled;
        if (!ok)
            n.error = error;
    }
    return n;
}

} // namespace fk::store::detail
