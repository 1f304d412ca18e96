#pragma once
// Which queued writes go into the next group-commit batch, free of I/O so that tests
// drive it with fakes. The store calls it from its pool strand only; it is not
// thread-safe itself.
//
// Rules:
//  - first come, first served, except that a write whose key or lock is already in
//    flight (in a batch being executed) or already in the batch being formed waits for a
//    later batch: one batch statement may touch a fence row or a key row only once, and
//    two writes of one lock serialize on its fence row in the database anyway, where the
//    later one would hold up its whole batch;
//  - at most `max_batch` writes per batch;
//  - a write marked alone (its batch aborted; it is being re-run to find out which write
//    caused that) travels by itself;
//  - a retried write goes back to the front, ahead of later writes of its lock.
//
// Batch size adapts to load by itself: the store takes a batch when may_start_batch()
// says so (below), so an idle store sends each write at once, and while batches are
// running writes accumulate here until one finishes.
//
// Entry is pointer-like: e->key and e->lock (string-like, stable while queued or in
// flight) and e->alone (bool).

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <deque>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace fk::store::pg::detail {

// Whether the store may start another batch now, with `in_flight` of its batches in the
// database, the newest started `newest_age` ago:
//  - none in flight: yes (an idle store sends a write at once);
//  - `max_in_flight` (batch_concurrency) in flight: no;
//  - otherwise only once the newest batch has run for `stuck_after` (batch_overlap_ms): it
//    waits for a row lock, or the database or the host has stalled. Until then the writes
//    wait and join the next batch: one batch at a time costs the database the least per
//    write, and a second statement running beside the first only competes with it for
//    the database's CPU (docs/postgres.md, "Why a second batch only beside a stuck one").
inline bool may_start_batch(std::size_t in_flight, std::size_t max_in_flight,
                            std::chrono::steady_clock::duration newest_age,
                            std::chrono::steady_clock::duration stuck_after) {
    if (in_flight == 0)
        return true;
    if (in_flight >= max_in_flight)
        return false;
    return newest_age >= stuck_after;
}

// Whether a database whose round trip measured `round_trip` (zero while unknown) is far:
// at least `far` (far_round_trip_ms; zero turns this off).
inline bool is_far(std::chrono::steady_clock::duration far,
                   std::chrono::steady_clock::duration round_trip) {
    using dur = std::chrono::steady_clock::duration;
    return far > dur::zero() && round_trip > dur::zero() && round_trip >= far;
}

// The `stuck_after` for may_start_batch, given the database's measured round trip
// (`round_trip`, zero while unknown): batch_overlap_ms (`configured`), except for a far
// database, whose round trip is at least `far` (far_round_trip_ms; zero turns this off).
// There a batch spends most of its time on the network, where a second one beside it
// costs neither the database nor this host CPU, and writes that waited for the first to
// come back would wait a whole round trip more: the second starts after half a round
// trip, or after `configured` if that is sooner (docs/postgres.md, "A far database").
inline std::chrono::steady_clock::duration
overlap_after(std::chrono::steady_clock::duration configured,
              std::chrono::steady_clock::duration far,
              std::chrono::steady_clock::duration round_trip) {
    return is_far(far, round_trip) ? std::min(configured, round_trip / 2) : configured;
}

template <class Entry> class batch_queue {
public:
    explicit batch_queue(std::size_t max_batch) : max_batch_(std::max<std::size_t>(1, max_batch)) {
        // Room for two full batches in flight (the default batch_concurrency) without a
        // rehash on the hot path.
        keys_in_flight_.reserve(2 * max_batch_);
        locks_in_flight_.reserve(2 * max_batch_);
    }

    void push(Entry e) { queue_.push_back(std::move(e)); }
    void push_front(Entry e) { queue_.push_front(std::move(e)); }

    // A waiter gave up while still queued. False when it is not queued (in flight).
    bool remove(const Entry& e) {
        auto it = std::find(queue_.begin(), queue_.end(), e);
        if (it == queue_.end())
            return false;
        queue_.erase(it);
        return true;
    }

    // Takes every queued (not in flight) entry for which `pred` holds, in queue order.
    template <class Pred> std::vector<Entry> remove_if(Pred pred) {
        std::vector<Entry> out;
        for (auto it = queue_.begin(); it != queue_.end();) {
            if (pred(*it)) {
                out.push_back(std::move(*it));
                it = queue_.erase(it);
            } else {
                ++it;
            }
        }
        return out;
    }

    // The next batch (empty when nothing queued can go now); its keys and locks are in
    // flight until done().
    std::vector<Entry> take() {
        std::vector<Entry> out;
        out.reserve(std::min(max_batch_, queue_.size()));
        // A write taken goes in flight at once, so busy() also turns away later writes
        // of a key or lock already in this batch (no per-batch sets to build and free).
        for (auto it = queue_.begin(); it != queue_.end() && out.size() < max_batch_;) {
            const Entry& e = *it;
            const std::string_view key = e->key, lock = e->lock;
            if (busy(key, lock) || (e->alone && !out.empty())) {
                ++it;
                continue;
            }
            keys_in_flight_.insert(key);
            locks_in_flight_.insert(lock);
            out.push_back(std::move(*it));
            it = queue_.erase(it);
            if (out.back()->alone)
                break;
        }
        return out;
    }

    // The batch is over: its keys and locks are free again (call before re-queueing
    // its retries, with the same entries take() returned).
    void done(const std::vector<Entry>& batch) {
        for (const auto& e : batch) {
            keys_in_flight_.erase(std::string_view(e->key));
            locks_in_flight_.erase(std::string_view(e->lock));
        }
    }

    // take() would return something now.
    bool has_ready() const {
        for (const auto& e : queue_)
            if (!busy(e->key, e->lock))
                return true;
        return false;
    }

    // Everything still queued (stop): the caller refuses them.
    std::vector<Entry> take_queued() {
        std::vector<Entry> out(std::make_move_iterator(queue_.begin()),
                               std::make_move_iterator(queue_.end()));
        queue_.clear();
        return out;
    }

    std::size_t size() const noexcept { return queue_.size(); }
    bool empty() const noexcept { return queue_.empty(); }
    std::size_t in_flight() const noexcept { return keys_in_flight_.size(); }
    std::size_t max_batch() const noexcept { return max_batch_; }

private:
    bool busy(std::string_view key, std::string_view lock) const {
        return keys_in_flight_.count(key) || locks_in_flight_.count(lock);
    }

    std::size_t max_batch_;
    std::deque<Entry> queue_;
    std::unordered_set<std::string_view> keys_in_flight_;
    std::unordered_set<std::string_view> locks_in_flight_;
};

} // namespace fk::store::pg::detail
