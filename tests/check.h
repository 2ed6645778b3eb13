/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Assertions for cupool's test programs, in the manner of libuv's ASSERT_EQ:
 * each prints both values and where it failed, then exits 1.  Tests exit 0
 * on success and 77 when they cannot run here (skipped).
 */
#ifndef CUPOOL_CHECK_H
#define CUPOOL_CHECK_H

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_SKIP 77

static inline const char *check_result_name(CUresult r)
{
    const char *name = NULL;
    if (cuGetErrorName(r, &name) != CUDA_SUCCESS || !name) return "(unknown CUresult)";
    return name;
}

#define CHECK_FAIL(...)                                                                    \
    do {                                                                                   \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                    \
        fprintf(stderr, __VA_ARGS__);                                                      \
        fprintf(stderr, "\n");                                                             \
        exit(1);                                                                           \
    } while (0)

/* A driver call that must succeed. */
#define CHECK_CU(call)                                                                     \
    do {                                                                                   \
        CUresult check_r_ = (call);                                                        \
        if (check_r_ != CUDA_SUCCESS)                                                      \
            CHECK_FAIL("%s returned %s (%d)", #call, check_result_name(check_r_), (int)check_r_); \
    } while (0)

/* A driver call that must return exactly `expected`. */
#define CHECK_CU_EQ(call, expected)                                                        \
    do {                                                                                   \
        CUresult check_r_ = (call), check_e_ = (expected);                                 \
        if (check_r_ != check_e_)                                                          \
            CHECK_FAIL("%s returned %s (%d), expected %s (%d)", #call, check_result_name(check_r_), \
                       (int)check_r_, check_result_name(check_e_), (int)check_e_);         \
    } while (0)

#define CHECK_EQ(a, b)                                                                     \
    do {                                                                                   \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);                    \
        if (check_a_ != check_b_)                                                          \
            CHECK_FAIL("%s == %s failed: %lld != %lld", #a, #b, check_a_, check_b_);       \
    } while (0)

#define CHECK_NE(a, b)                                                                     \
    do {                                                                                   \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);                    \
        if (check_a_ == check_b_) CHECK_FAIL("%s != %s failed: both %lld", #a, #b, check_a_); \
    } while (0)

#define CHECK_TRUE(x)                                                                      \
    do {                                                                                   \
        if (!(x)) CHECK_FAIL("%s is false", #x);                                           \
    } while (0)

#define CHECK_STR_EQ(a, b)                                                                 \
    do {                                                                                   \
        const char *check_a_ = (a), *check_b_ = (b);                                       \
        if (!check_a_ || !check_b_ || strcmp(check_a_, check_b_) != 0)                    \
            CHECK_FAIL("%s == %s failed: \"%s\" != \"%s\"", #a, #b, check_a_ ? check_a_ : "(null)", \
                       check_b_ ? check_b_ : "(null)");                                    \
    } while (0)

/* True when the test runs against the real driver (CUPOOL_TEST_DRIVER=real). */
static inline int check_real_driver(void)
{
    const char *d = getenv("CUPOOL_TEST_DRIVER");
    return d && strcmp(d, "real") == 0;
}

/* True when libcupool.so is loaded in this process. */
#include <dlfcn.h>
static inline int check_cupool_loaded(void)
{
    return dlsym(RTLD_DEFAULT, "cupool_version") != NULL;
}

#endif
