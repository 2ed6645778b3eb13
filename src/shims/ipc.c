/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Legacy IPC shims: cuIpcGetMemHandle, cuIpcOpenMemHandle and
 * cuIpcCloseMemHandle.  A block of cupool's exportable pools gets a handle
 * cupool makes, and a handle cupool made is opened through the exporting
 * process's socket (engine/ipc.c); every other handle and pointer (memory
 * cupool passed through, handles the driver made) goes to the driver
 * untouched, so processes without cupool can still open them.
 */
#include "../engine/engine.h"

#include <string.h>

/* The block that dptr points into, if cupool pooled it.  A handle is of
 * the whole allocation, as the driver's are, so an interior pointer finds
 * its block through the driver's range query. */
static int pooled_block(CUdeviceptr dptr, cupool_origin_t *o)
{
    if (!dptr || !cupool_active()) return -1;
    if (cupool_origin_find(dptr, o) == 0) return 0;
    CUdeviceptr start = 0;
    if (real_cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, dptr) != CUDA_SUCCESS || !start ||
        start == dptr)
        return -1;
    return cupool_origin_find(start, o);
}

CUPOOL_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    CUPOOL_SHIM_BEGIN(call, cuIpcGetMemHandle);
    call.ptr = dptr;
    cupool_origin_t o;
    if (!pHandle || pooled_block(dptr, &o) != 0) return cupool_call_end(&call, real_cuIpcGetMemHandle(pHandle, dptr));
    call.route = CUPOOL_ROUTE_POOL;
    call.size = o.size;
    call.device = cupool_context_ordinal(o.owner);
    if (cupool_context_exportable(o.owner)) return cupool_call_end(&call, cupool_ipc_export(pHandle, &o));
    /* A pool that cannot be exported (CUPOOL_IPC=0, CUPOOL_POLICY=default,
     * or a driver without exportable pools): the driver's own answer. */
    CUresult r = real_cuIpcGetMemHandle(pHandle, dptr);
    if (r != CUDA_SUCCESS)
        cupool_message_once(CUPOOL_MSG_WARN,
                            "cuIpcGetMemHandle fails on pooled memory that cannot be exported (%s); run with "
                            "CUPOOL_IPC=1 and CUPOOL_POLICY=dedicated or split, or with CUPOOL_POLICY=off",
                            cupool_result_name(r));
    return cupool_call_end(&call, r);
}

static CUresult open_handle(CUresult (*real)(CUdeviceptr *, CUipcMemHandle, unsigned int), CUdeviceptr *pdptr,
                            CUipcMemHandle handle, unsigned int flags, cupool_call_t *call)
{
    /* With CUPOOL_IPC=0 the driver answers every handle, cupool's too. */
    if (!cupool_ipc_is_ours(&handle) || !cupool_option(CUPOOL_OPT_IPC)) return real(pdptr, handle, flags);
    call->route = CUPOOL_ROUTE_POOL;
    size_t size = 0;
    CUresult r = cupool_ipc_open(pdptr, &handle, flags, &size, &call->device);
    call->size = size;
    if (r == CUDA_SUCCESS) call->ptr = *pdptr;
    return r;
}

CUPOOL_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    CUPOOL_SHIM_BEGIN(call, cuIpcOpenMemHandle);
    return cupool_call_end(&call, open_handle(real_cuIpcOpenMemHandle, pdptr, handle, Flags, &call));
}

CUPOOL_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    CUPOOL_SHIM_BEGIN(call, cuIpcOpenMemHandle_v2);
    return cupool_call_end(&call, open_handle(real_cuIpcOpenMemHandle_v2, pdptr, handle, Flags, &call));
}

CUPOOL_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    CUPOOL_SHIM_BEGIN(call, cuIpcCloseMemHandle);
    call.ptr = dptr;
    CUresult r;
    if (cupool_ipc_close(dptr, &r)) {
        call.route = CUPOOL_ROUTE_POOL;
        return cupool_call_end(&call, r);
    }
    return cupool_call_end(&call, real_cuIpcCloseMemHandle(dptr));
}
