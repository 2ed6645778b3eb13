/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the C benchmarks share: the clock, driver error names, a check that
 * ends the benchmark at a failed driver call (BENCH_NAME names it), and
 * sizes with K, M or G suffixes.
 */
#ifndef CUPOOL_BENCH_UTIL_H
#define CUPOOL_BENCH_UTIL_H

#include <cuda.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char *errname(CUresult r)
{
    const char *s = NULL;
    if (cuGetErrorName(r, &s) != CUDA_SUCCESS || !s) return "unknown error";
    return s;
}

#define CU(call)                                                                                            \
    do {                                                                                                    \
        CUresult cu_r_ = (call);                                                                            \
        if (cu_r_ != CUDA_SUCCESS) {                                                                        \
            fprintf(stderr, BENCH_NAME ": %s failed: %s (%d)\n", #call, errname(cu_r_), (int)cu_r_);       \
            exit(1);                                                                                        \
        }                                                                                                   \
    } while (0)

static int parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v <= 0) return -1;
    double mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B') end++;
    if (*end == 'B') end++;
    if (*end) return -1;
    *out = (size_t)(v * mul);
    return *out ? 0 : -1;
}

#endif
