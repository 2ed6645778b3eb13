/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The few calls on the real driver every layer makes around its own work
 * (context_push.c): making a context current for a moment, and the relaxed
 * capture mode around cupool's own driver calls while a capture is in
 * progress.
 */
#ifndef CUPOOL_BASE_CONTEXT_PUSH_H
#define CUPOOL_BASE_CONTEXT_PUSH_H

#include "macros.h"

/* Makes ctx current for the caller if it is not; returns 1 when it pushed. */
int cupool_enter_context(CUcontext ctx);
void cupool_leave_context(int pushed);
/* Capture-safe bracket around cupool's own driver calls. */
CUstreamCaptureMode cupool_relaxed_begin(void);
void cupool_relaxed_end(CUstreamCaptureMode previous);

#endif
