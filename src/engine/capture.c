/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The stream captures in progress, as the engine counts them
 * (cupool_hot.captures): during one, neither the legacy stream nor a
 * context-wide synchronization may be used, and cupool's own driver calls
 * run in relaxed capture mode.  The capture gate orders a capture's
 * beginning against cupool's fences and legacy-stream calls; the list of
 * the streams captures began on lets a destroyed stream or context end its
 * capture.  The capture shims (shims/stream.c) call in here.
 */
#include "state.h"

#include <stdlib.h>

/* ---- captures (counted in cupool_hot.captures) ---------------------------- */

/* A fence of free/deferred_fence.c (cuCtxRecordEvent, or events on the legacy stream)
 * recorded while a capture is in progress would invalidate it: the driver
 * fails the capture, and the program's graph is lost.  The recorder checks
 * the count under this lock, and a capture begins and is counted under it,
 * so no capture can begin between the check and the record. */
static pthread_mutex_t capture_gate = PTHREAD_MUTEX_INITIALIZER;

void cupool_capture_gate_enter(void)
{
    pthread_mutex_lock(&capture_gate);
}

void cupool_capture_gate_leave(void)
{
    pthread_mutex_unlock(&capture_gate);
}

const pthread_mutex_t *cupool_capture_gate_lock(void)
{
    return &capture_gate;
}

/* The streams the captures in progress began on, with their contexts
 * (capture_gate): a program may destroy such a stream, or its context,
 * without ending the capture, which then no longer counts; otherwise every
 * later free would be held for it, for good. */
typedef struct capture_origin {
    CUstream stream;
    CUcontext ctx;
} capture_origin_t;
static capture_origin_t *capture_origins;
static int ncapture_origins, capture_origins_cap;

static void add_origin_locked(CUstream stream)
{
    if (ncapture_origins == capture_origins_cap) {
        int cap = capture_origins_cap ? 2 * capture_origins_cap : 8;
        capture_origin_t *grown = realloc(capture_origins, (size_t)cap * sizeof *grown);
        if (!grown) return; /* that stream's destroy then leaves the count as it is */
        capture_origins = grown;
        capture_origins_cap = cap;
    }
    /* A capture on the per-thread stream (NULL in a per-thread build, or
     * CU_STREAM_PER_THREAD) is in the current context.  Asking the driver
     * about NULL would ask about the legacy stream, and on the H200 even
     * that query invalidates the capture of a blocking stream. */
    CUcontext ctx = NULL;
    if (stream == NULL || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD)
        real_cuCtxGetCurrent(&ctx);
    else if (real_cuStreamGetCtx)
        real_cuStreamGetCtx(stream, &ctx);
    capture_origins[ncapture_origins++] = (capture_origin_t){stream, ctx};
}

/* What runs when the count of captures in progress drops to zero: the
 * registry's cupool_captures_ended, which it registers at start-up (it sits
 * above this file: it uses the gate). */
static _Atomic(cupool_captures_ended_fn *) captures_ended;

void cupool_capture_on_end(cupool_captures_ended_fn *fn)
{
    atomic_store(&captures_ended, fn);
}

static void ended(void)
{
    cupool_captures_ended_fn *fn = atomic_load(&captures_ended);
    if (fn) fn();
}

void cupool_capture_uncounted(void)
{
    if (atomic_fetch_sub(&cupool_hot.captures, 1) == 1) ended();
}

/* Takes off the list the captures begun on stream (any context), or in ctx
 * (any stream), and uncounts them; returns how many there were. */
int cupool_capture_take(CUstream stream, CUcontext ctx)
{
    int taken = 0;
    cupool_capture_gate_enter();
    for (int i = 0; i < ncapture_origins;) {
        capture_origin_t *o = &capture_origins[i];
        if (ctx ? o->ctx != ctx : o->stream != stream) {
            i++;
            continue;
        }
        *o = capture_origins[--ncapture_origins];
        taken++;
        if (!ctx) break; /* one capture a stream */
    }
    cupool_capture_gate_leave();
    for (int i = 0; i < taken; i++) cupool_capture_uncounted();
    return taken;
}

void cupool_captures_context_gone(CUcontext ctx)
{
    if (ctx && atomic_load(&cupool_hot.captures) > 0) cupool_capture_take(NULL, ctx);
}

/* How long a capture waits for cupool's legacy-stream calls at most: a
 * call made from inside another (a tool's callback that allocates) could
 * otherwise wait for this capture's gate while the capture waits for it,
 * and `sync`'s synchronization for GPU work that waits for this thread. */
#define LEGACY_CALLS_MAX_WAIT_NS 250000000ull

/* A capture counts from before it begins, inside the capture gate: the
 * pool calls on the legacy stream that began before (cupool_legacy_enter)
 * end first, and none begins after. */
void cupool_capture_begin_enter(void)
{
    cupool_capture_gate_enter();
    atomic_fetch_add(&cupool_hot.captures, 1);
    if (atomic_load(&cupool_legacy_calls) == 0) return;
    uint64_t start_ns = cupool_now_ns();
    for (unsigned tries = 0; atomic_load(&cupool_legacy_calls) > 0; tries++) {
        if (tries >= 256 && cupool_now_ns() - start_ns > LEGACY_CALLS_MAX_WAIT_NS) break;
        cupool_wait_turn(tries, 256);
    }
}

/* A capture that did not begin no longer counts; one that did is listed
 * by the stream it began on. */
CUresult cupool_capture_begin_done(CUstream stream, CUresult r)
{
    int none_left = r != CUDA_SUCCESS && atomic_fetch_sub(&cupool_hot.captures, 1) == 1;
    if (r == CUDA_SUCCESS) add_origin_locked(stream);
    cupool_capture_gate_leave();
    if (none_left) ended();
    return r;
}

