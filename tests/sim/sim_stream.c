/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Streams, events and stream capture of the simulated CUDA driver.  Work runs
 * when it is enqueued, so a stream is only a context, flags and a capture state;
 * events are "complete" except that SIMCUDA_EVENT_DELAY=N makes a recorded event
 * answer CUDA_ERROR_NOT_READY to its first N queries, so code that polls events
 * gets exercised (any synchronize call completes them).  Capture follows the
 * driver's rules: a call that is potentially unsafe during a capture fails with
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED depending on the calling thread's
 * capture mode, work on the legacy stream while a blocking stream of the same
 * context captures fails with CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, and both
 * invalidate the capture sequences involved.  Every stream-taking entry point
 * has a _ptsz twin in which a NULL stream means the per-thread default stream.
 */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

/* The mode set by cuThreadExchangeStreamCaptureMode. */
static __thread CUstreamCaptureMode thread_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

/* ---- resolution of stream arguments ---------------------------------------- */

static CUstream per_thread_stream(CUcontext ctx)
{
    pthread_t self = pthread_self();
    for (size_t i = 0; i < ctx->streams.len; i++) {
        CUstream s = ctx->streams.items[i];
        if (s->kind == SIM_STREAM_PER_THREAD && pthread_equal(s->owner, self)) return s;
    }
    CUstream s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->ctx = ctx;
    s->kind = SIM_STREAM_PER_THREAD;
    s->owner = self;
    s->id = sim_next_id();
    sim_vec_push(&ctx->streams, s);
    return s;
}

CUresult sim_stream_resolve(CUstream h, bool ptds, CUstream *out)
{
    if (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
        CUcontext ctx;
        SIM_CHECK(sim_current_ctx(&ctx));
        bool per_thread = h == CU_STREAM_PER_THREAD || (h == NULL && ptds);
        *out = per_thread ? per_thread_stream(ctx) : ctx->legacy_stream;
        return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!sim_handle_is(h, SIM_KIND_STREAM)) return CUDA_ERROR_INVALID_HANDLE;
    SIM_CHECK(sim_ctx_check(h->ctx));
    *out = h;
    return CUDA_SUCCESS;
}

bool sim_stream_is_blocking(CUstream s)
{
    return s->kind != SIM_STREAM_CREATED || !(s->flags & CU_STREAM_NON_BLOCKING);
}

/* ---- capture rules ------------------------------------------------------------ */

/* Ends the capture state; an invalidated or abandoned capture graph that the
 * stream made itself is destroyed when `discard` is set. */
static void capture_end(CUstream s, bool discard)
{
    if (discard && s->capture_owns_graph) sim_graph_destroy_obj(s->capture_graph);
    s->capture_status = CU_STREAM_CAPTURE_STATUS_NONE;
    s->capture_graph = NULL;
    sim_vec_free(&s->capture_deps);
    sim_vec_remove(&sim.captures, s);
}

void sim_capture_invalidate(CUstream s)
{
    if (s->capture_status == CU_STREAM_CAPTURE_STATUS_ACTIVE) s->capture_status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
}

CUresult sim_capture_check_unsafe(void)
{
    if (thread_capture_mode == CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
    pthread_t self = pthread_self();
    bool prohibited = false;
    for (size_t i = 0; i < sim.captures.len; i++) {
        CUstream s = sim.captures.items[i];
        bool own = pthread_equal(s->capture_thread, self) && s->capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED;
        bool global = thread_capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
                      s->capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
        if (own || global) {
            sim_capture_invalidate(s);
            prohibited = true;
        }
    }
    return prohibited ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

/* Whether a blocking stream of ctx is capturing; invalidates those when asked. */
static bool legacy_would_join_capture(CUcontext ctx, bool invalidate)
{
    bool found = false;
    for (size_t i = 0; i < sim.captures.len; i++) {
        CUstream s = sim.captures.items[i];
        if (s->ctx != ctx || !sim_stream_is_blocking(s)) continue;
        found = true;
        if (invalidate) sim_capture_invalidate(s);
    }
    return found;
}

CUresult sim_capture_check_enqueue(CUstream s, bool *capture)
{
    *capture = false;
    if (s->capture_status == CU_STREAM_CAPTURE_STATUS_INVALIDATED) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (s->capture_status == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        *capture = true;
        return CUDA_SUCCESS;
    }
    if (s->kind == SIM_STREAM_LEGACY && legacy_would_join_capture(s->ctx, true))
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    return CUDA_SUCCESS;
}

CUresult sim_capture_append(CUstream s, sim_node_params *params)
{
    CUgraphNode node;
    CUresult rc = sim_graph_add(s->capture_graph, (const CUgraphNode *)s->capture_deps.items, s->capture_deps.len,
                                params, &node);
    if (rc == CUDA_SUCCESS) {
        s->capture_deps.len = 0;
        if (!sim_vec_push(&s->capture_deps, node)) rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (rc != CUDA_SUCCESS) sim_capture_invalidate(s);
    return rc;
}

CUresult sim_stream_submit(CUstream h, bool ptds, sim_node_params *params)
{
    CUstream s;
    bool capture;
    CUresult rc = sim_stream_resolve(h, ptds, &s);
    if (rc == CUDA_SUCCESS) rc = sim_capture_check_enqueue(s, &capture);
    if (rc == CUDA_SUCCESS && capture) return sim_capture_append(s, params);
    if (rc == CUDA_SUCCESS) {
        sim_race_op_begin(s, sim_node_params_name(params));
        rc = sim_node_params_run(params);
        sim_race_op_end();
    }
    sim_node_params_free(params);
    return rc;
}

/* ---- streams ------------------------------------------------------------------ */

static CUresult stream_create(CUstream *ph, unsigned flags, int priority)
{
    CUcontext ctx;
    if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_current_ctx(&ctx));
    CUstream s = calloc(1, sizeof *s);
    if (!s || !sim_vec_push(&ctx->streams, s)) {
        free(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    s->ctx = ctx;
    s->kind = SIM_STREAM_CREATED;
    s->flags = flags;
    s->priority = priority < -5 ? -5 : priority > 0 ? 0 : priority; /* clamped like an H200 */
    s->id = sim_next_id();
    sim_handle_add(s, SIM_KIND_STREAM);
    *ph = s;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuStreamCreate(CUstream *ph, unsigned int flags)
{
    SIM_BEGIN;
    return stream_create(ph, flags, 0);
}

SIM_API CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *ph, unsigned int flags, int priority)
{
    SIM_BEGIN;
    return stream_create(ph, flags, priority);
}

void sim_stream_destroy_obj(CUstream s)
{
    CUcontext ctx = s->ctx;
    if (s->capture_status != CU_STREAM_CAPTURE_STATUS_NONE) capture_end(s, true);
    for (size_t i = 0; i < ctx->events.len; i++) {
        CUevent e = ctx->events.items[i];
        if (e->stream == s) e->stream = NULL;
    }
    sim_race_stream_forget(s);
    sim_pool_stream_gone(s);
    sim_vec_remove(&ctx->streams, s);
    sim_handle_remove(s);
    free(s);
}

SIM_API CUresult CUDAAPI cuStreamDestroy_v2(CUstream h)
{
    SIM_BEGIN;
    if (!sim_handle_is(h, SIM_KIND_STREAM)) return CUDA_ERROR_INVALID_HANDLE;
    sim_stream_destroy_obj(h);
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuStreamDestroy(CUstream h)
{
    return cuStreamDestroy_v2(h);
}

static CUresult stream_synchronize(CUstream h, bool ptds)
{
    SIM_BEGIN;
    CUstream s;
    SIM_CHECK(sim_stream_resolve(h, ptds, &s));
    if (s->capture_status != CU_STREAM_CAPTURE_STATUS_NONE) {
        sim_capture_invalidate(s);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (s->kind == SIM_STREAM_LEGACY && legacy_would_join_capture(s->ctx, true))
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    sim_ctx_sync_point(s->ctx);
    sim_race_host_waits_stream(s);
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuStreamSynchronize(CUstream h) { return stream_synchronize(h, false); }
SIM_API CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream h) { return stream_synchronize(h, true); }

/* A stream with a recorded, still pending event reports its work unfinished;
 * asking counts as a query of those events so polling loops terminate. */
static CUresult stream_query(CUstream h, bool ptds)
{
    SIM_BEGIN;
    CUstream s;
    SIM_CHECK(sim_stream_resolve(h, ptds, &s));
    if (s->capture_status != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    bool busy = false;
    for (size_t i = 0; i < s->ctx->events.len; i++) {
        CUevent e = s->ctx->events.items[i];
        if (e->stream == s && e->pending_queries) {
            e->pending_queries--;
            busy = true;
        }
    }
    if (busy) return CUDA_ERROR_NOT_READY;
    sim_race_host_waits_stream(s);
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuStreamQuery(CUstream h) { return stream_query(h, false); }
SIM_API CUresult CUDAAPI cuStreamQuery_ptsz(CUstream h) { return stream_query(h, true); }

static CUresult stream_get_flags(CUstream h, unsigned *flags, bool ptds)
{
    SIM_BEGIN;
    CUstream s;
    if (!flags) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_stream_resolve(h, ptds, &s));
    *flags = s->flags;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuStreamGetFlags(CUstream h, unsigned int *flags) { return stream_get_flags(h, flags, false); }
SIM_API CUresult CUDAAPI cuStreamGetFlags_ptsz(CUstream h, unsigned int *flags) { return stream_get_flags(h, flags, true); }

static CUresult stream_get_priority(CUstream h, int *priority, bool ptds)
{
    SIM_BEGIN;
    CUstream s;
    if (!priority) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_stream_resolve(h, ptds, &s));
    *priority = s->priority;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuStreamGetPriority(CUstream h, int *p) { return stream_get_priority(h, p, false); }
SIM_API CUresult CUDAAPI cuStreamGetPriority_ptsz(CUstream h, int *p) { return stream_get_priority(h, p, true); }

static CUresult stream_get_ctx(CUstream h, CUcontext *pctx, bool ptds)
{
    SIM_BEGIN;
    CUstream s;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_stream_resolve(h, ptds, &s));
    /* Even this query of the legacy stream ends the capture of a blocking
     * stream (measured on the H200: the capture then ends INVALIDATED). */
    if (s->kind == SIM_STREAM_LEGACY && legacy_would_join_capture(s->ctx, true))
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    *pctx = s->ctx;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuStreamGetCtx(CUstream h, CUcontext *pctx) { return stream_get_ctx(h, pctx, false); }
SIM_API CUresult CUDAAPI cuStreamGetCtx_ptsz(CUstream h, CUcontext *pctx) { return stream_get_ctx(h, pctx, true); }

SIM_API CUresult CUDAAPI cuStreamGetCtx_v2(CUstream h, CUcontext *pctx, CUgreenCtx *pgreen)
{
    if (pgreen) *pgreen = NULL; /* green contexts are not modelled */
    return stream_get_ctx(h, pctx, false);
}

SIM_API CUresult CUDAAPI cuStreamGetCtx_v2_ptsz(CUstream h, CUcontext *pctx, CUgreenCtx *pgreen)
{
    if (pgreen) *pgreen = NULL;
    return stream_get_ctx(h, pctx, true);
}

static CUresult stream_get_id(CUstream h, unsigned long long *id, bool ptds)
{
    SIM_BEGIN;
    CUstream s;
    if (!id) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_stream_resolve(h, ptds, &s));
    *id = s->id;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuStreamGetId(CUstream h, unsigned long long *id) { return stream_get_id(h, id, false); }
SIM_API CUresult CUDAAPI cuStreamGetId_ptsz(CUstream h, unsigned long long *id) { return stream_get_id(h, id, true); }

static CUresult stream_wait_event(CUstream h, CUevent e, unsigned flags, bool ptds)
{
    sim_slow_enqueue();
    SIM_BEGIN;
    CUstream s;
    bool capture;
    SIM_CHECK(sim_stream_resolve(h, ptds, &s));
    if (!sim_handle_is(e, SIM_KIND_EVENT)) return CUDA_ERROR_INVALID_HANDLE;
    if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_capture_check_enqueue(s, &capture));
    /* The work already ran; the race checker still learns the order. */
    if (!capture) sim_race_stream_waits(s, e);
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuStreamWaitEvent(CUstream h, CUevent e, unsigned int f) { return stream_wait_event(h, e, f, false); }
SIM_API CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream h, CUevent e, unsigned int f) { return stream_wait_event(h, e, f, true); }

/* ---- events -------------------------------------------------------------------- */

SIM_API CUresult CUDAAPI cuEventCreate(CUevent *ph, unsigned int flags)
{
    SIM_BEGIN;
    CUcontext ctx;
    unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    if (!ph || (flags & ~known)) return CUDA_ERROR_INVALID_VALUE;
    if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING)) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_current_ctx(&ctx));
    CUevent e = calloc(1, sizeof *e);
    if (!e || !sim_vec_push(&ctx->events, e)) {
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    e->ctx = ctx;
    e->flags = flags;
    sim_handle_add(e, SIM_KIND_EVENT);
    *ph = e;
    return CUDA_SUCCESS;
}

void sim_event_destroy_obj(CUevent e)
{
    sim_vec_remove(&e->ctx->events, e);
    sim_handle_remove(e);
    sim_clock_free(&e->clock);
    free(e);
}

static CUresult event_check(CUevent e)
{
    if (!sim_handle_is(e, SIM_KIND_EVENT)) return CUDA_ERROR_INVALID_HANDLE;
    return sim_ctx_check(e->ctx);
}

SIM_API CUresult CUDAAPI cuEventDestroy_v2(CUevent e)
{
    SIM_BEGIN;
    if (!sim_handle_is(e, SIM_KIND_EVENT)) return CUDA_ERROR_INVALID_HANDLE;
    sim_event_destroy_obj(e);
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuEventDestroy(CUevent e)
{
    return cuEventDestroy_v2(e);
}

static CUresult event_record(CUevent e, CUstream h, unsigned flags, bool ptds)
{
    SIM_BEGIN;
    CUstream s;
    bool capture;
    SIM_CHECK(event_check(e));
    if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_stream_resolve(h, ptds, &s));
    if (s->ctx != e->ctx) return CUDA_ERROR_INVALID_HANDLE;
    SIM_CHECK(sim_capture_check_enqueue(s, &capture));
    if (capture) return CUDA_SUCCESS; /* an internal capture dependency: no node */
    e->recorded = true;
    sim_race_event_record(e, s);
    if (s->kind == SIM_STREAM_LEGACY) s->ctx->legacy_records++;
    e->pending_queries = sim.event_delay;
    e->time_ms = sim_now_ms();
    e->stream = s;
    e->frees_before = sim.pool_frees;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuEventRecord(CUevent e, CUstream s) { return event_record(e, s, 0, false); }
SIM_API CUresult CUDAAPI cuEventRecord_ptsz(CUevent e, CUstream s) { return event_record(e, s, 0, true); }
SIM_API CUresult CUDAAPI cuEventRecordWithFlags(CUevent e, CUstream s, unsigned int f) { return event_record(e, s, f, false); }
SIM_API CUresult CUDAAPI cuEventRecordWithFlags_ptsz(CUevent e, CUstream s, unsigned int f) { return event_record(e, s, f, true); }

/* CUDA 12.5: the event captures all the work of the context so far.  While
 * a stream of the context captures, the call fails and invalidates those
 * captures, as the driver documents. */
SIM_API CUresult CUDAAPI cuCtxRecordEvent(CUcontext ctx, CUevent e)
{
    SIM_BEGIN;
    SIM_CHECK(event_check(e));
    SIM_CHECK(sim_ctx_check(ctx));
    if (e->ctx != ctx) return CUDA_ERROR_INVALID_HANDLE;
    if (sim.no_ctx_record_event) return CUDA_ERROR_NOT_SUPPORTED;
    bool conflict = false;
    for (size_t i = 0; i < sim.captures.len; i++) {
        CUstream s = sim.captures.items[i];
        if (s->ctx != ctx) continue;
        sim_capture_invalidate(s);
        conflict = true;
    }
    if (conflict) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    e->recorded = true;
    e->pending_queries = sim.event_delay;
    e->time_ms = sim_now_ms();
    e->stream = NULL; /* no one stream's: only a context-wide synchronization completes it early */
    e->frees_before = sim.pool_frees;
    sim_race_ctx_record(e, ctx);
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuEventQuery(CUevent e)
{
    SIM_BEGIN;
    SIM_CHECK(event_check(e));
    if (e->pending_queries) {
        e->pending_queries--;
        return CUDA_ERROR_NOT_READY;
    }
    sim_race_host_waits_event(e);
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuEventSynchronize(CUevent e)
{
    SIM_BEGIN;
    SIM_CHECK(event_check(e));
    sim_ctx_sync_point(e->ctx);
    sim_race_host_waits_event(e);
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuEventElapsedTime_v2(float *ms, CUevent start, CUevent end)
{
    SIM_BEGIN;
    if (!ms) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(event_check(start));
    SIM_CHECK(event_check(end));
    if ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
    if (!start->recorded || !end->recorded) return CUDA_ERROR_INVALID_HANDLE;
    if (start->pending_queries || end->pending_queries) return CUDA_ERROR_NOT_READY;
    *ms = (float)(end->time_ms - start->time_ms);
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuEventElapsedTime(float *ms, CUevent start, CUevent end)
{
    return cuEventElapsedTime_v2(ms, start, end);
}

/* ---- capture -------------------------------------------------------------------- */

/* Starts a capture into graph g (owned: made for the capture) after deps. */
static CUresult begin_capture(CUstream h, CUstreamCaptureMode mode, bool ptds, CUgraph g, const CUgraphNode *deps,
                              size_t ndeps)
{
    SIM_BEGIN;
    CUstream s;
    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
        mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_stream_resolve(h, ptds, &s));
    if (s->kind == SIM_STREAM_LEGACY) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (s->capture_status != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
    if (g && !sim_handle_is(g, SIM_KIND_GRAPH)) return CUDA_ERROR_INVALID_VALUE;
    if (ndeps && !deps) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < ndeps; i++)
        if (!sim_handle_is(deps[i], SIM_KIND_NODE) || deps[i]->graph != g) return CUDA_ERROR_INVALID_VALUE;
    s->capture_owns_graph = g == NULL;
    if (!g) SIM_CHECK(sim_graph_new(&g));
    s->capture_graph = g;
    s->capture_status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    s->capture_mode = mode;
    s->capture_thread = pthread_self();
    s->capture_id = sim_next_id();
    bool ok = sim_vec_push(&sim.captures, s);
    for (size_t i = 0; ok && i < ndeps; i++) ok = sim_vec_push(&s->capture_deps, deps[i]);
    if (!ok) {
        capture_end(s, true);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

#define GLOBAL_MODE CU_STREAM_CAPTURE_MODE_GLOBAL
SIM_API CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode mode) { return begin_capture(h, mode, false, NULL, NULL, 0); }
SIM_API CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream h, CUstreamCaptureMode mode) { return begin_capture(h, mode, true, NULL, NULL, 0); }
SIM_API CUresult CUDAAPI cuStreamBeginCapture(CUstream h) { return begin_capture(h, GLOBAL_MODE, false, NULL, NULL, 0); }
SIM_API CUresult CUDAAPI cuStreamBeginCapture_ptsz(CUstream h) { return begin_capture(h, GLOBAL_MODE, true, NULL, NULL, 0); }

SIM_API CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream h, CUgraph g, const CUgraphNode *deps,
                                                     const CUgraphEdgeData *edges, size_t ndeps,
                                                     CUstreamCaptureMode mode)
{
    (void)edges; /* only default edges are modelled */
    return g ? begin_capture(h, mode, false, g, deps, ndeps) : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult CUDAAPI cuStreamBeginCaptureToGraph_ptsz(CUstream h, CUgraph g, const CUgraphNode *deps,
                                                          const CUgraphEdgeData *edges, size_t ndeps,
                                                          CUstreamCaptureMode mode)
{
    (void)edges;
    return g ? begin_capture(h, mode, true, g, deps, ndeps) : CUDA_ERROR_INVALID_VALUE;
}

static CUresult end_capture(CUstream h, CUgraph *phGraph, bool ptds)
{
    SIM_BEGIN;
    CUstream s;
    if (!phGraph) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_stream_resolve(h, ptds, &s));
    if (s->capture_status == CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
    if (s->capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(s->capture_thread, pthread_self()))
        return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    CUgraph g = s->capture_graph;
    bool invalidated = s->capture_status == CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    capture_end(s, invalidated);
    *phGraph = invalidated ? NULL : g;
    return invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuStreamEndCapture(CUstream h, CUgraph *g) { return end_capture(h, g, false); }
SIM_API CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream h, CUgraph *g) { return end_capture(h, g, true); }

static CUresult is_capturing(CUstream h, CUstreamCaptureStatus *status, bool ptds)
{
    SIM_BEGIN;
    CUstream s;
    if (!status) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_stream_resolve(h, ptds, &s));
    /* Asking about the legacy stream is an implicit dependency, but only asking. */
    if (s->kind == SIM_STREAM_LEGACY && legacy_would_join_capture(s->ctx, false))
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    *status = s->capture_status;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus *st) { return is_capturing(h, st, false); }
SIM_API CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream h, CUstreamCaptureStatus *st) { return is_capturing(h, st, true); }

static CUresult capture_info(CUstream h, bool ptds, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                             const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps)
{
    SIM_BEGIN;
    CUstream s;
    if (!status) return CUDA_ERROR_INVALID_VALUE;
    SIM_CHECK(sim_stream_resolve(h, ptds, &s));
    if (s->kind == SIM_STREAM_LEGACY && legacy_would_join_capture(s->ctx, false))
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    bool active = s->capture_status == CU_STREAM_CAPTURE_STATUS_ACTIVE;
    *status = s->capture_status;
    if (id) *id = s->capture_status ? s->capture_id : 0;
    if (graph) *graph = active ? s->capture_graph : NULL;
    if (deps) *deps = (active && s->capture_deps.len) ? (const CUgraphNode *)s->capture_deps.items : NULL;
    if (edges) *edges = NULL; /* all edges are default edges */
    if (ndeps) *ndeps = active ? s->capture_deps.len : 0;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id)
{
    return capture_info(h, false, st, id, NULL, NULL, NULL, NULL);
}
SIM_API CUresult CUDAAPI cuStreamGetCaptureInfo_ptsz(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id)
{
    return capture_info(h, true, st, id, NULL, NULL, NULL, NULL);
}
SIM_API CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
                                                   const CUgraphNode **deps, size_t *n)
{
    return capture_info(h, false, st, id, g, deps, NULL, n);
}
SIM_API CUresult CUDAAPI cuStreamGetCaptureInfo_v2_ptsz(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
                                                        const CUgraphNode **deps, size_t *n)
{
    return capture_info(h, true, st, id, g, deps, NULL, n);
}
SIM_API CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
                                                   const CUgraphNode **deps, const CUgraphEdgeData **e, size_t *n)
{
    return capture_info(h, false, st, id, g, deps, e, n);
}
SIM_API CUresult CUDAAPI cuStreamGetCaptureInfo_v3_ptsz(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id,
                                                        CUgraph *g, const CUgraphNode **deps,
                                                        const CUgraphEdgeData **e, size_t *n)
{
    return capture_info(h, true, st, id, g, deps, e, n);
}

SIM_API CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    SIM_BEGIN;
    if (!mode || (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
                  *mode != CU_STREAM_CAPTURE_MODE_RELAXED))
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = thread_capture_mode;
    thread_capture_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}
