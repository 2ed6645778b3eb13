/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Proves cupool stays correct under many threads: 16 threads allocate random
 * sizes from 1 byte to 64 MiB (4 MiB on the simulator, where device memory
 * is host memory), keep a few blocks live, fill each with a pattern of their
 * own (cuMemsetD32, some on a non-blocking stream of the thread's own, a
 * blocking one under a forced `ordered`), check
 * both ends and the middle with cuMemcpyDtoH before freeing it in random
 * order.  Every free mode runs in its own process.  At the end nothing is in
 * use (cupool_get_stats in_use == 0) and every pooled allocation was freed.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 16
#define LIVE 4

static CUcontext ctx;
static size_t cap;
static int iterations;
static const char *mode;

typedef struct {
    CUdeviceptr ptr;
    size_t size;
    uint32_t pattern;
} block_t;

static void *worker(void *arg)
{
    int id = (int)(uintptr_t)arg;
    uint64_t rng = 0x9E3779B97F4A7C15ull * (uint64_t)(id + 1);
    CHECK_CU(cuCtxSetCurrent(ctx));
    CUstream stream = NULL;
    /* A quarter of the threads work on a non-blocking stream of their own;
     * under `ordered`, correct only while every stream waits for the legacy
     * stream, a blocking one (test_modes says why). */
    unsigned flags = strcmp(mode, "ordered") == 0 ? CU_STREAM_DEFAULT : CU_STREAM_NON_BLOCKING;
    if (id % 4 == 0) CHECK_CU(cuStreamCreate(&stream, flags));
    block_t live[LIVE];
    memset(live, 0, sizeof live);
    for (int it = 0; it < iterations; it++) {
        int slot = (int)(tl_rand(&rng) % LIVE);
        block_t *b = &live[slot];
        if (b->ptr) {
            if (tl_spot_check(b->ptr, b->size, b->pattern) != 0)
                CHECK_FAIL("%s: thread %d: block of %zu bytes at 0x%llx lost its pattern 0x%08x", mode, id, b->size,
                           (unsigned long long)b->ptr, b->pattern);
            CHECK_CU(cuMemFree(b->ptr));
            b->ptr = 0;
        }
        /* Log-uniform sizes: as many tiny blocks as huge ones. */
        int bits = (int)(tl_rand(&rng) % 64);
        size_t size = 1 + (size_t)(tl_rand(&rng) % ((size_t)1 << (bits * 26 / 64)));
        if (size > cap) size = cap;
        b->size = size;
        b->pattern = ((uint32_t)id << 24) | ((uint32_t)it & 0xffffff);
        CHECK_CU(cuMemAlloc(&b->ptr, size));
        if (stream && size >= 4) {
            CHECK_CU(cuMemsetD32Async(b->ptr, b->pattern, size / 4, stream));
            if (size % 4) CHECK_CU(cuMemsetD8Async(b->ptr + size / 4 * 4, (unsigned char)b->pattern, size % 4, stream));
            CHECK_CU(cuStreamSynchronize(stream));
        } else {
            tl_fill(b->ptr, size, b->pattern);
        }
        if (tl_spot_check(b->ptr, size, b->pattern) != 0)
            CHECK_FAIL("%s: thread %d: fresh block of %zu bytes does not hold its pattern", mode, id, size);
    }
    for (int i = 0; i < LIVE; i++)
        if (live[i].ptr) {
            CHECK_EQ(tl_spot_check(live[i].ptr, live[i].size, live[i].pattern), 0);
            CHECK_CU(cuMemFree(live[i].ptr));
        }
    if (stream) CHECK_CU(cuStreamDestroy(stream));
    return NULL;
}

static int child(void)
{
    mode = getenv("CUPOOL_FREE");
    cap = check_real_driver() ? (size_t)64 << 20 : (size_t)4 << 20;
    iterations = check_real_driver() ? 400 : 150;
    ctx = tl_init(0);
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++) CHECK_EQ(pthread_create(&threads[i], NULL, worker, (void *)(uintptr_t)i), 0);
    for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
    CHECK_CU(cuCtxSynchronize());
    cupool_stats_t s = tl_stats(0);
    printf("%s: %llu pooled allocations, %llu native, peak in use %llu bytes\n", mode,
           (unsigned long long)s.pooled_allocs, (unsigned long long)s.native_allocs, (unsigned long long)s.peak_in_use);
    CHECK_EQ(s.in_use, 0);
    CHECK_EQ(s.pooled_allocs, s.pooled_frees);
    CHECK_EQ(s.pooled_allocs + s.native_allocs, (unsigned long long)THREADS * iterations);
    CHECK_TRUE(s.pooled_allocs > 0);
    return 0;
}

/* A mode passes only if cupool never warned. */
static int no_warnings(const char *run_mode, const tl_child_t *c)
{
    (void)run_mode;
    return tl_count_prefix(c->err, "cupool: warning:") == 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--child") == 0) return child();
    if (!check_cupool_loaded()) CHECK_FAIL("libcupool.so is not preloaded");
    static const char *const modes[] = {"auto", "ordered", "deferred", "deferred-streams", "sync"};
    static const char *const env[] = {"SIMCUDA_MEM=2G", NULL};
    return tl_run_modes(modes, 5, env, 300, no_warnings) ? 1 : 0;
}
