#pragma once
// Invariant checks for the libFuzzer harnesses. A violated invariant aborts, which
// libFuzzer reports as a crash and saves the input as a reproducer. assert() is not used
// because release builds (RelWithDebInfo defines NDEBUG) would compile it away.

#include <cstdio>
#include <cstdlib>

#define FK_FUZZ_CHECK(cond)                                                                        \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            std::fprintf(stderr, "%s:%d: invariant violated: %s\n", __FILE__, __LINE__, #cond);    \
            std::abort();                                                                          \
        }                                                                                          \
    } while (false)
