#pragma once
// The connection pool's bookkeeping, free of I/O so that tests drive it with fakes: which
// idle connection a request gets, who waits, when a waiter is refused, how many
// connections are missing. The asynchronous pool (pool.cpp) calls it from one
// strand only; it is not thread-safe itself.
//
// A slot is one missing connection being made: it tries, and after a failure backs off
// and tries again, until it connects or the pool stops. While any attempt is in progress
// a request waits for it rather than being refused: right after start, and while the pool
// reconnects, "no connection yet" is not "no database". Only when no connection is alive
// and no attempt is in progress (the last ones failed) are requests refused.

#include <algorithm>
#include <cstddef>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

namespace fk::store::pg::detail {

template <class Conn, class Waiter> class pool_state {
public:
    pool_state(std::size_t capacity, std::size_t queue_limit)
        : capacity_(capacity), queue_limit_(queue_limit) {}

    enum class decision { take, wait, reject };
    struct acquired {
        decision d = decision::reject;
        std::optional<Conn> conn; // decision::take
    };

    // An idle connection (most recently used first: it is the likeliest to be alive and
    // warm), else a place in the queue, else a refusal: when the queue is full, or when
    // nothing can serve the request (see has_prospect(): the database is down, we must
    // not make requests wait for it).
    acquired acquire(const Waiter& w) {
        if (!idle_.empty()) {
            Conn c = std::move(idle_.back());
            idle_.pop_back();
            return {decision::take, std::move(c)};
        }
        if (!has_prospect() || waiters_.size() >= queue_limit_)
            return {decision::reject, std::nullopt};
        waiters_.push_back(w);
        return {decision::wait, std::nullopt};
    }

    using handoff = std::optional<std::pair<Waiter, Conn>>;

    // A connection comes back. Healthy ones go to the first waiter (returned with it) or
    // to the idle list; broken ones are forgotten (the caller starts a replacement).
    handoff release(Conn c, bool healthy) {
        if (!healthy) {
            drop();
            return std::nullopt;
        }
        return hand_over(std::move(c));
    }

    // A connection in hand turned out dead (checked before use).
    void drop() {
        if (live_ > 0)
            --live_;
    }

    // A waiter gave up (deadline). False when it is no longer queued.
    bool cancel(const Waiter& w) {
        auto it = std::find(waiters_.begin(), waiters_.end(), w);
        if (it == waiters_.end())
            return false;
        waiters_.erase(it);
        return true;
    }

    // A slot starts, and with it its first attempt (before the caller yields: a request
    // arriving meanwhile waits for the attempt).
    void connect_started() {
        ++connecting_;
        ++attempting_;
    }
    // A slot tries again after backing off.
    void attempt_started() { ++attempting_; }
    // An attempt failed (or was abandoned at stop); its slot backs off or ends. Returns the
    // waiters to refuse now: see stranded_waiters().
    [[nodiscard]] std::vector<Waiter> attempt_failed() {
        if (attempting_ > 0)
            --attempting_;
        return stranded_waiters();
    }
    // A slot ends without a connection (the pool stops); no attempt of it is in progress.
    void slot_ended() {
        if (connecting_ > 0)
            --connecting_;
    }
    // An attempt succeeded and its slot ends: the connection goes to the first waiter
    // (returned with it) or idle.
    handoff connected(Conn c) {
        if (attempting_ > 0)
            --attempting_;
        slot_ended();
        ++live_;
        return hand_over(std::move(c));
    }

    // A connection is alive or an attempt is in progress, so a request may wait.
    bool has_prospect() const noexcept { return live_ > 0 || attempting_ > 0; }

    // How many connections to start so that live + connecting reaches capacity.
    std::size_t missing() const noexcept {
        const std::size_t have = live_ + connecting_;
        return have >= capacity_ ? 0 : capacity_ - have;
    }

    // Waiters that cannot be served any more: no connection alive and no attempt in
    // progress (a slot backing off is not counted on: its last attempt failed). Called
    // after a drop, once the replacements have been started, and by attempt_failed().
    [[nodiscard]] std::vector<Waiter> stranded_waiters() {
        std::vector<Waiter> out;
        if (!has_prospect()) {
            out.assign(waiters_.begin(), waiters_.end());
            waiters_.clear();
        }
        return out;
    }

    // Stop: every idle connection and every waiter, to close and refuse.
    std::vector<Conn> take_idle() {
        std::vector<Conn> out(std::make_move_iterator(idle_.begin()),
                              std::make_move_iterator(idle_.end()));
        live_ -= std::min(live_, idle_.size());
        idle_.clear();
        return out;
    }
    std::vector<Waiter> take_waiters() {
        std::vector<Waiter> out(waiters_.begin(), waiters_.end());
        waiters_.clear();
        return out;
    }

    std::size_t live() const noexcept { return live_; }
    std::size_t idle() const noexcept { return idle_.size(); }
    std::size_t waiting() const noexcept { return waiters_.size(); }
    std::size_t connecting() const noexcept { return connecting_; }
    std::size_t attempting() const noexcept { return attempting_; }
    std::size_t capacity() const noexcept { return capacity_; }

private:
    handoff hand_over(Conn c) {
        if (!waiters_.empty()) {
            Waiter w = waiters_.front();
            waiters_.pop_front();
            return std::pair<Waiter, Conn>(std::move(w), std::move(c));
        }
        idle_.push_back(std::move(c));
        return std::nullopt;
    }

    std::size_t capacity_;
    std::size_t queue_limit_;
    std::size_t live_ = 0;       // idle + in use
    std::size_t connecting_ = 0; // slots: attempting or backing off
    std::size_t attempting_ = 0; // slots with an attempt in progress
    std::vector<Conn> idle_;
    std::deque<Waiter> waiters_;
};

} // namespace fk::store::pg::detail
