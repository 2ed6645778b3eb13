/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Proves deferred mode bounds the memory waiting to return to the pools: a
 * program that frees while its GPU work lags behind (on the simulator: every
 * recorded event stays NOT_READY for a million queries) must not pile up
 * freed blocks past CUPOOL_DEFERRED_WAIT (1 GiB per context by default, or
 * a share of the bytes in use); past it, a free waits for the oldest
 * batches.  Without the cap this test would see all 1.5 GiB still in use
 * after the frees.  Blocks whose events have completed are free again
 * (cuMemGetInfo says so) even where cupool keeps them ready for the next
 * allocation of their size, and that store stays within its own cap,
 * CUPOOL_DEFERRED_READY.  CUPOOL_STATS counts the frees that waited and
 * says where the peak reserve went.  These cases hold the blocks on the
 * host (CUPOOL_DEFERRED_ORDER=host, the default); host-ahead proves that
 * with the frees ordered on the GPU (`gpu`) nothing waits on the host.
 * Simulator only: a real GPU completes the events too soon to pile
 * anything up.
 */
#define _GNU_SOURCE
#include "testlib.h"

#define BLOCK (64ull << 20)
#define BLOCKS 24 /* 1.5 GiB */
#define MIB (1ull << 20)
#define SHARE_FLOOR (64ull << 20) /* the least a share of the bytes in use comes to */

/* Frees BLOCKS blocks with the GPU lagging: at most wait_cap bytes (plus
 * the block that crossed it) may then still wait (and some do, where
 * some_left says so: a cap that shrinks with the bytes in use may have
 * waited for every free), the most that waited at once stays within
 * most_cap, and after a synchronization the store keeps at most ready_cap. */
static int lagging_gpu(uint64_t wait_cap, uint64_t most_cap, uint64_t ready_cap, int some_left)
{
    tl_init(0);
    CUdeviceptr blocks[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) CHECK_CU(cuMemAlloc(&blocks[i], BLOCK));
    CUmemoryPool pool = tl_pool_of(blocks[0]);
    CHECK_TRUE(pool != NULL);
    CHECK_EQ(tl_pool_used(pool), BLOCKS * BLOCK);
    uint64_t most = 0; /* the most that waited at once: in use, less the blocks not yet freed */
    for (int i = 0; i < BLOCKS; i++) {
        CHECK_CU(cuMemFree(blocks[i]));
        uint64_t used = tl_held(), live = (uint64_t)(BLOCKS - 1 - i) * BLOCK;
        if (used > live && used - live > most) most = used - live;
    }
    uint64_t left = tl_held();
    printf("after freeing %d x 64 MiB: %llu MiB still in use (most waiting at once %llu MiB)\n", BLOCKS,
           (unsigned long long)(left >> 20), (unsigned long long)(most >> 20));
    CHECK_TRUE(left <= wait_cap + BLOCK);
    CHECK_TRUE(most <= most_cap + BLOCK);
    if (some_left) CHECK_TRUE(left > 0); /* the newest frees still wait: nothing was synchronized wholesale */
    /* Everything goes back after a synchronization. */
    CHECK_CU(cuCtxSynchronize());
    CUdeviceptr probe;
    CHECK_CU(cuMemAlloc(&probe, 256));
    CHECK_CU(cuMemFree(probe));
    CHECK_CU(cuCtxSynchronize());
    CHECK_CU(cuMemAlloc(&probe, 256));
    CHECK_TRUE(tl_held() <= 2 * 256 + 4096);
    /* The blocks kept ready for reuse are at most the store's cap. */
    printf("after a synchronization: the pool holds %llu MiB\n", (unsigned long long)(tl_pool_used(pool) >> 20));
    CHECK_TRUE(tl_pool_used(pool) <= ready_cap + 2 * 256 + 4096);
    CHECK_CU(cuMemFree(probe));
    return 0;
}

/* The defaults: 1 GiB may wait, the store keeps up to 1 GiB. */
static int default_caps(void)
{
    return lagging_gpu(1ull << 30, 1ull << 30, 1ull << 30, 1);
}

static int wait_bytes(void)
{
    return lagging_gpu(256 * MIB, 256 * MIB, 1ull << 30, 1);
}

/* 25% of what is in use: 384 MiB while all 1.5 GiB is, less as the frees
 * come, never less than the floor; then the store keeps 10% of the 256
 * bytes in use, that is the floor (CUPOOL_STATS says so). */
static int shares(void)
{
    return lagging_gpu(SHARE_FLOOR + SHARE_FLOOR, BLOCKS * BLOCK / 4, SHARE_FLOOR, 0);
}

/* The host runs ahead of a lagging GPU, every fence still pending: frees
 * ordered on the GPU (CUPOOL_DEFERRED_ORDER=gpu) put each
 * block back in its pool at the free, behind its fence, so the pool serves
 * the program's next 1.5 GiB, in other sizes, from that memory and reserves
 * nothing more, and no free waits on the host.  (The simulator runs the
 * frees as they are enqueued: the GPU's reuse of them once it has passed
 * them is the driver's, proved on the GPU.)  Held on the host until their
 * fences complete (`host`), the same frees leave the pool to reserve anew:
 * that control must fail. */
static int host_ahead(void)
{
    tl_init(0);
    CUdeviceptr blocks[BLOCKS], other[2 * BLOCKS];
    for (int i = 0; i < BLOCKS; i++) CHECK_CU(cuMemAlloc(&blocks[i], BLOCK));
    CUmemoryPool pool = tl_pool_of(blocks[0]);
    CHECK_TRUE(pool != NULL);
    cuuint64_t reserved = 0, reserved_after = 0;
    CHECK_CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
    for (int i = 0; i < BLOCKS; i++) CHECK_CU(cuMemFree(blocks[i]));
    uint64_t held = tl_pool_used(pool);
    printf("after freeing %d x 64 MiB with every fence pending: cupool holds %llu MiB of them\n", BLOCKS,
           (unsigned long long)(held >> 20));
    /* Other sizes: three quarters and a quarter of a block each. */
    for (int i = 0; i < BLOCKS; i++) {
        CHECK_CU(cuMemAlloc(&other[2 * i], BLOCK / 4 * 3));
        CHECK_CU(cuMemAlloc(&other[2 * i + 1], BLOCK / 4));
    }
    CHECK_CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved_after));
    printf("the pool reserved %llu MiB before the frees, %llu MiB after 1.5 GiB more in other sizes\n",
           (unsigned long long)(reserved >> 20), (unsigned long long)(reserved_after >> 20));
    CHECK_EQ(held, 0);
    CHECK_TRUE(reserved_after <= reserved);
    for (int i = 0; i < 2 * BLOCKS; i++) CHECK_CU(cuMemFree(other[i]));
    return 0;
}

static const tl_case_t cases[] = {
    {"host-ahead", host_ahead,
     {"CUPOOL_FREE=deferred", "CUPOOL_DEFERRED_ORDER=gpu", "SIMCUDA_EVENT_DELAY=1000000", "SIMCUDA_MEM=4G",
      "CUPOOL_DEFERRED_WAIT=unlimited", "CUPOOL_STATS=1", NULL},
     1, "deferred fences with their frees ordered on the GPU behind them "},
    {"lagging-gpu", default_caps,
     {"CUPOOL_FREE=deferred", "CUPOOL_DEFERRED_ORDER=host", "SIMCUDA_EVENT_DELAY=1000000", "SIMCUDA_MEM=4G", "CUPOOL_STATS=1", NULL}, 1,
     "frees that waited for the GPU (more freed and waiting than CUPOOL_DEFERRED_WAIT)"},
    {"wait-bytes", wait_bytes,
     {"CUPOOL_FREE=deferred", "CUPOOL_DEFERRED_ORDER=host", "SIMCUDA_EVENT_DELAY=1000000", "SIMCUDA_MEM=4G", "CUPOOL_STATS=1",
      "CUPOOL_DEFERRED_WAIT=256M", NULL},
     1, "frees that waited for the GPU (more freed and waiting than CUPOOL_DEFERRED_WAIT)"},
    {"shares", shares,
     {"CUPOOL_FREE=deferred", "CUPOOL_DEFERRED_ORDER=host", "SIMCUDA_EVENT_DELAY=1000000", "SIMCUDA_MEM=4G", "CUPOOL_STATS=1",
      "CUPOOL_DEFERRED_WAIT=25%", "CUPOOL_DEFERRED_READY=10%", NULL},
     1, "most held at once: ready store 64.0 MiB, waiting for fences "},
};

int main(int argc, char **argv)
{
    /* The control: host_ahead with the blocks held on the host must fail. */
    static const tl_control_t control = {"host-ahead",
                                         {"CUPOOL_FREE=deferred", "CUPOOL_DEFERRED_ORDER=host",
                                          "SIMCUDA_EVENT_DELAY=1000000", "SIMCUDA_MEM=4G",
                                          "CUPOOL_DEFERRED_WAIT=unlimited", NULL},
                                         "CUPOOL_DEFERRED_ORDER=host"};
    return tl_sim_cases_main(cases, sizeof cases / sizeof cases[0], argc, argv, &control);
}
