/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Proves memory the pools keep is never memory the program loses.  After
 * churning many small pooled blocks (freed, but kept reserved by the pools),
 * the largest single allocation that succeeds under cupool is at least 99%
 * of the largest that succeeds natively (binary search, natively in a child
 * without cupool).  Allocating until out of memory ends in exactly
 * CUDA_ERROR_OUT_OF_MEMORY, and after freeing everything the same amount can
 * be allocated again; and the program's own cuMemAllocAsync and
 * cuMemAllocFromPoolAsync, which cupool passes on, still get memory the
 * pools keep.  On the simulator the device has 64 MiB
 * (SIMCUDA_MEM=64M); on a GPU the same runs at device scale in 64 MiB steps.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t step;

static int fits(size_t size)
{
    CUdeviceptr p;
    CUresult r = cuMemAlloc(&p, size);
    if (r == CUDA_SUCCESS) {
        CHECK_CU(cuMemFree(p));
        return 1;
    }
    if (r != CUDA_ERROR_OUT_OF_MEMORY) CHECK_FAIL("cuMemAlloc(%zu) returned %s", size, check_result_name(r));
    return 0;
}

/* The largest multiple of step that cuMemAlloc gives. */
static size_t largest(void)
{
    size_t total, free_bytes;
    CHECK_CU(cuMemGetInfo(&free_bytes, &total));
    size_t lo = 0, hi = total / step + 1; /* fits(lo*step) (or lo = 0), !fits(hi*step) */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (fits(mid * step)) lo = mid;
        else hi = mid;
    }
    return lo * step;
}

static void churn(void)
{
    /* Many small blocks of assorted sizes, all freed: the pools keep them. */
    enum { N = 400 };
    static CUdeviceptr p[N];
    uint64_t rng = 42;
    for (int i = 0; i < N; i++) {
        size_t size = 256 + (size_t)(tl_rand(&rng) % (64 * 1024));
        CHECK_CU(cuMemAlloc(&p[i], size));
        if (i % 3 == 2) CHECK_CU(cuMemFree(p[i - 1]));
    }
    for (int i = 0; i < N; i++)
        if (i % 3 != 1) CHECK_CU(cuMemFree(p[i]));
}

/* Allocates blocks of `block` bytes until the driver says no; returns how
 * many, frees them all. */
static size_t fill_device(size_t block)
{
    size_t cap = 1 << 16, n = 0;
    CUdeviceptr *ptrs = malloc(cap * sizeof *ptrs);
    CHECK_TRUE(ptrs != NULL);
    CUresult r;
    for (;;) {
        if (n == cap) CHECK_FAIL("allocated %zu blocks without running out", n);
        r = cuMemAlloc(&ptrs[n], block);
        if (r != CUDA_SUCCESS) break;
        n++;
    }
    if (r != CUDA_ERROR_OUT_OF_MEMORY)
        CHECK_FAIL("the allocation that failed returned %s, expected CUDA_ERROR_OUT_OF_MEMORY", check_result_name(r));
    for (size_t i = 0; i < n; i++) CHECK_CU(cuMemFree(ptrs[i]));
    free(ptrs);
    return n;
}

static int child(int with_churn)
{
    tl_init(0);
    if (with_churn) churn();
    size_t max = largest();
    printf("largest %zu\n", max);
    return 0;
}

int main(int argc, char **argv)
{
    int real = check_real_driver();
    step = real ? (size_t)64 << 20 : (size_t)64 << 10;
    if (!real) tl_reexec_with(argv, "SIMCUDA_MEM", "64M");
    if (argc > 1 && strcmp(argv[1], "--largest") == 0) return child(0);
    if (!check_cupool_loaded()) CHECK_FAIL("libcupool.so is not preloaded");

    /* Natively. */
    const char *args[] = {"--largest", NULL};
    tl_child_t native;
    tl_run_self(args, NULL, 1, 300, &native);
    size_t native_max = 0;
    if (native.status != 0 || sscanf(strstr(native.out, "largest") ? strstr(native.out, "largest") : "", "largest %zu",
                                     &native_max) != 1) {
        tl_child_dump("native", &native);
        CHECK_FAIL("the native search failed");
    }
    tl_child_free(&native);

    /* With cupool, after churn. */
    tl_init(0);
    churn();
    cupool_stats_t s = tl_stats(0);
    CHECK_TRUE(s.pooled_allocs >= 400);
    size_t pooled_max = largest();
    printf("largest single allocation: native %zu, cupool %zu (%.2f%%)\n", native_max, pooled_max,
           100.0 * (double)pooled_max / (double)native_max);
    CHECK_TRUE(native_max > 0);
    if ((double)pooled_max < 0.99 * (double)native_max)
        CHECK_FAIL("cupool's largest allocation %zu is below 99%% of the native %zu", pooled_max, native_max);

    /* Until out of memory, twice: the second time gets as far. */
    size_t block = real ? (size_t)1 << 30 : (size_t)1 << 20;
    size_t first = fill_device(block);
    size_t second = fill_device(block);
    printf("blocks of %zu until out of memory: %zu, then again %zu\n", block, first, second);
    CHECK_TRUE(first > 0);
    CHECK_TRUE(second >= first);
    /* Small blocks, many of them, then a large one must still fit. */
    size_t small = fill_device(block / 16);
    printf("blocks of %zu until out of memory: %zu\n", block / 16, small);
    CHECK_TRUE((double)small >= 0.95 * 16.0 * (double)first);
    CUdeviceptr p;
    CHECK_CU(cuMemAlloc(&p, pooled_max / 2));
    tl_fill(p, pooled_max / 2, 0x0badf00d);
    CHECK_EQ(tl_spot_check(p, pooled_max / 2, 0x0badf00d), 0);
    CHECK_CU(cuMemFree(p));
    /* The program's own stream-ordered allocations, which cupool passes on:
     * with the pools holding the whole device again, what they keep must
     * not be missing to those either. */
    fill_device(block);
    CUdeviceptr q;
    CHECK_CU(cuMemAllocAsync(&q, pooled_max / 2, CU_STREAM_LEGACY));
    CHECK_CU(cuMemFreeAsync(q, CU_STREAM_LEGACY));
    fill_device(block);
    CUmemoryPool own;
    CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                            .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CHECK_CU(cuMemPoolCreate(&own, &props));
    CHECK_CU(cuMemAllocFromPoolAsync(&q, pooled_max / 2, own, CU_STREAM_LEGACY));
    CHECK_CU(cuMemFreeAsync(q, CU_STREAM_LEGACY));
    CHECK_CU(cuCtxSynchronize());
    CHECK_CU(cuMemPoolDestroy(own));
    printf("the program's own cuMemAllocAsync and cuMemAllocFromPoolAsync of %zu after the pools filled the device: "
           "passed\n", pooled_max / 2);
    s = tl_stats(0);
    CHECK_EQ(s.in_use, 0);
    printf("trims %llu, OOM retries %llu\n", (unsigned long long)s.trims, (unsigned long long)s.oom_retries);
    return 0;
}
