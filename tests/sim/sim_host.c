/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Pinned host memory and managed memory of the simulated CUDA driver.  Under
 * unified addressing (the only mode CUDA 13 has on 64-bit Linux) a pinned
 * host allocation is mapped into the device at its own address, so its device
 * pointer is its host pointer, and a managed allocation is one address valid
 * on the host and on every device.  Here both are ordinary host memory
 * registered in the allocation registry (kinds SIM_ALLOC_HOST and
 * SIM_ALLOC_MANAGED), so copies, memsets and kernels accept them; neither
 * counts against a device's budget (managed memory is oversubscribable, and
 * pinned memory is the host's).  Both belong to the context that allocated
 * them and go when it is destroyed.  Freeing either waits for the device, as
 * cuMemFree does.
 *
 * Managed memory keeps what cuMemAdvise and cuMemPrefetchAsync were told, for
 * cuMemRangeGetAttribute(s) to report; nothing migrates.  A prefetch is an
 * operation of its stream that reads the range, so the race checker orders
 * it after the allocation and before a stream-ordered free.  Blocks of
 * managed pools answer as measured on CUDA 13: cuMemAdvise is
 * CUDA_ERROR_NOT_SUPPORTED, cuStreamAttachMemAsync and cuMemHostGetFlags are
 * CUDA_ERROR_INVALID_VALUE, cuMemPrefetchAsync and the range attributes work.
 */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

/* Not declared by cuda.h unless built for per-thread default streams. */
CUresult CUDAAPI cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned flags, CUstream s);
CUresult CUDAAPI cuStreamAttachMemAsync_ptsz(CUstream s, CUdeviceptr p, size_t n, unsigned flags);

/* Which of sim.host_cap, host_bytes and host_allocations an allocation counts in. */
static int host_kind_index(sim_alloc_kind kind)
{
    return kind == SIM_ALLOC_MANAGED;
}

/* No machine pins or maps more than this: beyond it the driver's answer
 * for too little memory, without asking the host allocator (a sanitizer's
 * aborts on a request that large instead of failing it). */
#define HOST_MAX_BYTES (1ull << 40)

static CUresult host_register(size_t bytes, sim_alloc_kind kind, unsigned flags, uintptr_t *out)
{
    CUcontext ctx;
    void *host = NULL;
    int k = host_kind_index(kind);
    SIM_CHECK(sim_current_ctx(&ctx));
    SIM_CHECK(sim_capture_check_unsafe());
    if (bytes > sim.host_cap[k] - sim.host_bytes[k]) return CUDA_ERROR_OUT_OF_MEMORY; /* SIMCUDA_HOST_MEM, SIMCUDA_MANAGED_MEM */
    if (bytes > HOST_MAX_BYTES) return CUDA_ERROR_OUT_OF_MEMORY;
    if (posix_memalign(&host, 4096, bytes) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    sim_alloc *a = sim_alloc_register((uintptr_t)host, bytes, ctx, ctx->device, kind, NULL, host);
    if (!a) {
        free(host);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->flags = flags;
    sim.host_bytes[k] += bytes;
    sim.host_allocations[k]++;
    *out = a->base;
    return CUDA_SUCCESS;
}

void sim_host_free(sim_alloc *a)
{
    void *host = a->host_block;
    sim.host_bytes[host_kind_index(a->kind)] -= a->size;
    sim_alloc_unregister(a);
    free(host);
}

/* For tests: the allocations of pinned host memory (managed 0: cuMemAllocHost,
 * cuMemHostAlloc) or of managed memory (managed 1: cuMemAllocManaged) made so
 * far, and the bytes of them live now. */
SIM_API long long simcuda_host_allocations(int managed)
{
    SIM_LOCKED;
    return (long long)sim.host_allocations[managed != 0];
}

SIM_API long long simcuda_host_bytes(int managed)
{
    SIM_LOCKED;
    return (long long)sim.host_bytes[managed != 0];
}

/* ---- pinned host memory ---------------------------------------------------------- */

#define HOST_ALLOC_FLAGS (CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED)

static CUresult host_alloc(void **pp, size_t bytes, unsigned flags)
{
    uintptr_t p;
    if (!pp || bytes == 0 || (flags & ~(unsigned)HOST_ALLOC_FLAGS)) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(host_register(bytes, SIM_ALLOC_HOST, flags, &p));
    *pp = (void *)p;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuMemAllocHost_v2(void **pp, size_t bytes)
{
    SIM_BEGIN;
    return host_alloc(pp, bytes, 0);
}

/* The CUDA 2.0 entry point: a 32-bit size, otherwise the same call. */
SIM_API CUresult CUDAAPI cuMemAllocHost(void **pp, unsigned int bytes)
{
    SIM_BEGIN;
    return host_alloc(pp, bytes, 0);
}

SIM_API CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytes, unsigned int flags)
{
    SIM_BEGIN;
    return host_alloc(pp, bytes, flags);
}

SIM_API CUresult CUDAAPI cuMemFreeHost(void *p)
{
    SIM_BEGIN;
    sim_alloc *a = sim_alloc_find((uintptr_t)p);
    if (!a || a->base != (uintptr_t)p || a->kind != SIM_ALLOC_HOST) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_capture_check_unsafe());
    sim_race_host_waits_all(); /* like cuMemFree, it waits for the device */
    sim_host_free(a);
    return CUDA_SUCCESS;
}

/* Pinned memory of cuMemHostAlloc, interior pointers included; host pool
 * blocks are not (measured: CUDA_ERROR_INVALID_VALUE). */
SIM_API CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int flags)
{
    SIM_BEGIN;
    if (!pdptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    const sim_alloc *a = sim_alloc_find((uintptr_t)p);
    if (!a || a->kind != SIM_ALLOC_HOST) return CUDA_ERROR_INVALID_VALUE;
    *pdptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

/* DEVICEMAP is always reported, as unified addressing maps all pinned memory;
 * native managed memory answers DEVICEMAP alone (measured), pool blocks
 * CUDA_ERROR_INVALID_VALUE. */
SIM_API CUresult CUDAAPI cuMemHostGetFlags(unsigned int *flags, void *p)
{
    SIM_BEGIN;
    if (!flags) return CUDA_ERROR_INVALID_VALUE;
    const sim_alloc *a = sim_alloc_find((uintptr_t)p);
    if (!a || (a->kind != SIM_ALLOC_HOST && a->kind != SIM_ALLOC_MANAGED)) return CUDA_ERROR_INVALID_VALUE;
    *flags = (a->kind == SIM_ALLOC_HOST ? a->flags : 0) | CU_MEMHOSTALLOC_DEVICEMAP;
    return CUDA_SUCCESS;
}

/* ---- managed memory ----------------------------------------------------------------- */

SIM_API CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags)
{
    SIM_BEGIN;
    uintptr_t p;
    if (!dptr || bytes == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
        return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(host_register(bytes, SIM_ALLOC_MANAGED, flags, &p));
    *dptr = (CUdeviceptr)p;
    return CUDA_SUCCESS;
}

/* The managed allocation holding all of [ptr, ptr + count), or NULL. */
static sim_alloc *managed_range(CUdeviceptr ptr, size_t count)
{
    sim_alloc *a = sim_alloc_find((uintptr_t)ptr);
    if (!a || count == 0 || !sim_alloc_is_managed(a) || !sim_range_is_device((uintptr_t)ptr, count)) return NULL;
    return a;
}

/* A location advice or a prefetch may name: a device, or the host. */
static CUresult location_check(const CUmemLocation *loc)
{
    switch (loc->type) {
    case CU_MEM_LOCATION_TYPE_DEVICE: return sim_device_check(loc->id);
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT: return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA: return loc->id == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; /* one node */
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUmemLocation device_location(CUdevice dev)
{
    CUmemLocation loc = { CU_MEM_LOCATION_TYPE_DEVICE, dev };
    if (dev == CU_DEVICE_CPU) loc = (CUmemLocation){ CU_MEM_LOCATION_TYPE_HOST, 0 };
    return loc;
}

static CUresult advise(CUdeviceptr ptr, size_t count, CUmem_advise advice, CUmemLocation loc)
{
    SIM_BEGIN;
    sim_alloc *a = managed_range(ptr, count);
    if (!a) return CUDA_ERROR_INVALID_VALUE;
    if (a->kind != SIM_ALLOC_MANAGED) return CUDA_ERROR_NOT_SUPPORTED; /* a managed pool's block (measured) */
    unsigned bit = 0;
    switch (advice) {
    case CU_MEM_ADVISE_SET_READ_MOSTLY: a->read_mostly = true; return CUDA_SUCCESS;
    case CU_MEM_ADVISE_UNSET_READ_MOSTLY: a->read_mostly = false; return CUDA_SUCCESS;
    case CU_MEM_ADVISE_SET_PREFERRED_LOCATION:
        SIM_CHECK(location_check(&loc));
        a->preferred = loc;
        return CUDA_SUCCESS;
    case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION: a->preferred = (CUmemLocation){ 0 }; return CUDA_SUCCESS;
    case CU_MEM_ADVISE_SET_ACCESSED_BY:
    case CU_MEM_ADVISE_UNSET_ACCESSED_BY:
        SIM_CHECK(location_check(&loc));
        bit = loc.type == CU_MEM_LOCATION_TYPE_DEVICE ? 1u << loc.id : 1u << SIM_MAX_DEVICES;
        if (advice == CU_MEM_ADVISE_SET_ACCESSED_BY)
            a->accessed_by |= bit;
        else
            a->accessed_by &= ~bit;
        return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}

SIM_API CUresult CUDAAPI cuMemAdvise_v2(CUdeviceptr p, size_t n, CUmem_advise advice, CUmemLocation loc)
{
    return advise(p, n, advice, loc);
}

/* The CUDA 8.0 form names a device, or CU_DEVICE_CPU for the host. */
SIM_API CUresult CUDAAPI cuMemAdvise(CUdeviceptr p, size_t n, CUmem_advise advice, CUdevice dev)
{
    return advise(p, n, advice, device_location(dev));
}

/* Prefetches are not modelled inside captures: they fail and invalidate the capture. */
static CUresult prefetch(CUdeviceptr ptr, size_t count, CUmemLocation loc, unsigned flags, CUstream h, bool ptds)
{
    SIM_BEGIN;
    CUstream s;
    bool capture;
    sim_alloc *a = managed_range(ptr, count);
    if (!a || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(location_check(&loc));
    SIM_CHECK(sim_stream_resolve(h, ptds, &s));
    SIM_CHECK(sim_capture_check_enqueue(s, &capture));
    if (capture) {
        sim_capture_invalidate(s);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    sim_race_op_begin(s, "cuMemPrefetchAsync");
    sim_race_access((uintptr_t)ptr, count, false);
    sim_race_op_end();
    a->prefetched = loc;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned flags, CUstream s)
{
    return prefetch(p, n, loc, flags, s, false);
}

SIM_API CUresult CUDAAPI cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned flags,
                                                    CUstream s)
{
    return prefetch(p, n, loc, flags, s, true);
}

SIM_API CUresult CUDAAPI cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice dev, CUstream s)
{
    return prefetch(p, n, device_location(dev), 0, s, false);
}

SIM_API CUresult CUDAAPI cuMemPrefetchAsync_ptsz(CUdeviceptr p, size_t n, CUdevice dev, CUstream s)
{
    return prefetch(p, n, device_location(dev), 0, s, true);
}

/* Native managed memory only, from its start, for all of it (length 0 or its
 * size); SINGLE needs a stream of its own.  The association itself is not
 * modelled: every stream may touch managed memory here. */
static CUresult attach(CUstream h, CUdeviceptr ptr, size_t length, unsigned flags, bool ptds)
{
    SIM_BEGIN;
    CUstream s;
    bool capture;
    const sim_alloc *a = sim_alloc_find((uintptr_t)ptr);
    if (!a || a->kind != SIM_ALLOC_MANAGED || a->base != (uintptr_t)ptr || (length != 0 && length != a->size))
        return CUDA_ERROR_INVALID_VALUE;
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST && flags != CU_MEM_ATTACH_SINGLE)
        return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_stream_resolve(h, ptds, &s));
    if (flags == CU_MEM_ATTACH_SINGLE && s->kind != SIM_STREAM_CREATED) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_capture_check_enqueue(s, &capture));
    if (capture) {
        sim_capture_invalidate(s);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuStreamAttachMemAsync(CUstream s, CUdeviceptr p, size_t n, unsigned int flags)
{
    return attach(s, p, n, flags, false);
}

SIM_API CUresult CUDAAPI cuStreamAttachMemAsync_ptsz(CUstream s, CUdeviceptr p, size_t n, unsigned int flags)
{
    return attach(s, p, n, flags, true);
}

/* ---- range attributes --------------------------------------------------------------- */

/* A location as the int attributes give it: a device, CU_DEVICE_CPU, or CU_DEVICE_INVALID for none. */
static int location_as_device(const CUmemLocation *loc)
{
    switch (loc->type) {
    case CU_MEM_LOCATION_TYPE_DEVICE: return loc->id;
    case CU_MEM_LOCATION_TYPE_INVALID: return CU_DEVICE_INVALID;
    default: return CU_DEVICE_CPU;
    }
}

static CUresult range_attribute(void *data, size_t size, CUmem_range_attribute attr, const sim_alloc *a)
{
    if (!data) return CUDA_ERROR_INVALID_VALUE;
    int value;
    switch (attr) {
    case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY: value = a->read_mostly; break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION: value = location_as_device(&a->preferred); break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION: value = location_as_device(&a->prefetched); break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID: value = a->preferred.id; break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID: value = a->prefetched.id; break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE:
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE:
        if (size != sizeof(CUmemLocationType)) return CUDA_ERROR_INVALID_VALUE;
        *(CUmemLocationType *)data = attr == CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE ? a->preferred.type
                                                                                          : a->prefetched.type;
        return CUDA_SUCCESS;
    case CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY: {
        /* the devices with the advice, then CU_DEVICE_INVALID in the rest */
        if (size == 0 || size % sizeof(int)) return CUDA_ERROR_INVALID_VALUE;
        int *out = data;
        size_t n = size / sizeof(int), k = 0;
        for (int d = 0; d < SIM_MAX_DEVICES && k < n; d++)
            if (a->accessed_by & (1u << d)) out[k++] = d;
        if (k < n && (a->accessed_by & (1u << SIM_MAX_DEVICES))) out[k++] = CU_DEVICE_CPU;
        while (k < n) out[k++] = CU_DEVICE_INVALID;
        return CUDA_SUCCESS;
    }
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    if (size != sizeof(int)) return CUDA_ERROR_INVALID_VALUE;
    *(int *)data = value;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuMemRangeGetAttribute(void *data, size_t size, CUmem_range_attribute attr, CUdeviceptr ptr,
                                                size_t count)
{
    SIM_BEGIN;
    const sim_alloc *a = managed_range(ptr, count);
    if (!a) return CUDA_ERROR_INVALID_VALUE;
    return range_attribute(data, size, attr, a);
}

SIM_API CUresult CUDAAPI cuMemRangeGetAttributes(void **data, size_t *sizes, CUmem_range_attribute *attrs, size_t n,
                                                 CUdeviceptr ptr, size_t count)
{
    SIM_BEGIN;
    if (!data || !sizes || !attrs || n == 0) return CUDA_ERROR_INVALID_VALUE;
    const sim_alloc *a = managed_range(ptr, count);
    if (!a) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < n; i++) SIM_CHECK(range_attribute(data[i], sizes[i], attrs[i], a));
    return CUDA_SUCCESS;
}
