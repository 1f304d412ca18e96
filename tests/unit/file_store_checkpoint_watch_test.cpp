#include "backends/file/detail/checkpoint_watch.hpp"

// When the file store's checkpoints are behind and what it says (docs/file-store.md,
// "Checkpoints"): busy and short checkpoints are quiet, being behind for longer than the
// threshold is one warning, the next complete checkpoint one notice.

#include <doctest/doctest.h>

using fk::store::file_store_health;
using fk::store::detail::checkpoint_watch;
using namespace std::chrono_literals;
using kind = checkpoint_watch::notice::kind;

namespace {
constexpr int due = 2048;
const auto t0 = std::chrono::steady_clock::time_point{} + 1000s;
} // namespace

TEST_CASE("checkpoint_watch: nothing is behind until a checkpoint is due") {
    file_store_health h;
    checkpoint_watch w(h, 10s);
    w.committed(100, due, t0);
    CHECK(h.wal_pages == 100);
    CHECK(h.checkpoint_lag_seconds(t0 + 60s) == 0);
    // A checkpoint that finds frames others still need, long after: not behind.
    CHECK(w.checkpointed(true, 100, 40, "", t0 + 60s).what == kind::none);
}

TEST_CASE("checkpoint_watch: busy and short checkpoints are quiet until the threshold") {
    file_store_health h;
    checkpoint_watch w(h, 10s);
    w.committed(due, due, t0);
    w.committed(due + 50, due, t0 + 1s); // still behind since t0
    CHECK(h.checkpoint_lag_seconds(t0 + 3s) == doctest::Approx(3.0));
    CHECK(w.checkpointed(false, -1, -1, "database is locked", t0 + 2s).what == kind::none);
    CHECK(w.checkpointed(true, due + 50, due, "", t0 + 9s).what == kind::none);
    auto n = w.checkpointed(false, -1, -1, "database is locked", t0 + 10s);
    CHECK(n.what == kind::stalled);
    CHECK(n.lag_s == doctest::Approx(10.0));
    CHECK(n.error == "database is locked");
    // Said once per episode.
    CHECK(w.checkpointed(true, due + 90, due, "", t0 + 30s).what == kind::none);
    // A complete checkpoint ends it, and says so.
    n = w.checkpointed(true, due + 90, due + 90, "", t0 + 31s);
    CHECK(n.what == kind::resumed);
    CHECK(n.lag_s == doctest::Approx(31.0));
    CHECK(h.checkpoint_lag_seconds(t0 + 40s) == 0);
    // A quiet complete checkpoint says nothing.
    w.committed(due, due, t0 + 50s);
    CHECK(w.checkpointed(true, due, due, "", t0 + 51s).what == kind::none);
    // A stall after a short one names no error.
    w.committed(due, due, t0 + 60s);
    n = w.checkpointed(true, due, 10, "", t0 + 75s);
    CHECK(n.what == kind::stalled);
    CHECK(n.error.empty());
}

TEST_CASE("checkpoint_watch: a complete checkpoint without a warning is no notice") {
    file_store_health h;
    checkpoint_watch w(h, 10s);
    w.committed(due * 2, due, t0);
    CHECK(w.checkpointed(true, due * 2, due * 2, "", t0 + 1s).what == kind::none);
    CHECK(h.checkpoint_lag_seconds(t0 + 2s) == 0);
}
