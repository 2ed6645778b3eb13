/* SPDX-License-Identifier: Apache-2.0 */
/* host_managed.cu: what pinned host and managed memory cost natively, and
 * whether this driver's host and managed memory pools behave as the memory
 * the program asked for.
 *
 *   nvcc -O2 -o host_managed bench/probes/host_managed.cu -lcuda
 *   ./host_managed pairs        pair costs (allocation + free), native and pool
 *   ./host_managed freewait     whether a free waits for a kernel in flight
 *   ./host_managed pool KIND    KIND host|managed: create, allocate, host
 *                               writes, a kernel reads and writes, queries
 *
 * Each KIND runs in its own process: a kernel that faults ends the context. */
#include "driver_probe.h"
#include <cuda_runtime.h>
#include <unistd.h>

__global__ void add_one(int *p, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1;
}

__global__ void spin_then_touch(int *p, long long cycles)
{
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
    if (p) p[0] += 1;
}

static const size_t sizes[] = {4096, 1 << 20, 16 << 20, 256 << 20};

static int rounds_for(size_t size)
{
    return size <= 4096 ? 400 : size <= (1 << 20) ? 200 : size <= (16 << 20) ? 40 : 10;
}

enum kind { HOST0, HOST_PM, MANAGED, DEVICE, POOL_DEVICE, POOL_HOST, POOL_MANAGED, NKINDS };
static const char *kind_name[] = {"cuMemHostAlloc(0)",     "cuMemHostAlloc(PORTABLE|DEVICEMAP)",
                                  "cuMemAllocManaged",     "cuMemAlloc",
                                  "pool device",           "pool host",
                                  "pool managed"};

static CUresult make_pool(enum kind k, CUdevice dev, CUmemoryPool *pool)
{
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = k == POOL_MANAGED ? CU_MEM_ALLOCATION_TYPE_MANAGED : CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    props.location.type = k == POOL_HOST ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = k == POOL_HOST ? 0 : dev;
    CUresult r = cuMemPoolCreate(pool, &props);
    if (r != CUDA_SUCCESS) return r;
    cuuint64_t keep = UINT64_MAX;
    cuMemPoolSetAttribute(*pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep);
    if (k == POOL_HOST) {
        /* A host pool's memory is reachable from the device only when access is granted. */
        CUmemAccessDesc d;
        memset(&d, 0, sizeof d);
        d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        d.location.id = dev;
        d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        CUresult a = cuMemPoolSetAccess(*pool, &d, 1);
        if (a != CUDA_SUCCESS) {
            const char *n = "?";
            cuGetErrorName(a, &n);
            printf("  cuMemPoolSetAccess(host pool, device RW) -> %s\n", n);
        }
    }
    return CUDA_SUCCESS;
}

static CUresult one_pair(enum kind k, size_t size, CUmemoryPool pool, CUstream s)
{
    CUdeviceptr d;
    void *h;
    CUresult r;
    switch (k) {
    case HOST0:
        if ((r = cuMemHostAlloc(&h, size, 0)) != CUDA_SUCCESS) return r;
        return cuMemFreeHost(h);
    case HOST_PM:
        if ((r = cuMemHostAlloc(&h, size, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP)) != CUDA_SUCCESS)
            return r;
        return cuMemFreeHost(h);
    case MANAGED:
        if ((r = cuMemAllocManaged(&d, size, CU_MEM_ATTACH_GLOBAL)) != CUDA_SUCCESS) return r;
        return cuMemFree(d);
    case DEVICE:
        if ((r = cuMemAlloc(&d, size)) != CUDA_SUCCESS) return r;
        return cuMemFree(d);
    default:
        if ((r = cuMemAllocFromPoolAsync(&d, size, pool, s)) != CUDA_SUCCESS) return r;
        return cuMemFreeAsync(d, s);
    }
}

static int pairs(CUdevice dev)
{
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    printf("pair cost (allocation + free), median of N pairs, microseconds\n");
    printf("%-36s %12s %12s %12s %12s\n", "kind", "4 KiB", "1 MiB", "16 MiB", "256 MiB");
    for (int k = 0; k < NKINDS; k++) {
        CUmemoryPool pool = NULL;
        if (k >= POOL_DEVICE) {
            CUresult r = make_pool((enum kind)k, dev, &pool);
            if (r != CUDA_SUCCESS) {
                const char *n = "?";
                cuGetErrorName(r, &n);
                printf("%-36s cuMemPoolCreate -> %s\n", kind_name[k], n);
                continue;
            }
        }
        printf("%-36s", kind_name[k]);
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
            int n = rounds_for(sizes[i]);
            double *t = (double *)calloc((size_t)n, sizeof *t);
            CUresult r = one_pair((enum kind)k, sizes[i], pool, s); /* warm */
            for (int j = 0; j < n && r == CUDA_SUCCESS; j++) {
                double t0 = now_ns();
                r = one_pair((enum kind)k, sizes[i], pool, s);
                t[j] = now_ns() - t0;
            }
            if (r != CUDA_SUCCESS) {
                const char *nm = "?";
                cuGetErrorName(r, &nm);
                printf(" %12s", nm);
            } else {
                printf(" %12.2f", median(t, n) / 1e3);
            }
            free(t);
        }
        printf("\n");
        if (pool) {
            CK(cuStreamSynchronize(s));
            cuMemPoolDestroy(pool);
        }
    }
    return 0;
}

/* How long a free takes while a kernel on a non-blocking stream still runs
 * (the kernel touches the block at its end), against the kernel's length. */
static int freewait(void)
{
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    int rate = 0;
    CK(cuDeviceGetAttribute(&rate, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 0));
    long long cycles = (long long)rate * 1000LL / 5; /* about 200 ms */
    for (int k = HOST0; k <= DEVICE; k++) {
        void *h = NULL;
        CUdeviceptr d = 0;
        size_t size = 1 << 20;
        if (k == HOST0) CK(cuMemHostAlloc(&h, size, CU_MEMHOSTALLOC_DEVICEMAP));
        if (k == HOST_PM) CK(cuMemHostAlloc(&h, size, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
        if (h) CK(cuMemHostGetDevicePointer(&d, h, 0));
        if (k == MANAGED) CK(cuMemAllocManaged(&d, size, CU_MEM_ATTACH_GLOBAL));
        if (k == DEVICE) CK(cuMemAlloc(&d, size));
        CK(cuCtxSynchronize());
        double t0 = now_ns();
        spin_then_touch<<<1, 1, 0, (cudaStream_t)s>>>((int *)d, cycles);
        double t1 = now_ns();
        CUresult r = h ? cuMemFreeHost(h) : cuMemFree(d);
        double t2 = now_ns();
        CK(cuStreamSynchronize(s));
        double t3 = now_ns();
        const char *nm = "?";
        cuGetErrorName(r, &nm);
        printf("%-36s launch %.3f ms, free %.3f ms (%s), kernel done %.3f ms after launch\n", kind_name[k],
               (t1 - t0) / 1e6, (t2 - t1) / 1e6, nm, (t3 - t0) / 1e6);
    }
    return 0;
}

static void attr(const char *what, CUresult r, unsigned long long v)
{
    const char *nm = "?";
    cuGetErrorName(r, &nm);
    if (r == CUDA_SUCCESS)
        printf("  %-40s %llu (0x%llx)\n", what, v, v);
    else
        printf("  %-40s %s\n", what, nm);
}

static int pool_check(const char *which, CUdevice dev)
{
    enum kind k = strcmp(which, "host") == 0 ? POOL_HOST : POOL_MANAGED;
    CUmemoryPool pool;
    CUresult r = make_pool(k, dev, &pool);
    const char *nm = "?";
    cuGetErrorName(r, &nm);
    printf("%s: cuMemPoolCreate -> %s\n", kind_name[k], nm);
    if (r != CUDA_SUCCESS) return 1;
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    size_t n = 1 << 20, size = n * sizeof(int);
    CUdeviceptr d;
    CK(cuMemAllocFromPoolAsync(&d, size, pool, s));
    CK(cuStreamSynchronize(s));
    int *h = (int *)(uintptr_t)d;
    for (size_t i = 0; i < n; i++) h[i] = (int)i;
    printf("  host wrote through the pointer\n");
    add_one<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)s>>>(h, n);
    r = cuStreamSynchronize(s);
    cuGetErrorName(r, &nm);
    printf("  kernel read and wrote it: %s\n", nm);
    if (r != CUDA_SUCCESS) return 1;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += h[i] != (int)i + 1;
    printf("  host reads the kernel's writes: %s (%zu wrong)\n", bad ? "NO" : "yes", bad);
    /* An async copy to device memory, as pinned memory is used. */
    CUdeviceptr dev_buf;
    CK(cuMemAlloc(&dev_buf, size));
    r = cuMemcpyHtoDAsync(dev_buf, h, size, s);
    cuGetErrorName(r, &nm);
    printf("  cuMemcpyHtoDAsync from it: %s\n", nm);
    CK(cuStreamSynchronize(s));

    unsigned int u = 0;
    int i32 = 0;
    CUdeviceptr p2 = 0;
    void *hp = NULL;
    r = cuPointerGetAttribute(&u, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d);
    attr("MEMORY_TYPE (1 host, 2 device, 4 unified)", r, u);
    r = cuPointerGetAttribute(&u, CU_POINTER_ATTRIBUTE_IS_MANAGED, d);
    attr("IS_MANAGED", r, u);
    r = cuPointerGetAttribute(&p2, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, d);
    attr("DEVICE_POINTER", r, p2);
    r = cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, d);
    attr("HOST_POINTER", r, (unsigned long long)(uintptr_t)hp);
    r = cuPointerGetAttribute(&p2, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 64);
    attr("RANGE_START_ADDR (of +64)", r, p2 - d);
    size_t rs = 0;
    r = cuPointerGetAttribute(&rs, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d);
    attr("RANGE_SIZE", r, rs);
    r = cuPointerGetAttribute(&u, CU_POINTER_ATTRIBUTE_MAPPED, d);
    attr("MAPPED", r, u);
    r = cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, d);
    attr("MEMPOOL_HANDLE == pool", r, hp == (void *)pool);
    r = cuPointerGetAttribute(&i32, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d);
    attr("DEVICE_ORDINAL", r, (unsigned long long)i32);
    r = cuMemHostGetDevicePointer(&p2, h, 0);
    attr("cuMemHostGetDevicePointer", r, p2);
    r = cuMemHostGetFlags(&u, h);
    attr("cuMemHostGetFlags", r, u);
    if (k == POOL_MANAGED) {
        CUmemLocation loc;
        memset(&loc, 0, sizeof loc);
        loc.type = CU_MEM_LOCATION_TYPE_DEVICE;
        loc.id = dev;
        r = cuMemAdvise(d, size, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, loc);
        attr("cuMemAdvise(PREFERRED_LOCATION dev)", r, 0);
        r = cuMemPrefetchAsync(d, size, loc, 0, s);
        attr("cuMemPrefetchAsync(dev)", r, 0);
        CK(cuStreamSynchronize(s));
        int pref = -7;
        r = cuMemRangeGetAttribute(&pref, sizeof pref, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, d, size);
        attr("cuMemRangeGetAttribute(PREFERRED_LOCATION)", r, (unsigned long long)pref);
        r = cuStreamAttachMemAsync(s, d, 0, CU_MEM_ATTACH_SINGLE);
        attr("cuStreamAttachMemAsync(SINGLE)", r, 0);
        CK(cuStreamSynchronize(s));
        r = cuStreamAttachMemAsync(s, d, 0, CU_MEM_ATTACH_GLOBAL);
        attr("cuStreamAttachMemAsync(GLOBAL)", r, 0);
        CK(cuStreamSynchronize(s));
    }
    r = cuIpcGetMemHandle((CUipcMemHandle *)calloc(1, sizeof(CUipcMemHandle)), d);
    attr("cuIpcGetMemHandle", r, 0);
    /* Native counterparts, for comparison. */
    void *nh;
    CUdeviceptr nd;
    if (k == POOL_HOST) {
        CK(cuMemHostAlloc(&nh, size, CU_MEMHOSTALLOC_DEVICEMAP));
        nd = (CUdeviceptr)(uintptr_t)nh;
        printf(" native cuMemHostAlloc(DEVICEMAP):\n");
    } else {
        CK(cuMemAllocManaged(&nd, size, CU_MEM_ATTACH_GLOBAL));
        printf(" native cuMemAllocManaged:\n");
    }
    r = cuPointerGetAttribute(&u, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, nd);
    attr("MEMORY_TYPE", r, u);
    r = cuPointerGetAttribute(&u, CU_POINTER_ATTRIBUTE_IS_MANAGED, nd);
    attr("IS_MANAGED", r, u);
    r = cuPointerGetAttribute(&p2, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, nd);
    attr("DEVICE_POINTER == ptr", r, p2 == nd);
    r = cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, nd);
    attr("HOST_POINTER == ptr", r, hp == (void *)(uintptr_t)nd);
    r = cuPointerGetAttribute(&u, CU_POINTER_ATTRIBUTE_MAPPED, nd);
    attr("MAPPED", r, u);
    r = cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, nd);
    attr("MEMPOOL_HANDLE", r, (unsigned long long)(uintptr_t)hp);
    r = cuMemHostGetFlags(&u, (void *)(uintptr_t)nd);
    attr("cuMemHostGetFlags", r, u);
    /* A pool's free on a stream with a kernel in flight, then the host writes
     * the next block: does the pool hand the same block back at once? */
    CK(cuMemFreeAsync(d, s));
    CUdeviceptr again;
    CK(cuMemAllocFromPoolAsync(&again, size, pool, s));
    printf("  same stream reallocation gets the same block: %s\n", again == d ? "yes" : "no");
    CK(cuStreamSynchronize(s));
    CK(cuMemFreeAsync(again, s));
    CK(cuStreamSynchronize(s));
    return 0;
}

int main(int argc, char **argv)
{
    CUdevice dev;
    probe_context(&dev);
    CK(cudaSetDevice(0) == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN);
    char name[128];
    CK(cuDeviceGetName(name, sizeof name, dev));
    int drv = 0;
    cuDriverGetVersion(&drv);
    printf("device: %s, driver API %d\n", name, drv);
    if (argc > 1 && strcmp(argv[1], "pairs") == 0) return pairs(dev);
    if (argc > 1 && strcmp(argv[1], "freewait") == 0) return freewait();
    if (argc > 2 && strcmp(argv[1], "pool") == 0) return pool_check(argv[2], dev);
    fprintf(stderr, "usage: %s pairs | freewait | pool host|managed\n", argv[0]);
    return 2;
}
