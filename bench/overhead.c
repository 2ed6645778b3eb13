/* SPDX-License-Identifier: Apache-2.0 */
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
 * With --threads T, T threads run the rounds at once (each of its own loop,
 * starting each half of a round together), and every thread's differences
 * count: the null driver's pool, under a spin lock, hands the block one
 * thread freed to the next.
 *
 * --spin N is the control for that: the pairs measured are the bare calls
 * with N turns of an empty loop before each, in place of cuMemAlloc and
 * cuMemFree (run it without cupool).  Any work between two calls on a
 * contended lock costs more than itself: with two threads on this project's
 * 2-core machine, 42 ns of such loops a pair read 218-313 ns.
 *
 *   overhead [--threads T] [--spin N] [PAIRS_PER_ROUND [ROUNDS]]
 *   overhead --loop PAIRS    only the cuMemAlloc/cuMemFree loop (for cachegrind)
 */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include "cupool.h"
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
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

static int spin; /* --spin */

static void spin_a_while(void)
{
    for (volatile int k = 0; k < spin; k++) {
    }
}

static int api_pairs(long n)
{
    CUdeviceptr p;
    for (long i = 0; i < n; i++) {
        if (spin) {
            spin_a_while();
            null_alloc(&p, SIZE, NULL, CU_STREAM_LEGACY);
            spin_a_while();
            null_free(p, CU_STREAM_LEGACY);
        } else if (cuMemAlloc(&p, SIZE) != CUDA_SUCCESS || cuMemFree(p) != CUDA_SUCCESS) {
            return -1;
        }
    }
    return 0;
}

#define MAX_THREADS 64
#define MAX_ROUNDS 1000

static CUmemoryPool pool;
static CUcontext ctx;
static long pairs;
static int rounds;
static pthread_barrier_t together;
static double diff[MAX_THREADS][MAX_ROUNDS];

/* One thread's rounds: cupool's pairs, then the bare calls, each half
 * begun by every thread at once. */
static void *rounds_of(void *arg)
{
    double *mine = diff[(intptr_t)arg];
    if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS || api_pairs(1000)) return (void *)1; /* warm up */
    for (int r = 0; r < rounds; r++) {
        pthread_barrier_wait(&together);
        double t0 = now();
        if (api_pairs(pairs)) {
            fprintf(stderr, "overhead: cuMemAlloc/cuMemFree failed\n");
            exit(1);
        }
        double t1 = now();
        pthread_barrier_wait(&together);
        double t2 = now();
        CUdeviceptr p;
        for (long i = 0; i < pairs; i++) {
            null_alloc(&p, SIZE, pool, CU_STREAM_LEGACY);
            null_free(p, CU_STREAM_LEGACY);
        }
        mine[r] = ((t1 - t0) - (now() - t2)) / (double)pairs * 1e9;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    CUdevice dev;
    int threads = 1;
    for (;;) {
        if (argc > 2 && strcmp(argv[1], "--threads") == 0) threads = atoi(argv[2]);
        else if (argc > 2 && strcmp(argv[1], "--spin") == 0) spin = atoi(argv[2]);
        else break;
        argc -= 2;
        argv += 2;
    }
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
        cuDeviceGetDefaultMemPool(&pool, dev)) {
        fprintf(stderr, "overhead: the driver failed to start\n");
        return 1;
    }
    if (argc > 2 && strcmp(argv[1], "--loop") == 0) return api_pairs(atol(argv[2])) ? 1 : 0;
    pairs = argc > 1 ? atol(argv[1]) : 20000;
    rounds = argc > 2 ? atoi(argv[2]) : 41;
    if (pairs <= 0 || rounds <= 0 || rounds > MAX_ROUNDS || threads <= 0 || threads > MAX_THREADS || spin < 0) {
        fprintf(stderr,
                "usage: overhead [--threads T <= %d] [--spin N] [PAIRS_PER_ROUND [ROUNDS <= %d]] | --loop PAIRS\n",
                MAX_THREADS, MAX_ROUNDS);
        return 2;
    }
    pthread_t tids[MAX_THREADS];
    pthread_barrier_init(&together, NULL, (unsigned)threads);
    for (int t = 0; t < threads; t++) pthread_create(&tids[t], NULL, rounds_of, (void *)(intptr_t)t);
    int failed = 0;
    for (int t = 0; t < threads; t++) {
        void *r;
        pthread_join(tids[t], &r);
        failed |= r != NULL;
    }
    if (failed) return 1;
    int (*get_stats)(int, cupool_stats_t *) = (int (*)(int, cupool_stats_t *))dlsym(RTLD_DEFAULT, "cupool_get_stats");
    cupool_stats_t stats;
    if (!spin && get_stats &&
        (get_stats(0, &stats) != 0 || stats.pooled_allocs < (uint64_t)pairs * (uint64_t)rounds * (uint64_t)threads)) {
        fprintf(stderr, "overhead: cupool did not serve the pairs from its pool (is a driver entry point it needs "
                        "missing from the null driver?)\n");
        return 1;
    }
    static double all[MAX_THREADS * MAX_ROUNDS];
    int n = 0;
    for (int t = 0; t < threads; t++)
        for (int r = 0; r < rounds; r++) all[n++] = diff[t][r];
    qsort(all, (size_t)n, sizeof all[0], by_value);
    printf("%.1f ns a pair (quartiles %.1f-%.1f)\n", all[n / 2], all[n / 4], all[3 * n / 4]);
    return 0;
}
