#pragma once
// Admission limits (docs/operations.md, "Limits and overload"): a bounded number of open
// connections and of requests being served at once, so that overload turns into fast refusals
// (connection closed at accept, 503 unavailable + Retry-After) instead of unbounded memory and
// latency.
//
// Pure: atomics only, no I/O, no Boost. The server decides what a refusal looks like.

#include <atomic>
#include <cstddef>
#include <limits>
#include <utility>

namespace fk::proxy {

// Retry-After (seconds) sent with a 503 when a request is shed.
inline constexpr int shed_retry_after_seconds = 1;

// A counting limit: try_acquire() hands out at most `limit` permits at a time and never
// blocks. Lock-free (one CAS loop); the limiter must outlive its permits.
class limiter {
public:
    static constexpr std::size_t unlimited = std::numeric_limits<std::size_t>::max();

    // limit 0 refuses everything (useful while draining); `unlimited` never refuses.
    explicit limiter(std::size_t limit) noexcept : limit_(limit) {}
    limiter(const limiter&) = delete;
    limiter& operator=(const limiter&) = delete;

    // Held for as long as the connection or request it admits; releases on destruction.
    // Movable so it can live in a coroutine frame or a session object.
    class [[nodiscard]] permit {
    public:
        permit() = default; // refused / empty
        permit(permit&& o) noexcept : owner_(std::exchange(o.owner_, nullptr)) {}
        permit& operator=(permit&& o) noexcept {
            if (this != &o) {
                release();
                owner_ = std::exchange(o.owner_, nullptr);
            }
            return *this;
        }
        ~permit() { release(); }

        explicit operator bool() const noexcept { return owner_ != nullptr; }
        void release() noexcept {
            if (owner_ != nullptr) {
                owner_->release_one();
                owner_ = nullptr;
            }
        }

    private:
        friend class limiter;
        explicit permit(limiter* owner) noexcept : owner_(owner) {}
        limiter* owner_ = nullptr;
    };

    // A permit when fewer than limit() are held, else an empty one (test with `if`).
    permit try_acquire() noexcept;

    std::size_t in_use() const noexcept { return in_use_.load(std::memory_order_relaxed); }
    std::size_t limit() const noexcept { return limit_.load(std::memory_order_relaxed); }
    // Lowering the limit revokes nothing: held permits stay valid and new ones are refused
    // until in_use() drops below the new limit.
    void set_limit(std::size_t limit) noexcept { limit_.store(limit, std::memory_order_relaxed); }

private:
    void release_one() noexcept;

    std::atomic<std::size_t> in_use_{0};
    std::atomic<std::size_t> limit_;
};

} // namespace fk::proxy
