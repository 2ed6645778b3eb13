/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Proves four things cupool does to keep a program's view of the device
 * right: (1) on a device without memory pools (the simulator's
 * SIMCUDA_NO_POOLS=1) every allocation passes through to cuMemAlloc and
 * cupool says so once; (2) cuMemGetInfo counts what the pools hold but do not
 * use as free, so a program sizing itself by free memory sees what it would
 * see natively; (3) cuCtxEnablePeerAccess is mirrored onto the peer device's
 * pools (pools ignore it) and moves both contexts to `sync` (memory now
 * escapes its context), and cuCtxDisablePeerAccess takes the access back;
 * (4) CUPOOL_RELEASE_THRESHOLD reaches the pool: with 0 the pool gives its
 * memory back at the next synchronization, by default it keeps it.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <dlfcn.h>
#include <string.h>

#define SIZE (64ull << 20)

static int no_pools(void)
{
    tl_init(0);
    CUdeviceptr p;
    for (int i = 0; i < 3; i++) {
        CHECK_CU(cuMemAlloc(&p, SIZE));
        CHECK_TRUE(tl_pool_of(p) == NULL);
        CHECK_CU(cuMemFree(p));
    }
    cupool_stats_t s = tl_stats(0);
    CHECK_EQ(s.pooled_allocs, 0);
    CHECK_EQ(s.native_allocs, 3);
    return 0;
}

/* What the pool holds but does not use. */
static uint64_t pool_idle(CUmemoryPool pool)
{
    cuuint64_t reserved = 0, used = 0;
    CHECK_CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
    CHECK_CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    return reserved > used ? reserved - used : 0;
}

/* What the program freed and cupool still holds in the pool (deferred:
 * blocks waiting for their fence, and blocks kept ready for the next
 * allocation of their size, which cuMemGetInfo counts as free). */
static uint64_t freed_held(CUmemoryPool pool)
{
    cuuint64_t used = 0;
    CHECK_CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    uint64_t in_use = tl_stats(0).in_use;
    return used > in_use ? used - in_use : 0;
}

/* cupool's cuMemGetInfo against the device's own answer around it, plus
 * what the pool holds idle and what cupool holds of the program's frees. */
static void free_as_expected(const char *when, CUmemoryPool pool)
{
    size_t seen, total, low, high;
    uint64_t idle = pool_idle(pool), held = freed_held(pool);
    tl_mem_get_info_bracketed(&seen, &total, &low, &high);
    const size_t slack = 1u << 20; /* the pool's own bookkeeping */
    printf("%s: cuMemGetInfo says %zu MiB free, the device %zu-%zu MiB, the pool holds %llu MiB idle and %llu MiB "
           "the program freed\n",
           when, seen >> 20, low >> 20, high >> 20, (unsigned long long)(idle >> 20), (unsigned long long)(held >> 20));
    CHECK_TRUE(seen + slack >= low + idle);
    CHECK_TRUE(seen <= high + idle + held + slack || seen == total);
    CHECK_TRUE(seen <= total);
}

static int mem_get_info(void)
{
    tl_init(0);
    /* A first block finds the pool; trimmed, it holds nothing. */
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, SIZE));
    CUmemoryPool pool = tl_pool_of(p);
    CHECK_TRUE(pool != NULL);
    CHECK_CU(cuMemFree(p));
    CHECK_CU(cuCtxSynchronize());
    CHECK_CU(cuMemPoolTrimTo(pool, 0));
    free_as_expected("before", pool);
    /* In use: counted as used.  Freed into the pool: counted as free again,
     * although the pool keeps the memory reserved. */
    CHECK_CU(cuMemAlloc(&p, SIZE));
    CHECK_TRUE(tl_pool_of(p) == pool);
    free_as_expected("while allocated", pool);
    CHECK_CU(cuMemFree(p));
    CHECK_CU(cuCtxSynchronize());
    CHECK_TRUE(pool_idle(pool) + freed_held(pool) >= SIZE);
    free_as_expected("after the free", pool);
    return 0;
}

static int threshold(const char *expect)
{
    tl_init(0);
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, SIZE));
    CUmemoryPool pool = tl_pool_of(p);
    CHECK_TRUE(pool != NULL);
    CHECK_CU(cuMemFree(p));
    CHECK_CU(cuCtxSynchronize());
    cuuint64_t reserved = 0;
    CHECK_CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
    printf("reserved after the free and a synchronization: %llu MiB\n", (unsigned long long)(reserved >> 20));
    if (strcmp(expect, "released") == 0) CHECK_EQ(reserved, 0);
    else CHECK_TRUE(reserved >= SIZE);
    return 0;
}

static CUmemAccess_flags access_of(CUmemoryPool pool, int device)
{
    CUmemAccess_flags flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    CUmemLocation where = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device};
    CHECK_CU(cuMemPoolGetAccess(&flags, pool, &where));
    return flags;
}

static int peer_access(void)
{
    CHECK_CU(cuInit(0));
    if (tl_device_count() < 2) return CHECK_SKIP;
    CUcontext c1 = tl_init(1), c0 = tl_init(0);
    int can = 0;
    CHECK_CU(cuDeviceCanAccessPeer(&can, 0, 1));
    if (!can) return CHECK_SKIP;
    /* A block on device 1 tells which pool device 1 allocates from. */
    CHECK_CU(cuCtxSetCurrent(c1));
    CUdeviceptr on1;
    CHECK_CU(cuMemAlloc(&on1, 1 << 20));
    CUmemoryPool pool1 = tl_pool_of(on1);
    CHECK_TRUE(pool1 != NULL);
    CHECK_EQ(access_of(pool1, 0), CU_MEM_ACCESS_FLAGS_PROT_NONE);

    CHECK_CU(cuCtxSetCurrent(c0));
    CHECK_CU(cuCtxEnablePeerAccess(c1, 0));
    CHECK_EQ(access_of(pool1, 0), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    /* Device 0 can now read device 1's pooled memory. */
    CHECK_CU(cuMemsetD32(on1, 0x5eed, (1 << 20) / 4));
    CUdeviceptr on0;
    CHECK_CU(cuMemAlloc(&on0, 1 << 20));
    CHECK_CU(cuMemcpyDtoD(on0, on1, 1 << 20));
    CHECK_EQ(tl_spot_check(on0, 1 << 20, 0x5eed), 0);
    CHECK_CU(cuMemFree(on0));

    CHECK_CU(cuCtxDisablePeerAccess(c1));
    CHECK_EQ(access_of(pool1, 0), CU_MEM_ACCESS_FLAGS_PROT_NONE);
    CHECK_CU(cuCtxSetCurrent(c1));
    CHECK_CU(cuMemFree(on1));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--no-pools") == 0) return no_pools();
    if (argc > 1 && strcmp(argv[1], "--info") == 0) return mem_get_info();
    if (argc > 1 && strcmp(argv[1], "--peer") == 0) return peer_access();
    if (argc > 2 && strcmp(argv[1], "--threshold") == 0) return threshold(argv[2]);
    if (!check_cupool_loaded()) CHECK_FAIL("libcupool.so is not preloaded");
    int failed = 0;

    if (!check_real_driver()) {
        const char *args[] = {"--no-pools", NULL}, *env[] = {"SIMCUDA_NO_POOLS=1", NULL};
        tl_child_t c;
        tl_run_self(args, env, 0, 60, &c);
        int said = tl_count_substr(c.err, "does not support memory pools");
        int ok = c.status == 0 && said == 1;
        if (!ok) tl_child_dump("no pools", &c), failed++;
        printf("device without pools: %s (said so %d time(s))\n", ok ? "passed" : "FAILED", said);
        tl_child_free(&c);
    }
    {
        const char *args[] = {"--info", NULL};
        tl_child_t c;
        tl_run_self(args, NULL, 0, 60, &c);
        printf("%s", c.out);
        if (c.status != 0) tl_child_dump("cuMemGetInfo", &c), failed++;
        printf("cuMemGetInfo: %s\n", c.status == 0 ? "passed" : "FAILED");
        tl_child_free(&c);
    }
    static const struct {
        const char *setting, *expect;
    } thresholds[] = {{"CUPOOL_RELEASE_THRESHOLD=0", "released"}, {"CUPOOL_RELEASE_THRESHOLD", "kept"}};
    for (int i = 0; i < 2; i++) {
        const char *args[] = {"--threshold", thresholds[i].expect, NULL}, *env[] = {thresholds[i].setting, NULL};
        tl_child_t c;
        tl_run_self(args, env, 0, 60, &c);
        printf("%s", c.out);
        if (c.status != 0) tl_child_dump(thresholds[i].setting, &c), failed++;
        printf("%s: memory %s: %s\n", thresholds[i].setting, thresholds[i].expect, c.status == 0 ? "passed" : "FAILED");
        tl_child_free(&c);
    }
    {
        /* auto moves the contexts: whatever mode the caller forced. */
        const char *args[] = {"--peer", NULL}, *env[] = {"CUPOOL_VERBOSE=1", "CUPOOL_FREE=auto", NULL};
        tl_child_t c;
        tl_run_self(args, env, 0, 60, &c);
        int to_sync = tl_count_substr(c.err, "-> sync");
        int ok = c.status == 0 && to_sync >= 2;
        if (c.status == CHECK_SKIP) ok = 1, printf("peer access: skipped (one device, or no peer access)\n");
        else printf("peer access: %s (%d context(s) moved to sync)\n", ok ? "passed" : "FAILED", to_sync);
        if (!ok) tl_child_dump("peer access", &c), failed++;
        tl_child_free(&c);
    }
    return failed ? 1 : 0;
}
