/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What a pinned or managed block reports depending on the blocks beside it,
 * natively (no cupool): the driver places small pinned and managed
 * allocations inside shared 2 MiB mappings, so a block allocated while
 * others are live may answer differently from one allocated alone (the
 * differences test_host_managed saw under cupool, whose kept blocks are
 * such neighbours: a PORTABLE block's cuMemHostGetFlags, a managed page's
 * advice and last prefetch location after a neighbour's free).
 *   cc -O2 -I/usr/local/cuda/include -o host_neighbours bench/probes/host_neighbours.c -lcuda
 *   ./host_neighbours
 */
#include "driver_probe.h"

static void flags_of(const char *what, void *p)
{
    unsigned f = 0;
    CUresult r = cuMemHostGetFlags(&f, p);
    CUdeviceptr base = 0;
    size_t size = 0;
    cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, (CUdeviceptr)(uintptr_t)p);
    cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, (CUdeviceptr)(uintptr_t)p);
    printf("%-58s flags r=%d %u  offset in mapping %lld of %zu\n", what, r, f,
           (long long)((uintptr_t)p - (uintptr_t)base), size);
}

static void range_of(const char *what, CUdeviceptr d, size_t n)
{
    int rm = -9, pl = -9, lp = -9, ab[4] = {-9, -9, -9, -9};
    cuMemRangeGetAttribute(&rm, 4, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, d, n);
    cuMemRangeGetAttribute(&pl, 4, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, d, n);
    cuMemRangeGetAttribute(&lp, 4, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, d, n);
    cuMemRangeGetAttribute(ab, 16, CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, d, n);
    printf("%-58s page offset %5llu: read-mostly %d preferred %d last-prefetch %d accessed-by %d\n", what,
           (unsigned long long)(d % 65536), rm, pl, lp, ab[0]);
}

int main(void)
{
    CUdevice dev;
    probe_context(&dev);
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUmemLocation on_dev = {CU_MEM_LOCATION_TYPE_DEVICE, 0}, on_host = {CU_MEM_LOCATION_TYPE_HOST, 0};

    void *a, *b, *c;
    CK(cuMemHostAlloc(&a, 4096, CU_MEMHOSTALLOC_PORTABLE));
    flags_of("PORTABLE 4096 alone", a);
    CK(cuMemFreeHost(a));
    CK(cuMemAllocHost(&b, 1000));
    CK(cuMemHostAlloc(&a, 4096, CU_MEMHOSTALLOC_PORTABLE));
    flags_of("PORTABLE 4096 beside a live cuMemAllocHost(1000)", a);
    flags_of("  that cuMemAllocHost(1000)", b);
    CK(cuMemFreeHost(a));
    CK(cuMemFreeHost(b));
    CK(cuMemHostAlloc(&c, 1 << 20, 0));
    CK(cuMemHostAlloc(&a, 12345, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
    flags_of("PORTABLE|DEVICEMAP 12345 beside a live HostAlloc(0, 1 MiB)", a);
    CK(cuMemFreeHost(a));
    CK(cuMemFreeHost(c));
    CK(cuMemHostAlloc(&a, 4096, CU_MEMHOSTALLOC_PORTABLE));
    flags_of("PORTABLE 4096 alone again", a);
    CK(cuMemFreeHost(a));

    /* Managed: an 8192-byte ATTACH_HOST block advised as test_host_managed does, alone and beside a live 3000-byte one. */
    for (int beside = 0; beside < 2; beside++) {
        CUdeviceptr n = 0, m;
        if (beside) CK(cuMemAllocManaged(&n, 3000, CU_MEM_ATTACH_GLOBAL));
        CK(cuMemAllocManaged(&m, 8192, CU_MEM_ATTACH_HOST));
        CK(cuMemPrefetchAsync_v2(m, 8192, on_dev, 0, s));
        CK(cuMemPrefetchAsync_v2(m, 4096, on_host, 0, s));
        CK(cuStreamSynchronize(s));
        cuMemAdvise_v2(m, 8192, CU_MEM_ADVISE_SET_READ_MOSTLY, on_dev);
        cuMemAdvise_v2(m, 8192, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, on_host);
        cuMemAdvise_v2(m + 4096, 4096, CU_MEM_ADVISE_SET_ACCESSED_BY, on_dev);
        range_of(beside ? "advised 8192, beside a live 3000, one byte" : "advised 8192 alone, one byte", m + 4096, 1);
        range_of(beside ? "advised 8192, beside a live 3000, whole" : "advised 8192 alone, whole", m, 8192);
        CK(cuMemFree(m));
        CK(cuMemAllocManaged(&m, 8192, CU_MEM_ATTACH_HOST));
        range_of(beside ? "next 8192, beside a live 3000, one byte" : "next 8192 alone, one byte", m + 4096, 1);
        CK(cuMemFree(m));
        if (n) CK(cuMemFree(n));
    }
    return 0;
}
