/*
 * Stream and capture shims.  cupool needs to know of every non-blocking
 * stream (deferred frees wait for them, and the first one moves an `auto`
 * context out of `ordered`) and of every stream capture in progress (during
 * one, neither the legacy stream nor a context-wide synchronization may be
 * used, and cupool's own driver calls run in relaxed capture mode).
 */
#include "context.h"

/* ---- captures (counted in cupool_hot.captures) ---------------------------- */

/* A fence of deferred.c (cuCtxRecordEvent, or events on the legacy stream)
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

static void capture_uncounted(void)
{
    if (atomic_fetch_sub(&cupool_hot.captures, 1) == 1) cupool_captures_ended();
}

/* Takes off the list the captures begun on stream (any context), or in ctx
 * (any stream), and uncounts them; returns how many there were. */
static int take_origins(CUstream stream, CUcontext ctx)
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
    for (int i = 0; i < taken; i++) capture_uncounted();
    return taken;
}

void cupool_captures_context_gone(CUcontext ctx)
{
    if (ctx && atomic_load(&cupool_hot.captures) > 0) take_origins(NULL, ctx);
}

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

CUPOOL_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream)
{
    CUPOOL_SHIM_BEGIN(call, cuStreamDestroy_v2);
    call.stream = hStream;
    if (hStream && cupool_active()) cupool_forget_stream(hStream);
    CUresult r = real_cuStreamDestroy_v2(hStream);
    /* Destroyed while capturing: that capture is over (capture_origins). */
    if (r == CUDA_SUCCESS && hStream && atomic_load(&cupool_hot.captures) > 0) take_origins(hStream, NULL);
    return cupool_call_end(&call, r);
}

/* ---- shims: capture ------------------------------------------------------ */

/* In a line of its own: every `ordered` pool call writes it (common.h). */
atomic_int cupool_legacy_calls __attribute__((aligned(64)));

/* How long a capture waits for cupool's legacy-stream calls at most: a
 * call made from inside another (a tool's callback that allocates) could
 * otherwise wait for this capture's gate while the capture waits for it,
 * and `sync`'s synchronization for GPU work that waits for this thread. */
#define LEGACY_CALLS_MAX_WAIT_NS 250000000ull

/* A capture counts from before it begins, inside the capture gate: the
 * pool calls on the legacy stream that began before (cupool_legacy_enter)
 * end first, and none begins after. */
static void before_begin(void)
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
static CUresult after_begin(CUstream stream, CUresult r)
{
    int none_left = r != CUDA_SUCCESS && atomic_fetch_sub(&cupool_hot.captures, 1) == 1;
    if (r == CUDA_SUCCESS) add_origin_locked(stream);
    cupool_capture_gate_leave();
    if (none_left) cupool_captures_ended();
    return r;
}

/* Begins a capture on stream and counts it, inside the capture gate. */
#define GATED_BEGIN(stream, begin_call) (before_begin(), after_begin(stream, begin_call))

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
    if (was && !capturing(is_capturing, stream) && !take_origins(stream, NULL)) capture_uncounted();
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
