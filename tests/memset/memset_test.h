/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers shared by the graph-memset tests: re-executing the test with the
 * environment it needs (automake's test environment is global), cupool's
 * statistics, graph launch, and host-side reference fills with
 * guard bytes around them.
 */
#ifndef CUPOOL_MEMSET_TEST_H
#define CUPOOL_MEMSET_TEST_H

#include "../testlib.h"

#include <stdint.h>
#include <unistd.h>

/* Sets name=value and re-executes this program once, unless already done. */
static inline void memset_test_reexec(char **argv, const char *name, const char *value)
{
    const char *now = getenv(name);
    if (now && strcmp(now, value) == 0) return;
    setenv(name, value, 1);
    execv(tl_self_path(), argv);
    CHECK_FAIL("cannot re-execute %s with %s=%s", argv[0], name, value);
}

/* cupool's rewritten-memset count on device 0 (-1 without cupool). */
static inline long long memset_test_rewritten(void)
{
    int (*get)(int, cupool_stats_t *) = (int (*)(int, cupool_stats_t *))dlsym(RTLD_DEFAULT, "cupool_get_stats");
    cupool_stats_t s;
    if (!get || get(0, &s) != 0) return -1;
    return (long long)s.rewritten_memsets;
}

static inline void memset_test_launch(CUgraph g, CUstream stream)
{
    CUgraphExec e;
    CHECK_CU(cuGraphInstantiate(&e, g, 0));
    CHECK_CU(cuGraphLaunch(e, stream));
    CHECK_CU(cuStreamSynchronize(stream));
    CHECK_CU(cuGraphExecDestroy(e));
}

/* Deterministic noise for guard bytes. */
static inline void memset_test_noise(unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
    for (; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (unsigned char)x;
    }
}

/* Applies a memset to host memory the way the driver defines it. */
static inline void memset_test_reference(unsigned char *base, const CUDA_MEMSET_NODE_PARAMS *p)
{
    unsigned char pattern[4];
    for (unsigned i = 0; i < 4; i++) pattern[i] = (unsigned char)(p->value >> (8 * (i % p->elementSize)));
    size_t row = p->width * p->elementSize;
    for (size_t r = 0; r < p->height; r++) {
        unsigned char *q = base + r * p->pitch;
        if (p->elementSize == 1) {
            memset(q, pattern[0], row);
            continue;
        }
        for (size_t i = 0; i < row; i++) q[i] = pattern[i % p->elementSize];
    }
}

/* Index of the first differing byte, or -1. */
static inline long long memset_test_diff(const unsigned char *a, const unsigned char *b, size_t n)
{
    if (memcmp(a, b, n) == 0) return -1;
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) return (long long)i;
    return -1;
}

#endif
