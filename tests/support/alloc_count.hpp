#pragma once
// Counts the bytes allocated through operator new, for the tests whose oracle is memory
// (tests/fuzz/fuzz_txn_body.cpp, fuzz_session.cpp; tests/unit/memory_parse_test.cpp).
// alloc_count.cpp replaces every form of the global operator new and delete (plain,
// array, nothrow, sized, aligned); each block carries its size in front, so that delete
// knows what it frees. Link alloc_count.cpp into an executable of its own to use it: it
// changes every allocation of the process.
//
// Not counted: what bypasses operator new. Asio's recycling allocator takes the frames
// of its coroutines and its handlers' memory from aligned_alloc; they are per connection
// and per operation in flight, not per byte of input.

#include <cstddef>

namespace fk::fuzz {

// Bytes live now through operator new (the counted ones).
std::size_t live_bytes() noexcept;
// The most bytes live since the last reset_peak().
std::size_t peak_bytes() noexcept;
// Starts a new peak at what is live now.
void reset_peak() noexcept;

// While one exists on a thread, what that thread allocates is not counted, and neither
// is its release, wherever that happens: for what a harness's fakes keep of their own
// (an in-memory store's copies) and the harness's own bookkeeping. A block allocated
// before is still released as counted.
class uncounted {
public:
    uncounted() noexcept;
    ~uncounted();
    uncounted(const uncounted&) = delete;
    uncounted& operator=(const uncounted&) = delete;
};

// With FK_FUZZ_ALLOC_REPORT set in the environment, one line on stderr per call: how
// much of `bound` the peak above `before` took, for an input of `input` bytes. For
// replaying an input to see how close it comes to the bound.
void report(const char* what, std::size_t input, std::size_t before, std::size_t bound);

} // namespace fk::fuzz
