// The counting operator new and delete of alloc_count.hpp.

#include "tests/support/alloc_count.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>

namespace {

std::atomic<std::size_t> live{0};
std::atomic<std::size_t> peak{0};
thread_local unsigned quiet = 0; // uncounted scopes open on this thread

// In front of every block: its size, and whether it counts.
struct block_header {
    std::size_t size;
    std::size_t counted;
};
constexpr std::size_t header_bytes = alignof(std::max_align_t);
static_assert(sizeof(block_header) <= header_bytes);

// The room in front of a block of alignment `align`: a multiple of it.
constexpr std::size_t room(std::size_t align) noexcept {
    return align > header_bytes ? align : header_bytes;
}

void note(std::size_t n) noexcept {
    const auto now = live.fetch_add(n, std::memory_order_relaxed) + n;
    auto old = peak.load(std::memory_order_relaxed);
    while (now > old && !peak.compare_exchange_weak(old, now, std::memory_order_relaxed)) {
    }
}

void* allocate(std::size_t n, std::size_t align = header_bytes) {
    const std::size_t front = room(align);
    const std::size_t total = (front + n + front - 1) / front * front;
    auto* base = static_cast<unsigned char*>(align > header_bytes ? std::aligned_alloc(front, total)
                                                                  : std::malloc(front + n));
    if (!base)
        throw std::bad_alloc{};
    auto* p = base + front;
    auto* h = reinterpret_cast<block_header*>(p - sizeof(block_header));
    h->size = n;
    h->counted = quiet == 0;
    if (h->counted)
        note(n);
    return p;
}

void* allocate_nothrow(std::size_t n, std::size_t align = header_bytes) noexcept {
    try {
        return allocate(n, align);
    } catch (...) {
        return nullptr;
    }
}

void release(void* q, std::size_t align = header_bytes) noexcept {
    if (!q)
        return;
    auto* p = static_cast<unsigned char*>(q);
    const auto* h = reinterpret_cast<const block_header*>(p - sizeof(block_header));
    if (h->counted)
        live.fetch_sub(h->size, std::memory_order_relaxed);
    std::free(p - room(align));
}

std::size_t align_of(std::align_val_t a) noexcept {
    return static_cast<std::size_t>(a);
}

} // namespace

namespace fk::fuzz {

std::size_t live_bytes() noexcept {
    return live.load(std::memory_order_relaxed);
}
std::size_t peak_bytes() noexcept {
    return peak.load(std::memory_order_relaxed);
}
void reset_peak() noexcept {
    peak.store(live.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

uncounted::uncounted() noexcept {
    ++quiet;
}
uncounted::~uncounted() {
    --quiet;
}

void report(const char* what, std::size_t input, std::size_t before, std::size_t bound) {
    if (!std::getenv("FK_FUZZ_ALLOC_REPORT"))
        return;
    const uncounted q;
    std::fprintf(stderr,
                 "%s: input %zu bytes, peak %zu bytes above the start, bound %zu (%.0f%%)\n", what,
                 input, peak_bytes() - before, bound,
                 100.0 * static_cast<double>(peak_bytes() - before) / static_cast<double>(bound));
}

} // namespace fk::fuzz

void* operator new(std::size_t n) {
    return allocate(n);
}
void* operator new[](std::size_t n) {
    return allocate(n);
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
    return allocate_nothrow(n);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
    return allocate_nothrow(n);
}
void* operator new(std::size_t n, std::align_val_t a) {
    return allocate(n, align_of(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
    return allocate(n, align_of(a));
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
    return allocate_nothrow(n, align_of(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
    return allocate_nothrow(n, align_of(a));
}

void operator delete(void* p) noexcept {
    release(p);
}
void operator delete[](void* p) noexcept {
    release(p);
}
void operator delete(void* p, std::size_t) noexcept {
    release(p);
}
void operator delete[](void* p, std::size_t) noexcept {
    release(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
    release(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
    release(p);
}
void operator delete(void* p, std::align_val_t a) noexcept {
    release(p, align_of(a));
}
void operator delete[](void* p, std::align_val_t a) noexcept {
    release(p, align_of(a));
}
void operator delete(void* p, std::size_t, std::align_val_t a) noexcept {
    release(p, align_of(a));
}
void operator delete[](void* p, std::size_t, std::align_val_t a) noexcept {
    release(p, align_of(a));
}
void operator delete(void* p, std::align_val_t a, const std::nothrow_t&) noexcept {
    release(p, align_of(a));
}
void operator delete[](void* p, std::align_val_t a, const std::nothrow_t&) noexcept {
    release(p, align_of(a));
}
