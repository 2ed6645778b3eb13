/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The pinned host and managed memory shims: cuMemAllocHost, cuMemHostAlloc,
 * cuMemFreeHost and cuMemAllocManaged (whose cuMemFree comes through
 * shims/memory.c) served by the kept store (engine/kept_store.c), and the
 * managed-memory calls after which a block is no longer kept
 * (cuMemAdvise, cuStreamAttachMemAsync), passed to the driver;
 * cuStreamAttachMemAsync gives its stream work, which the work tracker
 * hears of first (shims/work.c).
 */
#include "../engine/engine.h"

static CUresult driver_alloc_host(uintptr_t *ptr, size_t size, unsigned flags)
{
    void *p = NULL;
    (void)flags;
    CUresult r = real_cuMemAllocHost_v2(&p, size);
    if (r == CUDA_SUCCESS) *ptr = (uintptr_t)p;
    return r;
}

static CUresult driver_host_alloc(uintptr_t *ptr, size_t size, unsigned flags)
{
    void *p = NULL;
    CUresult r = real_cuMemHostAlloc(&p, size, flags);
    if (r == CUDA_SUCCESS) *ptr = (uintptr_t)p;
    return r;
}

static CUresult driver_alloc_managed(uintptr_t *ptr, size_t size, unsigned flags)
{
    CUdeviceptr p = 0;
    CUresult r = real_cuMemAllocManaged(&p, size, flags);
    if (r == CUDA_SUCCESS) *ptr = (uintptr_t)p;
    return r;
}

static const struct {
    cupool_kept_driver_alloc_fn *driver;
    int log_kind;
} kinds[CUPOOL_KEPT_KINDS] = {
    [CUPOOL_KEPT_ALLOC_HOST] = {driver_alloc_host, CUPOOL_KIND_HOST},
    [CUPOOL_KEPT_HOST_ALLOC] = {driver_host_alloc, CUPOOL_KIND_HOST},
    [CUPOOL_KEPT_MANAGED] = {driver_alloc_managed, CUPOOL_KIND_MANAGED},
};

/* The allocation shims' common part: CUDA_ERROR_NOT_FOUND when the driver
 * is to be asked directly.  A NULL out pointer or size 0 gets the
 * driver's own answer, and so does an allocation while a stream capture is
 * in progress (in the global capture mode the driver refuses it and
 * invalidates the capture, which a kept block would hide). */
static CUresult allocate(cupool_call_t *call, enum cupool_kept_kind kind, uintptr_t *ptr, int valid, size_t size,
                         unsigned flags)
{
    call->kind = kinds[kind].log_kind;
    call->size = size;
    call->flags = flags;
    call->route = CUPOOL_ROUTE_NATIVE;
    return valid && size && !cupool_capturing() && cupool_kept_serves(kind)
               ? cupool_kept_alloc(kind, kinds[kind].driver, ptr, size, flags, &call->route)
               : CUDA_ERROR_NOT_FOUND;
}

CUPOOL_EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    CUPOOL_SHIM_BEGIN(call, cuMemAllocHost_v2);
    uintptr_t p = 0;
    CUresult r = allocate(&call, CUPOOL_KEPT_ALLOC_HOST, &p, pp != NULL, bytesize, 0);
    if (r == CUDA_ERROR_NOT_FOUND) r = real_cuMemAllocHost_v2(pp, bytesize);
    else if (r == CUDA_SUCCESS) *pp = (void *)p;
    if (r == CUDA_SUCCESS) call.ptr = (CUdeviceptr)(uintptr_t)*pp;
    return cupool_call_end(&call, r);
}

CUPOOL_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    CUPOOL_SHIM_BEGIN(call, cuMemHostAlloc);
    uintptr_t p = 0;
    CUresult r = allocate(&call, CUPOOL_KEPT_HOST_ALLOC, &p, pp != NULL, bytesize, Flags);
    if (r == CUDA_ERROR_NOT_FOUND) r = real_cuMemHostAlloc(pp, bytesize, Flags);
    else if (r == CUDA_SUCCESS) *pp = (void *)p;
    if (r == CUDA_SUCCESS) call.ptr = (CUdeviceptr)(uintptr_t)*pp;
    return cupool_call_end(&call, r);
}

CUPOOL_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    CUPOOL_SHIM_BEGIN(call, cuMemAllocManaged);
    uintptr_t p = 0;
    CUresult r = allocate(&call, CUPOOL_KEPT_MANAGED, &p, dptr != NULL, bytesize, flags);
    if (r == CUDA_ERROR_NOT_FOUND) r = real_cuMemAllocManaged(dptr, bytesize, flags);
    else if (r == CUDA_SUCCESS) *dptr = (CUdeviceptr)p;
    if (r == CUDA_SUCCESS) call.ptr = *dptr;
    return cupool_call_end(&call, r);
}

CUPOOL_EXPORT CUresult cuMemFreeHost(void *p)
{
    CUPOOL_SHIM_BEGIN(call, cuMemFreeHost);
    call.kind = CUPOOL_KIND_HOST;
    call.ptr = (CUdeviceptr)(uintptr_t)p;
    CUresult r;
    if (!cupool_kept_free(CUPOOL_KEPT_CLASS_HOST, (uintptr_t)p, &call.size, &call.flags, &call.route, &r)) {
        call.route = CUPOOL_ROUTE_NATIVE;
        r = real_cuMemFreeHost(p);
    }
    return cupool_call_end(&call, r);
}

/* ---- what a managed block keeps from one allocation to the next ------------ */

static CUresult touched(CUresult r, CUdeviceptr ptr, size_t size)
{
    if (r == CUDA_SUCCESS && cupool_active()) cupool_kept_mark_touched((uintptr_t)ptr, size);
    return r;
}

CUPOOL_EXPORT CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device)
{
    CUPOOL_SHIM_BEGIN(call, cuMemAdvise);
    call.ptr = devPtr;
    call.size = count;
    return cupool_call_end(&call, touched(real_cuMemAdvise(devPtr, count, advice, device), devPtr, count));
}

CUPOOL_EXPORT CUresult cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUmemLocation location)
{
    CUPOOL_SHIM_BEGIN(call, cuMemAdvise_v2);
    call.ptr = devPtr;
    call.size = count;
    return cupool_call_end(&call, touched(real_cuMemAdvise_v2(devPtr, count, advice, location), devPtr, count));
}

CUPOOL_EXPORT CUresult cuStreamAttachMemAsync(CUstream hStream, CUdeviceptr dptr, size_t length, unsigned int flags)
{
    CUPOOL_SHIM_BEGIN(call, cuStreamAttachMemAsync);
    cupool_work_t work = cupool_work_begin(hStream, 0);
    call.ptr = dptr;
    call.stream = hStream;
    CUresult r = real_cuStreamAttachMemAsync(hStream, dptr, length, flags);
    cupool_work_end(&work);
    return cupool_call_end(&call, touched(r, dptr, length));
}

CUPOOL_EXPORT CUresult cuStreamAttachMemAsync_ptsz(CUstream hStream, CUdeviceptr dptr, size_t length,
                                                   unsigned int flags)
{
    CUPOOL_SHIM_BEGIN(call, cuStreamAttachMemAsync_ptsz);
    cupool_work_t work = cupool_work_begin(hStream, 1);
    call.ptr = dptr;
    call.stream = hStream;
    CUresult r = real_cuStreamAttachMemAsync_ptsz(hStream, dptr, length, flags);
    cupool_work_end(&work);
    return cupool_call_end(&call, touched(r, dptr, length));
}
