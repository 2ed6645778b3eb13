/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Proves a program built with per-thread default streams
 * (-DCUDA_API_PER_THREAD_DEFAULT_STREAM, so cuda.h maps cuMemsetD32 to
 * cuMemsetD32_v2_ptds, cuMemFreeAsync to cuMemFreeAsync_ptsz, ...) works on
 * cupool memory: four threads allocate, fill and copy on their per-thread
 * default streams, free half of the blocks with cuMemFreeAsync (through
 * cupool's _ptsz shim, which the parent proves with CUPOOL_STATS=1) and half
 * with cuMemFree; the data reads back right and nothing stays in use.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#ifndef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error "test_ptds must be built with -DCUDA_API_PER_THREAD_DEFAULT_STREAM"
#endif

#define THREADS 4
#define ROUNDS 20

static CUcontext ctx;

static void *worker(void *arg)
{
    int id = (int)(uintptr_t)arg;
    CHECK_CU(cuCtxSetCurrent(ctx));
    uint32_t host[1024], back[1024];
    for (int round = 0; round < ROUNDS; round++) {
        size_t bytes = (size_t)(8192 << (round % 8)) + 12;
        uint32_t pattern = 0x01000000u * (uint32_t)(id + 1) + (uint32_t)round;
        CUdeviceptr p;
        CHECK_CU(cuMemAlloc(&p, bytes));
        /* Stream 0 is this thread's default stream in a ptds build. */
        CHECK_CU(cuMemsetD32Async(p, pattern, bytes / 4, 0));
        for (int i = 0; i < 1024; i++) host[i] = pattern ^ (uint32_t)i;
        CHECK_CU(cuMemcpyHtoDAsync(p + 64, host, sizeof host, 0));
        CHECK_CU(cuStreamSynchronize(0));
        CHECK_CU(cuMemcpyDtoH(back, p + 64, sizeof back));
        for (int i = 0; i < 1024; i++)
            if (back[i] != host[i]) CHECK_FAIL("thread %d round %d: word %d is 0x%08x, expected 0x%08x", id, round, i, back[i], host[i]);
        uint32_t first = 0, last = 0;
        CHECK_CU(cuMemcpyDtoH(&first, p, 4));
        CHECK_CU(cuMemcpyDtoH(&last, p + bytes - 4, 4));
        CHECK_EQ(first, pattern);
        CHECK_EQ(last, pattern);
        if (round % 2) {
            CHECK_CU(cuMemFreeAsync(p, 0));
            CHECK_CU(cuStreamSynchronize(0));
        } else {
            CHECK_CU(cuMemFree(p));
        }
    }
    return NULL;
}

static int child(void)
{
    ctx = tl_init(0);
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&threads[i], NULL, worker, (void *)(uintptr_t)i);
    for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
    CHECK_CU(cuCtxSynchronize());
    cupool_stats_t s = tl_stats(0);
    CHECK_EQ(s.pooled_allocs, THREADS * ROUNDS);
    CHECK_EQ(s.pooled_frees, THREADS * ROUNDS);
    CHECK_EQ(s.in_use, 0);
    printf("ok\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--child") == 0) return child();
    if (!check_cupool_loaded()) CHECK_FAIL("libcupool.so is not preloaded");
    static const char *const modes[] = {"CUPOOL_FREE=auto", "CUPOOL_FREE=deferred", "CUPOOL_FREE=sync",
                                        "CUPOOL_FREE=ordered"};
    int failed = 0;
    for (int m = 0; m < 4; m++) {
        const char *env[] = {modes[m], "CUPOOL_STATS=1", NULL};
        const char *args[] = {"--child", NULL};
        tl_child_t c;
        tl_run_self(args, env, 0, 60, &c);
        /* The per-thread entry points were the ones called, through cupool. */
        unsigned long long ptsz = 0, plain = 0;
        for (const char *line = c.err; line && *line;) {
            char name[64];
            unsigned long long n;
            if (sscanf(line, "cupool: %63s %llu", name, &n) == 2) {
                if (strcmp(name, "cuMemFreeAsync_ptsz") == 0) ptsz = n;
                if (strcmp(name, "cuMemFreeAsync") == 0) plain = n;
            }
            const char *nl = strchr(line, '\n');
            line = nl ? nl + 1 : NULL;
        }
        int ok = c.status == 0 && ptsz == THREADS * ROUNDS / 2 && plain == 0;
        if (!ok) {
            fprintf(stderr, "%s: cuMemFreeAsync_ptsz called %llu times, cuMemFreeAsync %llu, expected %d and 0\n",
                    modes[m], ptsz, plain, THREADS * ROUNDS / 2);
            tl_child_dump(modes[m], &c);
            failed++;
        }
        printf("%-22s %s\n", modes[m], ok ? "passed" : "FAILED");
        tl_child_free(&c);
    }
    return failed ? 1 : 0;
}
