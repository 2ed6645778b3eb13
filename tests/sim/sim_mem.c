/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Device memory of the simulated CUDA driver: the registry of live allocations
 * (a sorted array, so an address inside an allocation is found by binary
 * search), the per-device byte budget that cuMemAlloc memory and pool
 * reservations share, cuMemAlloc/cuMemFree/cuMemAllocPitch/cuMemGetInfo, and the
 * copies and memsets.  cuMemAlloc memory is mapped by sim_ipc.c so that other
 * processes can open it; memory mapped from other processes (IPC openings and
 * pool imports) costs this process's budget nothing, and neither does pinned
 * host or managed memory (sim_host.c).  With SIMCUDA_SHARED_DEVICE the budget
 * is shared with other processes (sim_shared.c).  Device pointers are real host addresses, so tests can
 * read and write them; every device range an operation touches must lie inside
 * one live allocation (CUDA_ERROR_INVALID_VALUE when enqueued, and
 * CUDA_ERROR_ILLEGAL_ADDRESS if the memory is gone by the time a graph runs).
 */
#include "sim.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static sim_alloc **allocs; /* sorted by base */
static size_t alloc_count, alloc_cap;

/* Index of the last allocation whose base is <= addr, or -1. */
static ptrdiff_t alloc_floor(uintptr_t addr)
{
    ptrdiff_t lo = 0, hi = (ptrdiff_t)alloc_count - 1, found = -1;
    while (lo <= hi) {
        ptrdiff_t mid = lo + (hi - lo) / 2;
        if (allocs[mid]->base <= addr) {
            found = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return found;
}

sim_alloc *sim_alloc_find(uintptr_t addr)
{
    ptrdiff_t i = alloc_floor(addr);
    if (i < 0 || addr - allocs[i]->base >= allocs[i]->size) return NULL;
    return allocs[i];
}

bool sim_range_is_device(uintptr_t addr, size_t bytes)
{
    sim_alloc *a = sim_alloc_find(addr);
    return a && bytes <= a->size - (addr - a->base);
}

sim_alloc *sim_alloc_register(uintptr_t base, size_t size, CUcontext ctx, int device, sim_alloc_kind kind,
                              CUmemoryPool pool, void *host_block)
{
    if (alloc_count == alloc_cap) {
        size_t cap = alloc_cap ? alloc_cap * 2 : 256;
        sim_alloc **grown = realloc(allocs, cap * sizeof *grown);
        if (!grown) return NULL;
        allocs = grown;
        alloc_cap = cap;
    }
    sim_alloc *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    *a = (sim_alloc){ .base = base, .size = size, .ctx = ctx, .device = device, .kind = kind, .pool = pool,
                      .host_block = host_block, .id = sim_next_id() };
    size_t at = (size_t)(alloc_floor(base) + 1);
    memmove(&allocs[at + 1], &allocs[at], (alloc_count - at) * sizeof *allocs);
    allocs[at] = a;
    alloc_count++;
    return a;
}

void sim_alloc_unregister(sim_alloc *a)
{
    ptrdiff_t i = alloc_floor(a->base);
    if (i < 0 || allocs[i] != a) return;
    memmove(&allocs[i], &allocs[i + 1], (alloc_count - (size_t)i - 1) * sizeof *allocs);
    alloc_count--;
    sim_race_alloc_forget(a);
    free(a);
}

bool sim_alloc_is_host(const sim_alloc *a)
{
    return a->kind == SIM_ALLOC_HOST ||
           (a->kind == SIM_ALLOC_POOL && a->pool->props.location.type == CU_MEM_LOCATION_TYPE_HOST);
}

bool sim_alloc_is_managed(const sim_alloc *a)
{
    return a->kind == SIM_ALLOC_MANAGED ||
           (a->kind == SIM_ALLOC_POOL && a->pool->props.allocType == CU_MEM_ALLOCATION_TYPE_MANAGED);
}

size_t sim_device_free_bytes(int device)
{
    const sim_device *d = &sim.dev[device];
    size_t used = sim_shared_on() ? sim_shared_used(device) : d->plain_bytes + d->pool_reserved;
    return used >= d->budget ? 0 : d->budget - used;
}

/* What a cuMemAlloc allocation costs of the device budget. */
static size_t plain_charge(size_t size)
{
    return (size + SIM_ALLOC_ALIGN - 1) & ~(SIM_ALLOC_ALIGN - 1);
}

static void plain_free(sim_alloc *a)
{
    sim.dev[a->device].plain_bytes -= plain_charge(a->size);
    sim_shared_charge(a->device, -(long long)plain_charge(a->size));
    sim_plain_unmap(a);
}

/* Frees what a context being torn down owns: its cuMemAlloc memory, pool
 * blocks allocated in it go back to their pools, and what it mapped from other
 * processes is unmapped however often it was opened or imported. */
void sim_ctx_free_memory(CUcontext ctx)
{
    for (size_t i = alloc_count; i-- > 0;) {
        if (i >= alloc_count || allocs[i]->ctx != ctx) continue;
        switch (allocs[i]->kind) {
        case SIM_ALLOC_PLAIN: plain_free(allocs[i]); break;
        case SIM_ALLOC_POOL: sim_pool_release_block(allocs[i]); break;
        case SIM_ALLOC_IPC: sim_ipc_release(allocs[i]); break;
        case SIM_ALLOC_IMPORT: sim_pool_import_drop(allocs[i], true); break;
        case SIM_ALLOC_HOST:
        case SIM_ALLOC_MANAGED: sim_host_free(allocs[i]); break;
        }
    }
}

static CUresult plain_alloc(CUdeviceptr *dptr, size_t size)
{
    CUcontext ctx;
    if (!dptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_current_ctx(&ctx));
    SIM_CHECK(sim_capture_check_unsafe());
    if (plain_charge(size) < size || plain_charge(size) > sim_device_free_bytes(ctx->device))
        return CUDA_ERROR_OUT_OF_MEMORY;
    sim_alloc *a = sim_plain_map(size, ctx);
    if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
    sim.dev[ctx->device].plain_bytes += plain_charge(size);
    sim_shared_charge(ctx->device, (long long)plain_charge(size));
    *dptr = (CUdeviceptr)a->base;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t size)
{
    SIM_BEGIN;
    return plain_alloc(dptr, size);
}

SIM_API CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                           unsigned int element_size)
{
    SIM_BEGIN;
    if (!dptr || !pitch || width == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
    if (element_size != 4 && element_size != 8 && element_size != 16) return CUDA_ERROR_INVALID_VALUE;
    size_t rounded = (width + 511) & ~(size_t)511;
    if (rounded < width || height > SIZE_MAX / rounded) return CUDA_ERROR_OUT_OF_MEMORY;
    SIM_CHECK(plain_alloc(dptr, rounded * height));
    *pitch = rounded;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
    SIM_BEGIN;
    if (dptr == 0) return CUDA_SUCCESS;
    SIM_CHECK(sim_capture_check_unsafe());
    sim_alloc *a = sim_alloc_find((uintptr_t)dptr);
    /* An opened IPC mapping is closed with cuIpcCloseMemHandle, pinned host memory with cuMemFreeHost. */
    if (!a || a->base != (uintptr_t)dptr || a->kind == SIM_ALLOC_IPC || a->kind == SIM_ALLOC_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    sim_race_host_waits_all(); /* cuMemFree waits for the device */
    switch (a->kind) {
    case SIM_ALLOC_POOL: sim_pool_release_block(a); break; /* the real driver accepts pool memory here */
    case SIM_ALLOC_IMPORT: sim_pool_import_drop(a, false); break;
    case SIM_ALLOC_MANAGED: sim_host_free(a); break;
    default: plain_free(a); break;
    }
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    SIM_BEGIN;
    CUcontext ctx;
    if (!free_bytes || !total_bytes) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_current_ctx(&ctx));
    *free_bytes = sim_device_free_bytes(ctx->device);
    *total_bytes = sim.dev[ctx->device].budget;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr dptr)
{
    SIM_BEGIN;
    sim_alloc *a = sim_alloc_find((uintptr_t)dptr);
    if (!a) return CUDA_ERROR_NOT_FOUND;
    if (base) *base = (CUdeviceptr)a->base;
    if (size) *size = a->size;
    return CUDA_SUCCESS;
}

/* Imported pool memory and host pool memory are usable by a device once
 * cuMemPoolSetAccess granted it that access on the pool; other memory is not
 * checked. */
static bool access_granted(uintptr_t addr, int device, bool write)
{
    const sim_alloc *a = sim_alloc_find(addr);
    if (!a || (a->kind != SIM_ALLOC_IMPORT && !(a->kind == SIM_ALLOC_POOL && sim_alloc_is_host(a)))) return true;
    CUmemAccess_flags f = a->pool->access[device];
    return write ? f == CU_MEM_ACCESS_FLAGS_PROT_READWRITE : f != CU_MEM_ACCESS_FLAGS_PROT_NONE;
}

/* ---- copies --------------------------------------------------------------- */

static bool memcpy_ranges_ok(const sim_memcpy_params *p)
{
    if (p->dst_device && !sim_range_is_device(p->dst, p->bytes)) return false;
    if (p->src_device && !sim_range_is_device(p->src, p->bytes)) return false;
    return true;
}

/* A host-side pointer into pinned host or managed memory is memory the race
 * checker follows too: the copy engine reads or writes it while the host may
 * not. */
static bool host_side_tracked(uintptr_t p)
{
    const sim_alloc *a = sim_alloc_find(p);
    return a && (sim_alloc_is_host(a) || sim_alloc_is_managed(a));
}

CUresult sim_memcpy_run(const sim_memcpy_params *p)
{
    if (p->bytes == 0) return CUDA_SUCCESS;
    if (!memcpy_ranges_ok(p)) return CUDA_ERROR_ILLEGAL_ADDRESS;
    if (p->src_device || host_side_tracked(p->src)) sim_race_access(p->src, p->bytes, false);
    if (p->dst_device || host_side_tracked(p->dst)) sim_race_access(p->dst, p->bytes, true);
    memmove((void *)p->dst, (const void *)p->src, p->bytes);
    return CUDA_SUCCESS;
}

/* A pointer given where either kind is allowed (cuMemcpy) is device memory when
 * it lies in an allocation other than pinned host memory (which unified
 * addressing reports as host memory), and then the whole range must. */
static bool is_device_pointer(uintptr_t p)
{
    const sim_alloc *a = sim_alloc_find(p);
    return a && !sim_alloc_is_host(a);
}

static bool is_pinned_host(uintptr_t p)
{
    const sim_alloc *a = sim_alloc_find(p);
    return a && sim_alloc_is_host(a);
}

/* A synchronous copy to or from host memory returns once it is done (from
 * pageable memory to the device, once it started after the stream's earlier
 * work: taken as done too, which can only hide a race); so does one that
 * names pinned host memory as device memory. */
static CUresult copy_op(uintptr_t dst, bool dst_device, uintptr_t src, bool src_device, size_t bytes, CUstream h,
                        bool ptds, bool synchronous)
{
    SIM_BEGIN;
    CUcontext ctx;
    SIM_CHECK(sim_current_ctx(&ctx));
    sim_node_params op = { .type = CU_GRAPH_NODE_TYPE_MEMCPY };
    op.u.memcpy = (sim_memcpy_params){ dst, src, bytes, dst_device, src_device };
    if (bytes && (!dst || !src || !memcpy_ranges_ok(&op.u.memcpy))) return CUDA_ERROR_INVALID_VALUE;
    if (bytes && ((dst_device && !access_granted(dst, ctx->device, true)) ||
                  (src_device && !access_granted(src, ctx->device, false))))
        return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_stream_submit(h, ptds, &op));
    CUstream s;
    bool host_side = !(dst_device && src_device) || is_pinned_host(dst) || is_pinned_host(src);
    if (synchronous && host_side && sim_stream_resolve(h, ptds, &s) == CUDA_SUCCESS)
        sim_race_host_waits_stream(s);
    return CUDA_SUCCESS;
}

#define HOST_PTR(p) ((uintptr_t)(p))
#define ANY_PTR(p) HOST_PTR(p), is_device_pointer(HOST_PTR(p))

SIM_API CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { return copy_op(d, true, HOST_PTR(s), false, n, NULL, false, true); }
SIM_API CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr d, const void *s, size_t n) { return copy_op(d, true, HOST_PTR(s), false, n, NULL, true, true); }
SIM_API CUresult CUDAAPI cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { return copy_op(HOST_PTR(d), false, s, true, n, NULL, false, true); }
SIM_API CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void *d, CUdeviceptr s, size_t n) { return copy_op(HOST_PTR(d), false, s, true, n, NULL, true, true); }
SIM_API CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { return copy_op(d, true, s, true, n, NULL, false, true); }
SIM_API CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr d, CUdeviceptr s, size_t n) { return copy_op(d, true, s, true, n, NULL, true, true); }
SIM_API CUresult CUDAAPI cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n) { return copy_op(ANY_PTR(d), ANY_PTR(s), n, NULL, false, true); }
SIM_API CUresult CUDAAPI cuMemcpy_ptds(CUdeviceptr d, CUdeviceptr s, size_t n) { return copy_op(ANY_PTR(d), ANY_PTR(s), n, NULL, true, true); }
SIM_API CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream st) { return copy_op(d, true, HOST_PTR(s), false, n, st, false, false); }
SIM_API CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr d, const void *s, size_t n, CUstream st) { return copy_op(d, true, HOST_PTR(s), false, n, st, true, false); }
SIM_API CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream st) { return copy_op(HOST_PTR(d), false, s, true, n, st, false, false); }
SIM_API CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void *d, CUdeviceptr s, size_t n, CUstream st) { return copy_op(HOST_PTR(d), false, s, true, n, st, true, false); }
SIM_API CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { return copy_op(d, true, s, true, n, st, false, false); }
SIM_API CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { return copy_op(d, true, s, true, n, st, true, false); }
SIM_API CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { return copy_op(ANY_PTR(d), ANY_PTR(s), n, st, false, false); }
SIM_API CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { return copy_op(ANY_PTR(d), ANY_PTR(s), n, st, true, false); }

/* ---- memsets ----------------------------------------------------------------- */

/* Bytes from the first to one past the last byte a memset writes (0 if empty). */
static bool memset_extent(const sim_memset_params *p, size_t *extent)
{
    size_t row = p->width * p->element_size;
    if (p->width && row / p->width != p->element_size) return false;
    if (p->height == 0 || p->width == 0) {
        *extent = 0;
        return true;
    }
    if (p->height > 1 && p->pitch < row) return false;
    size_t rows = (p->height - 1) * p->pitch;
    if (p->pitch && rows / p->pitch != p->height - 1) return false;
    *extent = rows + row;
    return *extent >= rows;
}

CUresult sim_memset_validate(const sim_memset_params *p, bool graph_node)
{
    size_t extent;
    unsigned es = p->element_size;
    if (es != 1 && es != 2 && es != 4) return CUDA_ERROR_INVALID_VALUE;
    /* Measured: memset nodes reject width 0; the stream memsets accept it. */
    if (graph_node && (p->width == 0 || p->height == 0)) return CUDA_ERROR_INVALID_VALUE;
    if (!memset_extent(p, &extent)) return CUDA_ERROR_INVALID_VALUE;
    if (extent == 0) return CUDA_SUCCESS;
    if (p->dst % es || (p->height > 1 && p->pitch % es)) return CUDA_ERROR_INVALID_VALUE;
    if (!sim_range_is_device((uintptr_t)p->dst, extent)) return CUDA_ERROR_INVALID_VALUE;
    if (p->ctx && !access_granted((uintptr_t)p->dst, p->ctx->device, true)) return CUDA_ERROR_INVALID_VALUE;
    /* SIMCUDA_MEMSET_BUG: CUDA 12.0/12.1 refused memset nodes on pool memory. */
    if (graph_node && sim.memset_bug && sim_alloc_find((uintptr_t)p->dst)->kind == SIM_ALLOC_POOL)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

CUresult sim_memset_run(const sim_memset_params *p)
{
    size_t extent;
    if (!memset_extent(p, &extent)) return CUDA_ERROR_INVALID_VALUE;
    if (extent == 0) return CUDA_SUCCESS;
    if (!sim_range_is_device((uintptr_t)p->dst, extent)) return CUDA_ERROR_ILLEGAL_ADDRESS;
    sim_race_access((uintptr_t)p->dst, extent, true);
    for (size_t r = 0; r < p->height; r++) {
        unsigned char *row = (unsigned char *)(uintptr_t)(p->dst + r * p->pitch);
        switch (p->element_size) {
        case 1: memset(row, (int)(p->value & 0xff), p->width); break;
        case 2:
            for (size_t i = 0; i < p->width; i++) ((uint16_t *)row)[i] = (uint16_t)p->value;
            break;
        default:
            for (size_t i = 0; i < p->width; i++) ((uint32_t *)row)[i] = (uint32_t)p->value;
            break;
        }
    }
    return CUDA_SUCCESS;
}

static CUresult memset_op(CUdeviceptr dst, size_t pitch, unsigned value, unsigned element_size, size_t width,
                          size_t height, CUstream h, bool ptds)
{
    sim_slow_enqueue();
    SIM_BEGIN;
    CUcontext ctx;
    SIM_CHECK(sim_current_ctx(&ctx));
    sim_node_params op = { .type = CU_GRAPH_NODE_TYPE_MEMSET };
    op.u.memset = (sim_memset_params){ dst, pitch, value, element_size, width, height, ctx };
    SIM_CHECK(sim_memset_validate(&op.u.memset, false));
    if (width == 0 || height == 0) return CUDA_SUCCESS;
    return sim_stream_submit(h, ptds, &op);
}

/* The eight memset entry points of one element size: 1-D and 2-D, synchronous
 * and async, each with its per-thread-default-stream twin. */
#define SIM_MEMSET_FAMILY(BITS, TYPE)                                                                         \
    SIM_API CUresult CUDAAPI cuMemsetD##BITS##_v2(CUdeviceptr d, TYPE v, size_t n)                             \
    {                                                                                                          \
        return memset_op(d, n * (BITS / 8), v, BITS / 8, n, 1, NULL, false);                                   \
    }                                                                                                          \
    SIM_API CUresult CUDAAPI cuMemsetD##BITS##_v2_ptds(CUdeviceptr d, TYPE v, size_t n)                        \
    {                                                                                                          \
        return memset_op(d, n * (BITS / 8), v, BITS / 8, n, 1, NULL, true);                                    \
    }                                                                                                          \
    SIM_API CUresult CUDAAPI cuMemsetD##BITS##Async(CUdeviceptr d, TYPE v, size_t n, CUstream s)               \
    {                                                                                                          \
        return memset_op(d, n * (BITS / 8), v, BITS / 8, n, 1, s, false);                                      \
    }                                                                                                          \
    SIM_API CUresult CUDAAPI cuMemsetD##BITS##Async_ptsz(CUdeviceptr d, TYPE v, size_t n, CUstream s)          \
    {                                                                                                          \
        return memset_op(d, n * (BITS / 8), v, BITS / 8, n, 1, s, true);                                       \
    }                                                                                                          \
    SIM_API CUresult CUDAAPI cuMemsetD2D##BITS##_v2(CUdeviceptr d, size_t p, TYPE v, size_t w, size_t h)       \
    {                                                                                                          \
        return memset_op(d, p, v, BITS / 8, w, h, NULL, false);                                                \
    }                                                                                                          \
    SIM_API CUresult CUDAAPI cuMemsetD2D##BITS##_v2_ptds(CUdeviceptr d, size_t p, TYPE v, size_t w, size_t h)  \
    {                                                                                                          \
        return memset_op(d, p, v, BITS / 8, w, h, NULL, true);                                                 \
    }                                                                                                          \
    SIM_API CUresult CUDAAPI cuMemsetD2D##BITS##Async(CUdeviceptr d, size_t p, TYPE v, size_t w, size_t h,     \
                                                      CUstream s)                                              \
    {                                                                                                          \
        return memset_op(d, p, v, BITS / 8, w, h, s, false);                                                   \
    }                                                                                                          \
    SIM_API CUresult CUDAAPI cuMemsetD2D##BITS##Async_ptsz(CUdeviceptr d, size_t p, TYPE v, size_t w,          \
                                                           size_t h, CUstream s)                               \
    {                                                                                                          \
        return memset_op(d, p, v, BITS / 8, w, h, s, true);                                                    \
    }

SIM_MEMSET_FAMILY(8, unsigned char)
SIM_MEMSET_FAMILY(16, unsigned short)
SIM_MEMSET_FAMILY(32, unsigned int)
