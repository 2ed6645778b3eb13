/* SPDX-License-Identifier: Apache-2.0 */
/* Smoke test: a linked program's cuMemAlloc/cuMemFree go through cupool's
 * pools, and cupool_get_stats counts them wherever a thread is: still
 * running (its fast paths count in its own line), moved to another device,
 * gone, or freeing from a thread-exit destructor that runs after cupool's. */
#include "testlib.h"

#include <pthread.h>

static void *alloc_free_in_thread(void *ctx)
{
    CUdeviceptr p;
    CHECK_CU(cuCtxSetCurrent(ctx));
    CHECK_CU(cuMemAlloc(&p, 4096));
    CHECK_CU(cuMemFree(p));
    return NULL;
}

#define LIVE_BLOCKS 10
#define LIVE_FREED 4
static pthread_barrier_t paused, resumed;

static int devices;

/* Allocates LIVE_BLOCKS, frees LIVE_FREED of them and waits while main
 * reads the statistics; then frees the rest on device 0 and, with a second
 * device, allocates and frees one block there (its counts of device 0 move
 * on). */
static void *live_thread(void *ctx)
{
    CUdeviceptr p[LIVE_BLOCKS];
    CHECK_CU(cuCtxSetCurrent(ctx));
    for (int i = 0; i < LIVE_BLOCKS; i++) CHECK_CU(cuMemAlloc(&p[i], 4096));
    for (int i = 0; i < LIVE_FREED; i++) CHECK_CU(cuMemFree(p[i]));
    pthread_barrier_wait(&paused);
    pthread_barrier_wait(&resumed);
    for (int i = LIVE_FREED; i < LIVE_BLOCKS; i++) CHECK_CU(cuMemFree(p[i]));
    if (devices < 2) return NULL;
    CUdevice dev1;
    CUcontext ctx1;
    CUdeviceptr q;
    CHECK_CU(cuDeviceGet(&dev1, 1));
    CHECK_CU(cuDevicePrimaryCtxRetain(&ctx1, dev1));
    CHECK_CU(cuCtxSetCurrent(ctx1));
    CHECK_CU(cuMemAlloc(&q, 8192));
    CHECK_CU(cuMemFree(q));
    pthread_barrier_wait(&paused);
    pthread_barrier_wait(&resumed);
    CHECK_CU(cuCtxSetCurrent(ctx)); /* the primary context of device 1 stays retained: main releases it */
    return NULL;
}

/* A block the exiting thread frees from its own thread-exit destructor,
 * created after cupool's (cupool's runs first in glibc): a late free. */
static pthread_key_t late_key;
static void late_free(void *arg)
{
    CHECK_CU(cuMemFree((CUdeviceptr)(uintptr_t)arg));
}

static void *late_thread(void *ctx)
{
    CUdeviceptr p, warm;
    CHECK_CU(cuCtxSetCurrent(ctx));
    CHECK_CU(cuMemAlloc(&warm, 4096)); /* from here on this thread's context cache holds */
    CHECK_CU(cuMemFree(warm));
    CHECK_CU(cuMemAlloc(&p, 4096));
    CHECK_EQ(pthread_setspecific(late_key, (void *)(uintptr_t)p), 0);
    return NULL;
}

int main(void)
{
    CUcontext ctx = tl_init(0);
    cupool_stats_t s;
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, 1 << 20));
    s = tl_stats(0);
    CHECK_EQ(s.pooled_allocs, 1);
    CHECK_EQ(s.in_use, 1 << 20);
    CHECK_CU(cuMemsetD8(p, 7, 1 << 20));
    unsigned char b[16];
    CHECK_CU(cuMemcpyDtoH(b, p + 1000, sizeof b));
    CHECK_EQ(b[3], 7);
    CHECK_CU(cuMemFree(p));
    s = tl_stats(0);
    CHECK_EQ(s.pooled_allocs, 1);
    CHECK_EQ(s.pooled_frees, 1);
    CHECK_EQ(s.in_use, 0);
    /* The same counts from another thread's allocations and frees (each
     * thread counts into its own set). */
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, alloc_free_in_thread, ctx), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    s = tl_stats(0);
    CHECK_EQ(s.pooled_allocs, 2);
    CHECK_EQ(s.pooled_frees, 2);
    CHECK_EQ(s.in_use, 0);

    /* A thread still running, then on another device (the simulator has
     * two; a one-GPU machine checks the first part only). */
    CHECK_CU(cuDeviceGetCount(&devices));
    CHECK_EQ(pthread_barrier_init(&paused, NULL, 2), 0);
    CHECK_EQ(pthread_barrier_init(&resumed, NULL, 2), 0);
    CHECK_EQ(pthread_create(&t, NULL, live_thread, ctx), 0);
    pthread_barrier_wait(&paused);
    s = tl_stats(0);
    CHECK_EQ(s.pooled_allocs, 2 + LIVE_BLOCKS);
    CHECK_EQ(s.pooled_frees, 2 + LIVE_FREED);
    CHECK_EQ(s.in_use, (LIVE_BLOCKS - LIVE_FREED) * 4096);
    pthread_barrier_wait(&resumed);
    if (devices >= 2) {
        pthread_barrier_wait(&paused);
        s = tl_stats(0);
        CHECK_EQ(s.pooled_allocs, 2 + LIVE_BLOCKS);
        CHECK_EQ(s.pooled_frees, 2 + LIVE_BLOCKS);
        CHECK_EQ(s.in_use, 0);
        s = tl_stats(1);
        CHECK_EQ(s.pooled_allocs, 1);
        CHECK_EQ(s.pooled_frees, 1);
        CHECK_EQ(s.in_use, 0);
        pthread_barrier_wait(&resumed);
    }
    CHECK_EQ(pthread_join(t, NULL), 0);
    s = tl_stats(0);
    CHECK_EQ(s.pooled_allocs, 2 + LIVE_BLOCKS);
    CHECK_EQ(s.pooled_frees, 2 + LIVE_BLOCKS);
    CHECK_EQ(s.in_use, 0);
    if (devices >= 2) {
        CUdevice dev1;
        CHECK_CU(cuDeviceGet(&dev1, 1));
        CHECK_CU(cuDevicePrimaryCtxRelease(dev1));
    }

    /* A free from a thread-exit destructor that runs after cupool's. */
    CHECK_EQ(pthread_key_create(&late_key, late_free), 0);
    CHECK_EQ(pthread_create(&t, NULL, late_thread, ctx), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    s = tl_stats(0);
    CHECK_EQ(s.pooled_allocs, 2 + LIVE_BLOCKS + 2);
    CHECK_EQ(s.pooled_frees, 2 + LIVE_BLOCKS + 2);
    CHECK_EQ(s.in_use, 0);
    return 0;
}
