/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Proves context teardown with live pooled blocks leaves cupool consistent:
 * cuCtxDestroy, cuDevicePrimaryCtxReset and a cuDevicePrimaryCtxRelease that
 * drops the last reference all return what the driver returns, hand the
 * context's blocks back to the pool (as natively its memory dies with it:
 * the pool's used bytes and cupool's in_use go back to zero), and a new
 * context on the device allocates, fills and verifies again.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <stdio.h>
#include <string.h>

/* Allocates n live blocks of 1 MiB in the current context; returns their pool. */
static CUmemoryPool make_live(CUdeviceptr *p, int n, uint32_t pattern)
{
    for (int i = 0; i < n; i++) {
        CHECK_CU(cuMemAlloc(&p[i], 1 << 20));
        tl_fill(p[i], 1 << 20, pattern + (uint32_t)i);
    }
    CUmemoryPool pool = tl_pool_of(p[0]);
    CHECK_TRUE(pool != NULL);
    CHECK_TRUE(tl_pool_used(pool) >= (uint64_t)n << 20);
    return pool;
}

/* A context that works: allocations pooled, data right, all freed. */
static void works(int device, uint32_t pattern)
{
    cupool_stats_t before = tl_stats(device);
    CUdeviceptr p[3];
    for (int i = 0; i < 3; i++) {
        CHECK_CU(cuMemAlloc(&p[i], (size_t)(i + 1) << 18));
        tl_fill(p[i], (size_t)(i + 1) << 18, pattern + (uint32_t)i);
    }
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(tl_spot_check(p[i], (size_t)(i + 1) << 18, pattern + (uint32_t)i), 0);
        CHECK_CU(cuMemFree(p[i]));
    }
    cupool_stats_t after = tl_stats(device);
    CHECK_EQ(after.pooled_allocs, before.pooled_allocs + 3);
    CHECK_EQ(after.in_use, 0);
}

int main(void)
{
    if (!check_cupool_loaded()) CHECK_FAIL("libcupool.so is not preloaded");
    CHECK_CU(cuInit(0));
    int ndev = tl_device_count();
    CUdevice dev0, devr;
    CHECK_CU(cuDeviceGet(&dev0, 0));
    CHECK_CU(cuDeviceGet(&devr, ndev > 1 ? 1 : 0));
    int r = ndev > 1 ? 1 : 0;

    /* cuCtxDestroy with live blocks. */
    CUcontext c1;
    CHECK_CU(cuCtxCreate(&c1, NULL, 0, dev0));
    CUdeviceptr live[3];
    CUmemoryPool pool = make_live(live, 3, 0x11110000);
    CHECK_EQ(tl_stats(0).in_use, 3 << 20);
    CHECK_CU(cuCtxDestroy(c1));
    CHECK_EQ(tl_stats(0).in_use, 0);
    CHECK_EQ(tl_pool_used(pool), 0);
    CUcontext c2;
    CHECK_CU(cuCtxCreate(&c2, NULL, 0, dev0));
    works(0, 0x22220000);
    CHECK_CU(cuCtxDestroy(c2));
    printf("cuCtxDestroy with live blocks: ok\n");

    /* cuDevicePrimaryCtxReset with live blocks. */
    CUcontext p0;
    CHECK_CU(cuDevicePrimaryCtxRetain(&p0, dev0));
    CHECK_CU(cuCtxSetCurrent(p0));
    pool = make_live(live, 2, 0x33330000);
    CHECK_CU(cuDevicePrimaryCtxReset(dev0));
    CHECK_EQ(tl_stats(0).in_use, 0);
    CHECK_EQ(tl_pool_used(pool), 0);
    CHECK_CU(cuDevicePrimaryCtxRetain(&p0, dev0));
    CHECK_CU(cuCtxSetCurrent(p0));
    works(0, 0x44440000);
    printf("cuDevicePrimaryCtxReset with live blocks: ok\n");

    /* cuDevicePrimaryCtxRelease down to zero with live blocks, then retain again. */
    CUcontext pr;
    CHECK_CU(cuDevicePrimaryCtxRetain(&pr, devr));
    if (r == 0) CHECK_CU(cuDevicePrimaryCtxRelease(devr)); /* device 0 was retained twice above */
    CHECK_CU(cuCtxSetCurrent(pr));
    pool = make_live(live, 2, 0x55550000);
    unsigned flags;
    int active = 0;
    CHECK_CU(cuDevicePrimaryCtxGetState(devr, &flags, &active));
    CHECK_EQ(active, 1);
    /* Release until the driver says the context is gone: how many
     * references are left here depends on the driver (a reset keeps or drops
     * the count); only the last release matters to cupool. */
    for (int i = 0; i < 16 && active; i++) {
        CHECK_CU(cuDevicePrimaryCtxRelease(devr));
        CHECK_CU(cuDevicePrimaryCtxGetState(devr, &flags, &active));
    }
    CHECK_EQ(active, 0);
    CHECK_EQ(tl_stats(r).in_use, 0);
    CHECK_CU(cuDevicePrimaryCtxRetain(&pr, devr));
    CHECK_CU(cuCtxSetCurrent(pr));
    CHECK_EQ(tl_pool_used(pool), 0);
    works(r, 0x66660000);
    CHECK_CU(cuDevicePrimaryCtxRelease(devr));
    printf("cuDevicePrimaryCtxRelease to zero with live blocks (device %d): ok\n", r);

    /* A freed block of a destroyed context is not freed twice: the driver answers. */
    CUcontext c3;
    CHECK_CU(cuCtxCreate(&c3, NULL, 0, dev0));
    CUdeviceptr gone;
    CHECK_CU(cuMemAlloc(&gone, 4096));
    CHECK_CU(cuCtxDestroy(c3));
    CHECK_CU(cuDevicePrimaryCtxRetain(&p0, dev0));
    CHECK_CU(cuCtxSetCurrent(p0));
    CUresult fr = cuMemFree(gone);
    printf("cuMemFree of a block of a destroyed context: %s\n", check_result_name(fr));
    CHECK_TRUE(fr != CUDA_SUCCESS);
    works(0, 0x77770000);
    return 0;
}
