/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The few calls on the real driver every layer makes around its own work
 * (context_push.h): a context made current for a moment, and the relaxed
 * capture mode around cupool's own driver calls.
 */
#include "context_push.h"
#include "capture_gate.h"
#include "real_driver.h"

int cupool_enter_context(CUcontext ctx)
{
    CUcontext current = NULL;
    real_cuCtxGetCurrent(&current);
    if (current == ctx) return 0;
    return real_cuCtxPushCurrent_v2(ctx) == CUDA_SUCCESS;
}

void cupool_leave_context(int pushed)
{
    CUcontext popped;
    if (pushed) real_cuCtxPopCurrent_v2(&popped);
}

/* Every capture starts in one of cupool's BeginCapture shims, so while none
 * is in progress the thread's capture mode cannot matter and the two driver
 * calls are skipped (CUPOOL_NO_EXCHANGE marks that). */
#define CUPOOL_NO_EXCHANGE ((CUstreamCaptureMode)-1)

CUstreamCaptureMode cupool_relaxed_begin(void)
{
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (!cupool_capturing() || !real_cuThreadExchangeStreamCaptureMode ||
        real_cuThreadExchangeStreamCaptureMode(&mode) != CUDA_SUCCESS)
        return CUPOOL_NO_EXCHANGE;
    return mode;
}

void cupool_relaxed_end(CUstreamCaptureMode previous)
{
    if (previous != CUPOOL_NO_EXCHANGE) real_cuThreadExchangeStreamCaptureMode(&previous);
}
