/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Stream and capture shims.  cupool needs to know of every stream the
 * program creates (`deferred`'s fences wait for the non-blocking ones;
 * the blocking ones share the legacy stream's order, src/engine/order.c),
 * of a stream destroyed (the order stream leaves it first), and of every
 * stream capture in progress (during one, neither the legacy stream nor a
 * context-wide synchronization may be used, and cupool's own driver calls
 * run in relaxed capture mode).
 */
#include "../engine/engine.h"

/* ---- shims: streams ------------------------------------------------------ */

CUPOOL_EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    CUPOOL_SHIM_BEGIN(call, cuStreamCreate);
    CUresult r = real_cuStreamCreate(phStream, Flags);
    if (r == CUDA_SUCCESS) cupool_track_stream(*phStream, Flags);
    call.stream = r == CUDA_SUCCESS ? *phStream : NULL;
    return cupool_call_end(&call, r);
}

CUPOOL_EXPORT CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    CUPOOL_SHIM_BEGIN(call, cuStreamCreateWithPriority);
    CUresult r = real_cuStreamCreateWithPriority(phStream, flags, priority);
    if (r == CUDA_SUCCESS) cupool_track_stream(*phStream, flags);
    call.stream = r == CUDA_SUCCESS ? *phStream : NULL;
    return cupool_call_end(&call, r);
}

/* A stream of a green context: its work runs on the device like any
 * other stream's, and it is tracked in the calling thread's current
 * context, as cuStreamCreate's. */
CUPOOL_EXPORT CUresult cuGreenCtxStreamCreate(CUstream *phStream, CUgreenCtx greenCtx, unsigned int flags, int priority)
{
    CUPOOL_SHIM_BEGIN(call, cuGreenCtxStreamCreate);
    CUresult r = real_cuGreenCtxStreamCreate(phStream, greenCtx, flags, priority);
    if (r == CUDA_SUCCESS) cupool_track_stream(*phStream, flags);
    call.stream = r == CUDA_SUCCESS ? *phStream : NULL;
    return cupool_call_end(&call, r);
}

CUPOOL_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream)
{
    CUPOOL_SHIM_BEGIN(call, cuStreamDestroy_v2);
    call.stream = hStream;
    if (hStream && cupool_active()) {
        cupool_order_stream_destroyed(hStream);
        cupool_forget_stream(hStream);
    }
    CUresult r = real_cuStreamDestroy_v2(hStream);
    /* Destroyed while capturing: that capture is over (engine/capture.c). */
    if (r == CUDA_SUCCESS && hStream && atomic_load(&cupool_hot.captures) > 0) cupool_capture_take(hStream, NULL);
    return cupool_call_end(&call, r);
}

/* ---- shims: capture ------------------------------------------------------ */

/* Begins a capture on stream and counts it, inside the capture gate. */
#define GATED_BEGIN(stream, begin_call) (cupool_capture_begin_enter(), cupool_capture_begin_done(stream, begin_call))

typedef CUresult is_capturing_fn(CUstream, CUstreamCaptureStatus *);

static int capturing(is_capturing_fn *is_capturing, CUstream stream)
{
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    return is_capturing && is_capturing(stream, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

CUPOOL_EXPORT CUresult cuStreamBeginCapture(CUstream hStream)
{
    CUPOOL_SHIM_BEGIN(call, cuStreamBeginCapture);
    call.stream = hStream;
    return cupool_call_end(&call, GATED_BEGIN(hStream, real_cuStreamBeginCapture(hStream)));
}

CUPOOL_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream hStream)
{
    CUPOOL_SHIM_BEGIN(call, cuStreamBeginCapture_ptsz);
    call.stream = hStream;
    return cupool_call_end(&call, GATED_BEGIN(hStream, real_cuStreamBeginCapture_ptsz(hStream)));
}

CUPOOL_EXPORT CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    CUPOOL_SHIM_BEGIN(call, cuStreamBeginCapture_v2);
    call.stream = hStream;
    return cupool_call_end(&call, GATED_BEGIN(hStream, real_cuStreamBeginCapture_v2(hStream, mode)));
}

CUPOOL_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    CUPOOL_SHIM_BEGIN(call, cuStreamBeginCapture_v2_ptsz);
    call.stream = hStream;
    return cupool_call_end(&call, GATED_BEGIN(hStream, real_cuStreamBeginCapture_v2_ptsz(hStream, mode)));
}

CUPOOL_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                                   const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                                   CUstreamCaptureMode mode)
{
    CUPOOL_SHIM_BEGIN(call, cuStreamBeginCaptureToGraph);
    call.stream = hStream;
    return cupool_call_end(&call, GATED_BEGIN(hStream, real_cuStreamBeginCaptureToGraph(hStream, hGraph, dependencies,
                                                                               dependencyData, numDependencies, mode)));
}

CUPOOL_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
                                                        const CUgraphNode *dependencies,
                                                        const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                                        CUstreamCaptureMode mode)
{
    CUPOOL_SHIM_BEGIN(call, cuStreamBeginCaptureToGraph_ptsz);
    call.stream = hStream;
    return cupool_call_end(&call, GATED_BEGIN(hStream, real_cuStreamBeginCaptureToGraph_ptsz(
                                      hStream, hGraph, dependencies, dependencyData, numDependencies, mode)));
}

/* A capture counts until the driver says it has ended: an end that fails
 * (a NULL graph pointer, the wrong thread) leaves it going.  The query uses
 * the same stream flavour as the end, so stream 0 of a per-thread build
 * means its per-thread stream. */
static CUresult end_capture(CUresult (*end)(CUstream, CUgraph *), is_capturing_fn *is_capturing, CUstream stream,
                            CUgraph *graph)
{
    int was = capturing(is_capturing, stream);
    CUresult r = end(stream, graph);
    /* Uncounted once, whether or not the list held it. */
    if (was && !capturing(is_capturing, stream) && !cupool_capture_take(stream, NULL)) cupool_capture_uncounted();
    return r;
}

CUPOOL_EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    CUPOOL_SHIM_BEGIN(call, cuStreamEndCapture);
    call.stream = hStream;
    return cupool_call_end(&call, end_capture(real_cuStreamEndCapture, real_cuStreamIsCapturing, hStream, phGraph));
}

CUPOOL_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    CUPOOL_SHIM_BEGIN(call, cuStreamEndCapture_ptsz);
    call.stream = hStream;
    return cupool_call_end(&call, end_capture(real_cuStreamEndCapture_ptsz, real_cuStreamIsCapturing_ptsz, hStream, phGraph));
}
