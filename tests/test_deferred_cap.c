/*
 * Proves deferred mode bounds the memory waiting to return to the pools: a
 * program that frees while its GPU work lags behind (on the simulator: every
 * recorded event stays NOT_READY for a million queries) must not pile up
 * freed blocks past cupool's cap of 1 GiB per context; past it, a free waits
 * for the oldest batches.  Without the cap this test would see all 1.5 GiB
 * still in use after the frees.  Blocks whose events have completed are
 * free again (cuMemGetInfo says so) even where cupool keeps them ready for
 * the next allocation of their size, and that store stays within its own
 * cap of 1 GiB.  CUPOOL_STATS counts the frees that waited.  Simulator
 * only: a real GPU completes the events too soon to pile anything up.
 */
#define _GNU_SOURCE
#include "testlib.h"

#define BLOCK (64ull << 20)
#define BLOCKS 24 /* 1.5 GiB */
#define CAP (1ull << 30)

static int lagging_gpu(void)
{
    tl_init(0);
    CUdeviceptr blocks[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) CHECK_CU(cuMemAlloc(&blocks[i], BLOCK));
    CUmemoryPool pool = tl_pool_of(blocks[0]);
    CHECK_TRUE(pool != NULL);
    CHECK_EQ(tl_pool_used(pool), BLOCKS * BLOCK);
    uint64_t most = 0;
    for (int i = 0; i < BLOCKS; i++) {
        CHECK_CU(cuMemFree(blocks[i]));
        uint64_t used = tl_held();
        if (used > most) most = used;
    }
    uint64_t left = tl_held();
    printf("after freeing %d x 64 MiB: %llu MiB still in use (most %llu MiB)\n", BLOCKS,
           (unsigned long long)(left >> 20), (unsigned long long)(most >> 20));
    /* The cap lets at most 1 GiB (plus the block that crossed it) wait. */
    CHECK_TRUE(left <= CAP + BLOCK);
    CHECK_TRUE(left > 0); /* the newest frees still wait: nothing was synchronized wholesale */
    /* Everything goes back after a synchronization. */
    CHECK_CU(cuCtxSynchronize());
    CUdeviceptr probe;
    CHECK_CU(cuMemAlloc(&probe, 256));
    CHECK_CU(cuMemFree(probe));
    CHECK_CU(cuCtxSynchronize());
    CHECK_CU(cuMemAlloc(&probe, 256));
    CHECK_TRUE(tl_held() <= 2 * 256 + 4096);
    /* The blocks kept ready for reuse are at most the store's cap. */
    CHECK_TRUE(tl_pool_used(pool) <= CAP + 2 * 256 + 4096);
    CHECK_CU(cuMemFree(probe));
    return 0;
}

static const tl_case_t cases[] = {
    {"lagging-gpu", lagging_gpu,
     {"CUPOOL_FREE=deferred", "SIMCUDA_EVENT_DELAY=1000000", "SIMCUDA_MEM=4G", "CUPOOL_STATS=1", NULL}, 1,
     "frees that waited for the GPU (over 1 GiB freed and waiting)"},
};

int main(int argc, char **argv)
{
    const tl_case_t *asked = tl_case_asked(cases, sizeof cases / sizeof cases[0], argc, argv);
    if (asked) return asked->run();
    if (check_real_driver()) return CHECK_SKIP;
    if (!check_cupool_loaded()) CHECK_FAIL("libcupool.so is not preloaded");
    return tl_run_cases(cases, sizeof cases / sizeof cases[0], NULL) ? 1 : 0;
}
