/* Tiny assertion helpers shared by the C API test programs (driven by ../capi.rs).
 * Every failed check prints file:line, the expression, errno and pvfs_last_error(),
 * and the program exits non-zero at the end (REQUIRE exits at once). */
#ifndef PVFS_TEST_CHECK_H
#define PVFS_TEST_CHECK_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pvfs.h"

static int checks_passed;
static int checks_failed;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        int ok_ = (cond) ? 1 : 0;                                                     \
        int saved_errno_ = errno;                                                     \
        if (ok_) {                                                                    \
            checks_passed++;                                                          \
        } else {                                                                      \
            checks_failed++;                                                          \
            fprintf(stderr, "%s:%d: CHECK(%s) failed (errno %d: %s; %s)\n", __FILE__, \
                    __LINE__, #cond, saved_errno_, strerror(saved_errno_),            \
                    pvfs_last_error());                                               \
        }                                                                             \
        errno = saved_errno_;                                                         \
    } while (0)

/* `expr` must fail with -1 (or NULL for pointers, via CHECK_NULL_ERR) and errno `e`. */
#define CHECK_ERR(expr, e)                                                            \
    do {                                                                              \
        errno = 0;                                                                    \
        long long r_ = (long long)(expr);                                             \
        int got_ = errno;                                                             \
        if (r_ == -1 && got_ == (e)) {                                                \
            checks_passed++;                                                          \
        } else {                                                                      \
            checks_failed++;                                                          \
            fprintf(stderr, "%s:%d: %s: want -1/%s, got %lld/%d (%s)\n", __FILE__,    \
                    __LINE__, #expr, #e, r_, got_, strerror(got_));                   \
        }                                                                             \
    } while (0)

#define CHECK_OK(expr)                                                                \
    do {                                                                              \
        errno = 0;                                                                    \
        long long r_ = (long long)(expr);                                             \
        if (r_ >= 0) {                                                                \
            checks_passed++;                                                          \
        } else {                                                                      \
            int got_ = errno;                                                         \
            checks_failed++;                                                          \
            fprintf(stderr, "%s:%d: %s failed: errno %d (%s; %s)\n", __FILE__,        \
                    __LINE__, #expr, got_, strerror(got_), pvfs_last_error());        \
        }                                                                             \
    } while (0)

#define REQUIRE(cond)                                                                 \
    do {                                                                              \
        if (!(cond)) {                                                                \
            int e_ = errno;                                                           \
            fprintf(stderr, "%s:%d: REQUIRE(%s) failed (errno %d: %s; %s)\n",         \
                    __FILE__, __LINE__, #cond, e_, strerror(e_), pvfs_last_error());  \
            exit(2);                                                                  \
        }                                                                             \
    } while (0)

/* Prints the tally and returns the exit status. */
static inline int report(const char *name) {
    printf("%s: %d checks passed, %d failed\n", name, checks_passed, checks_failed);
    return checks_failed == 0 ? 0 : 1;
}

/* Joins base and name into buf. */
static inline const char *join(char *buf, size_t n, const char *base, const char *name) {
    snprintf(buf, n, "%s/%s", base, name);
    return buf;
}

/* Deterministic pattern byte for file offset `i` and seed `s`. */
static inline unsigned char pat(unsigned long long i, unsigned s) {
    unsigned long long x = (i + 1) * 0x9e3779b97f4a7c15ULL ^ (s * 0xbf58476d1ce4e5b9ULL);
    return (unsigned char)(x >> 56);
}

#endif
