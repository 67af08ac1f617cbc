#pragma once
// CHECK: invariants of ferrox's own code. A failed CHECK is a bug, never bad input:
// inputs are validated and rejected with a Status before they reach code that CHECKs.

#include <cstdio>
#include <cstdlib>

namespace ferrox::detail {
[[noreturn]] void check_failed(const char* file, int line, const char* expr, const char* msg);
}

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (__builtin_expect(!(cond), 0))                                        \
            ::ferrox::detail::check_failed(__FILE__, __LINE__, #cond, nullptr);  \
    } while (0)

#define CHECK_MSG(cond, msg)                                                     \
    do {                                                                         \
        if (__builtin_expect(!(cond), 0))                                        \
            ::ferrox::detail::check_failed(__FILE__, __LINE__, #cond, (msg));    \
    } while (0)

#ifdef NDEBUG
#define DCHECK(cond) \
    do {             \
    } while (0)
#else
#define DCHECK(cond) CHECK(cond)
#endif
