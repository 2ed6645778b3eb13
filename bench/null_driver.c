/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A CUDA driver that does nothing, for measuring cupool's own cost per
 * allocation + free pair without a GPU (scripts/overhead.sh).  Built as
 * libcuda.so.1 in a directory of its own and found by the loader first.
 * Every entry point cupool needs succeeds at once.  A pool is a stack of
 * freed addresses under a spin lock, as a real pool hands the block one
 * thread freed to the next thread that asks: with one thread the same
 * address comes back each time, with several the addresses (and cupool's
 * records of them) move between the threads' cores.
 *
 * Between two of cupool's calls the real driver runs thousands of
 * instructions over its own data, which evicts much of what cupool touched
 * from the L1 caches: with NULL_DRIVER_EVICT=1 each allocation, free and
 * event record here reads 32 KiB of data and runs 32 KiB of code first, so
 * that every line cupool then touches is a miss, as on the GPU machine in
 * the worst case.
 *
 * null_alloc and null_free are the pool calls themselves, under names cupool
 * does not intercept: the "bare" pair the overhead is measured against.
 * (The exported cuMemFreeAsync would resolve to cupool's shim when cupool is
 * preloaded: the bare pair would then hold a lookup of cupool's, and the
 * overhead would read that much low.)
 */
#define __CUDA_API_VERSION_INTERNAL
#include <cuda.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
#define EVICT_BYTES 32768

static __thread CUcontext current;
static char context0[64], pool0[64], handles[64][64];
static unsigned next_handle;
static unsigned char evict_data[EVICT_BYTES];
static int evict = -1;

/* 32 KiB of 9-byte no-ops: the code a driver call runs. */
static __attribute__((noinline)) void run_code(void)
{
    __asm__ volatile(".rept 3640\n .byte 0x66,0x0f,0x1f,0x84,0x00,0x00,0x00,0x00,0x00\n .endr");
}

static void driver_work(void)
{
    if (evict < 0) {
        const char *e = getenv("NULL_DRIVER_EVICT");
        evict = e && strcmp(e, "1") == 0;
    }
    if (!evict) return;
    run_code();
    for (size_t i = 0; i < EVICT_BYTES; i += 64) evict_data[i]++;
}

static void *new_handle(void)
{
    return handles[next_handle++ % 64];
}

#define BLOCK ((CUdeviceptr)0x7f0000000000ull)

EXPORT CUresult cuInit(unsigned flags) { (void)flags; return CUDA_SUCCESS; }
EXPORT CUresult cuDriverGetVersion(int *v) { *v = 13000; return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) { *d = ordinal; return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGetCount(int *n) { *n = 1; return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) { (void)a; (void)d; *v = 1; return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *p, CUdevice d) { (void)d; *p = (CUmemoryPool)pool0; return CUDA_SUCCESS; }
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { (void)d; *c = (CUcontext)context0; return CUDA_SUCCESS; }
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { (void)d; return CUDA_SUCCESS; }
EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned *f, int *active) { (void)d; *f = 0; *active = 1; return CUDA_SUCCESS; }
EXPORT CUresult cuCtxSetCurrent(CUcontext c) { current = c; return CUDA_SUCCESS; }
EXPORT CUresult cuCtxGetCurrent(CUcontext *c) { *c = current; return CUDA_SUCCESS; }
EXPORT CUresult cuCtxGetDevice(CUdevice *d) { *d = 0; return CUDA_SUCCESS; }
EXPORT CUresult cuCtxPushCurrent_v2(CUcontext c) { current = c; return CUDA_SUCCESS; }
EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *c) { *c = current; return CUDA_SUCCESS; }
EXPORT CUresult cuCtxSynchronize(void) { return CUDA_SUCCESS; }
EXPORT CUresult cuStreamCreate(CUstream *s, unsigned f) { (void)f; *s = new_handle(); return CUDA_SUCCESS; }
EXPORT CUresult cuStreamDestroy_v2(CUstream s) { (void)s; return CUDA_SUCCESS; }
EXPORT CUresult cuStreamSynchronize(CUstream s) { (void)s; return CUDA_SUCCESS; }
EXPORT CUresult cuStreamQuery(CUstream s) { (void)s; return CUDA_SUCCESS; }
EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned f) { (void)s; (void)e; (void)f; return CUDA_SUCCESS; }
EXPORT CUresult cuEventCreate(CUevent *e, unsigned f) { (void)f; *e = new_handle(); return CUDA_SUCCESS; }
/* A driver call like the pool calls: `ordered` records one where it takes
 * a freed block from its store instead of making them. */
EXPORT CUresult cuEventRecord(CUevent e, CUstream s)
{
    (void)e;
    (void)s;
    driver_work();
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventQuery(CUevent e) { (void)e; return CUDA_SUCCESS; }
EXPORT CUresult cuEventSynchronize(CUevent e) { (void)e; return CUDA_SUCCESS; }
EXPORT CUresult cuEventDestroy_v2(CUevent e) { (void)e; return CUDA_SUCCESS; }
EXPORT CUresult cuMemPoolCreate(CUmemoryPool *p, const CUmemPoolProps *props) { (void)props; *p = (CUmemoryPool)pool0; return CUDA_SUCCESS; }
EXPORT CUresult cuMemPoolDestroy(CUmemoryPool p) { (void)p; return CUDA_SUCCESS; }
EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool p, CUmemPool_attribute a, void *v) { (void)p; (void)a; (void)v; return CUDA_SUCCESS; }
EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool p, CUmemPool_attribute a, void *v) { (void)p; (void)a; *(cuuint64_t *)v = 0; return CUDA_SUCCESS; }
EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool p, size_t keep) { (void)p; (void)keep; return CUDA_SUCCESS; }
/* The pool: freed addresses, the latest on top; 1 MiB apart when new. */
static atomic_int pool_lock;
static CUdeviceptr freed[4096];
static unsigned nfreed, minted;

static void pool_enter(void)
{
    while (atomic_exchange_explicit(&pool_lock, 1, memory_order_acquire)) __builtin_ia32_pause();
}

static void pool_leave(void)
{
    atomic_store_explicit(&pool_lock, 0, memory_order_release);
}

/* The pool calls themselves, under names no one interposes: cupool
 * intercepts cuMemFreeAsync, so the bare pair must not call it. */
static CUresult pool_alloc(CUdeviceptr *d)
{
    driver_work();
    pool_enter();
    *d = nfreed ? freed[--nfreed] : BLOCK + ((CUdeviceptr)minted++ << 20);
    pool_leave();
    return CUDA_SUCCESS;
}

static CUresult pool_free(CUdeviceptr d)
{
    driver_work();
    pool_enter();
    if (nfreed < sizeof freed / sizeof freed[0]) freed[nfreed++] = d;
    pool_leave();
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *d, size_t n, CUmemoryPool p, CUstream s)
{
    (void)n; (void)p; (void)s;
    return pool_alloc(d);
}
EXPORT CUresult cuMemFreeAsync(CUdeviceptr d, CUstream s) { (void)s; return pool_free(d); }
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *d, size_t n) { (void)n; driver_work(); *d = BLOCK + (1ull << 32); return CUDA_SUCCESS; }
EXPORT CUresult cuMemFree_v2(CUdeviceptr d) { (void)d; driver_work(); return CUDA_SUCCESS; }
EXPORT CUresult cuGetErrorName(CUresult r, const char **s) { (void)r; *s = "CUDA_ERROR_UNKNOWN"; return CUDA_SUCCESS; }

EXPORT CUresult null_alloc(CUdeviceptr *d, size_t n, CUmemoryPool p, CUstream s) { (void)n; (void)p; (void)s; return pool_alloc(d); }
EXPORT CUresult null_free(CUdeviceptr d, CUstream s) { (void)s; return pool_free(d); }
