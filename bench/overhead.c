/*
 * overhead: cupool's own time per cuMemAlloc + cuMemFree pair, against the
 * null driver (bench/null_driver.c; run by scripts/overhead.sh).  Rounds of
 * N pairs through cuMemAlloc/cuMemFree (cupool's shims when it is
 * preloaded) alternate with rounds of the bare pool calls cupool's
 * `ordered` mode makes (null_alloc/null_free: the same driver code, not
 * intercepted); the difference of the two, per round, is cupool's share.
 * Prints the median and quartiles of that difference over the rounds.  Under
 * cupool it also makes sure cupool served the pairs from its pool (its
 * statistics, cupool_get_stats): otherwise there is nothing to measure.
 *
 *   overhead [PAIRS_PER_ROUND [ROUNDS]]
 *   overhead --loop PAIRS    only the cuMemAlloc/cuMemFree loop (for cachegrind)
 */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include "cupool.h"
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

CUresult null_alloc(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
CUresult null_free(CUdeviceptr, CUstream);

#define SIZE ((size_t)1 << 20)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int api_pairs(long n)
{
    CUdeviceptr p;
    for (long i = 0; i < n; i++)
        if (cuMemAlloc(&p, SIZE) != CUDA_SUCCESS || cuMemFree(p) != CUDA_SUCCESS) return -1;
    return 0;
}

int main(int argc, char **argv)
{
    CUdevice dev;
    CUcontext ctx;
    CUmemoryPool pool;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
        cuDeviceGetDefaultMemPool(&pool, dev)) {
        fprintf(stderr, "overhead: the driver failed to start\n");
        return 1;
    }
    if (argc > 2 && strcmp(argv[1], "--loop") == 0) return api_pairs(atol(argv[2])) ? 1 : 0;
    long n = argc > 1 ? atol(argv[1]) : 20000;
    int rounds = argc > 2 ? atoi(argv[2]) : 41;
    if (n <= 0 || rounds <= 0 || rounds > 1000) {
        fprintf(stderr, "usage: overhead [PAIRS_PER_ROUND [ROUNDS <= 1000]] | --loop PAIRS\n");
        return 2;
    }
    double diff[1000];
    if (api_pairs(1000)) return 1; /* warm up: the context, the thread's caches */
    for (int r = 0; r < rounds; r++) {
        double t0 = now();
        if (api_pairs(n)) {
            fprintf(stderr, "overhead: cuMemAlloc/cuMemFree failed\n");
            return 1;
        }
        double t1 = now();
        CUdeviceptr p;
        for (long i = 0; i < n; i++) {
            null_alloc(&p, SIZE, pool, CU_STREAM_LEGACY);
            null_free(p, CU_STREAM_LEGACY);
        }
        diff[r] = ((t1 - t0) - (now() - t1)) / (double)n * 1e9;
    }
    int (*get_stats)(int, cupool_stats_t *) = (int (*)(int, cupool_stats_t *))dlsym(RTLD_DEFAULT, "cupool_get_stats");
    cupool_stats_t stats;
    if (get_stats && (get_stats(0, &stats) != 0 || stats.pooled_allocs < (uint64_t)n * (uint64_t)rounds)) {
        fprintf(stderr, "overhead: cupool did not serve the pairs from its pool (is a driver entry point it needs "
                        "missing from the null driver?)\n");
        return 1;
    }
    qsort(diff, (size_t)rounds, sizeof diff[0], by_value);
    printf("%.1f ns a pair (quartiles %.1f-%.1f)\n", diff[rounds / 2], diff[rounds / 4], diff[3 * rounds / 4]);
    return 0;
}
