#include "proxy/overload.hpp"

#include <cassert>

namespace fk::proxy {

limiter::permit limiter::try_acquire() noexcept {
    // A CAS loop rather than fetch_add-then-undo: an add that overshoots and is taken
    // back would make a concurrent caller see the limit reached when it was not.
    std::size_t current = in_use_.load(std::memory_order_relaxed);
    do {
        if (current >= limit_.load(std::memory_order_relaxed)) {
            return permit();
        }
    } while (!in_use_.compare_exchange_weak(current, current + 1, std::memory_order_acquire,
                                            std::memory_order_relaxed));
    return permit(this);
}

void limiter::release_one() noexcept {
    [[maybe_unused]] const auto before = in_use_.fetch_sub(1, std::memory_order_release);
    assert(before > 0 && "limiter: more releases than acquisitions");
}

} // namespace fk::proxy
