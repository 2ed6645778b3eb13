/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Context and peer-access shims.  A second context on a device, or peer
 * access, lets memory be touched by work outside the context that
 * allocated it, which moves the contexts concerned to `sync`; a context the
 * program destroys, or a primary context reset or released for the last
 * time, takes cupool's state for it along (its blocks go back to their
 * pools, as natively its memory dies with it).  Each shim calls the real
 * driver and tells the engine's registry (engine/contexts.c,
 * engine/lifecycle.c, engine/devices.c) what happened.
 */
#include "../engine/engine.h"

static CUresult after_create(CUresult result, CUcontext *pctx)
{
    if (result == CUDA_SUCCESS && pctx && cupool_active()) cupool_context_of(*pctx);
    return result;
}

CUPOOL_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CUPOOL_SHIM_BEGIN(call, cuCtxCreate_v2);
    call.device = dev;
    return cupool_call_end(&call, after_create(real_cuCtxCreate_v2(pctx, flags, dev), pctx));
}

CUPOOL_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                      unsigned int flags, CUdevice dev)
{
    CUPOOL_SHIM_BEGIN(call, cuCtxCreate_v3);
    call.device = dev;
    return cupool_call_end(&call, after_create(real_cuCtxCreate_v3(pctx, paramsArray, numParams, flags, dev), pctx));
}

CUPOOL_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev)
{
    CUPOOL_SHIM_BEGIN(call, cuCtxCreate_v4);
    call.device = dev;
    return cupool_call_end(&call, after_create(real_cuCtxCreate_v4(pctx, params, flags, dev), pctx));
}

CUPOOL_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUPOOL_SHIM_BEGIN(call, cuDevicePrimaryCtxRetain);
    call.device = dev;
    CUresult r = real_cuDevicePrimaryCtxRetain(pctx, dev);
    if (r == CUDA_SUCCESS && pctx && cupool_active()) {
        /* Registering needs the context current: borrow it for a moment. */
        int pushed = cupool_enter_context(*pctx);
        cupool_context_t *c = cupool_context_of(*pctx);
        if (c) cupool_context_set_primary(c);
        cupool_leave_context(pushed);
    }
    return cupool_call_end(&call, r);
}

CUPOOL_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    CUPOOL_SHIM_BEGIN(call, cuCtxDestroy_v2);
    if (ctx && cupool_active()) cupool_context_destroying(ctx);
    CUresult r = real_cuCtxDestroy_v2(ctx);
    if (r == CUDA_SUCCESS && cupool_active()) cupool_captures_context_gone(ctx);
    return cupool_call_end(&call, r);
}

/* The device's primary context while it is active, else NULL; looked up
 * only while a capture is in progress (a capture begun in it ends with it).
 * The retain cannot create it, being active, and the release gives back. */
static CUcontext primary_if_capturing(CUdevice dev)
{
    unsigned flags;
    int active = 0;
    CUcontext ctx = NULL;
    if (atomic_load(&cupool_hot.captures) == 0 ||
        real_cuDevicePrimaryCtxGetState(dev, &flags, &active) != CUDA_SUCCESS || !active ||
        real_cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS)
        return NULL;
    real_cuDevicePrimaryCtxRelease_v2(dev);
    return ctx;
}

CUPOOL_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    CUPOOL_SHIM_BEGIN(call, cuDevicePrimaryCtxReset_v2);
    call.device = dev;
    if (cupool_active()) cupool_primary_resetting(dev);
    CUcontext primary = cupool_active() ? primary_if_capturing(dev) : NULL;
    CUresult r = real_cuDevicePrimaryCtxReset_v2(dev);
    if (r == CUDA_SUCCESS) cupool_captures_context_gone(primary);
    return cupool_call_end(&call, r);
}

CUPOOL_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    CUPOOL_SHIM_BEGIN(call, cuDevicePrimaryCtxRelease_v2);
    call.device = dev;
    /* This release may be the last.  The ready blocks go back first, on the
     * context's own stream, which follows their last uses: once the context
     * is gone they could only go back from another context's stream, which
     * compute-sanitizer does not order after those uses. */
    if (cupool_active()) cupool_primary_releasing(dev);
    CUcontext primary = cupool_active() ? primary_if_capturing(dev) : NULL;
    CUresult r = real_cuDevicePrimaryCtxRelease_v2(dev);
    unsigned flags;
    int active = 1;
    if (r == CUDA_SUCCESS && cupool_active() && real_cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS &&
        !active) {
        cupool_captures_context_gone(primary);
        cupool_primary_released(dev);
    }
    return cupool_call_end(&call, r);
}

/* ---- shims: peer access -------------------------------------------------- */

CUPOOL_EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
    CUPOOL_SHIM_BEGIN(call, cuCtxEnablePeerAccess);
    CUresult r = real_cuCtxEnablePeerAccess(peerContext, Flags);
    if (r == CUDA_SUCCESS && cupool_active()) cupool_peer_access(peerContext, 1);
    return cupool_call_end(&call, r);
}

CUPOOL_EXPORT CUresult cuCtxDisablePeerAccess(CUcontext peerContext)
{
    CUPOOL_SHIM_BEGIN(call, cuCtxDisablePeerAccess);
    CUresult r = real_cuCtxDisablePeerAccess(peerContext);
    if (r == CUDA_SUCCESS && cupool_active()) cupool_peer_access(peerContext, 0);
    return cupool_call_end(&call, r);
}

