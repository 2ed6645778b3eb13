/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The engine, as the shims see it: the middle layer, between the shims
 * (shims/) above and the base (base/) below.  It keeps the origin table
 * (origin.h), the devices, pools and contexts with their free modes
 * (registry.c), the free modes and their stores (free_modes.c,
 * ordered_keep.c, deferred_fence.c, ready_store.c), the stream captures in
 * progress (capture.c) and the driver queue (queue.c); their state is
 * state.h.  Here are the inline paths every allocation and free runs: the
 * calling thread's context, an `ordered` allocation, and a free.  An
 * allocation reads top-down: a shim asks cupool_current_context(), then
 * cupool_ordered_alloc() or the general path; a free asks the origin table
 * (cupool_origin_take/claim, cupool_free_keeps_block), then
 * cupool_free_block(), which goes down to the store of its mode.
 */
#ifndef CUPOOL_ENGINE_H
#define CUPOOL_ENGINE_H

#include "state.h"
#include "ipc.h"
#include "kept_store.h"

/* Starts the engine once the program's cuInit has succeeded (the shims'
 * start-up): fork handlers, the driver queue, what `ordered` keeps and
 * whether the fast paths may run. */
void cupool_engine_start(void);

/* The live statistics page (live.c, its format live.h): created, with the
 * thread that updates it, at start-up unless CUPOOL_LIVE=0; the thread
 * stopped and the page removed at exit, before anything else is torn
 * down.  Neither is on a call's path. */
void cupool_live_start(void);
void cupool_live_stop(void);

/* Legacy CUDA IPC on pooled memory: ipc.h. */

/* The state of the calling thread's current context, created on first use;
 * NULL when no context is current or cupool cannot pool there.  Inline: the
 * thread's cache answers nearly every time. */
static inline cupool_context_t *cupool_current_context(void)
{
    CUcontext ctx = NULL;
    unsigned generation;
    cupool_context_t *c = cupool_context_from_cache(&ctx, &generation);
    if (CUPOOL_LIKELY(c) || !ctx) return c;
    return cupool_context_lookup(ctx, generation);
}
/* The same for the fast paths (shims/memory.c), from the thread's cache alone:
 * NULL when it misses, and the general path then looks the context up.
 * What they serve is counted in the thread's line (cupool_stats_fast_*),
 * for the device of the context cached. */
static inline cupool_context_t *cupool_cached_context(void)
{
    CUcontext ctx = NULL;
    unsigned generation;
    return cupool_context_from_cache(&ctx, &generation);
}
/* An `ordered` allocation: a block the context freed earlier, else one
 * from the pool on the legacy stream; CUPOOL_CAPTURE_IN_PROGRESS when a
 * capture keeps it off the legacy stream. */
static inline CUresult cupool_ordered_alloc(cupool_context_t *c, CUmemoryPool pool, CUdeviceptr *dptr, size_t size)
{
    /* An empty store costs one look at the context's first line, no call. */
    if (CUPOOL_HINT_READ(c->ready_oldest)) {
        CUresult r = cupool_ordered_reuse(c, size, dptr);
        if (r != CUDA_ERROR_NOT_FOUND) return r;
    }
    if (CUPOOL_UNLIKELY(cupool_queue_wanted(c))) return cupool_queue_call(c, pool, dptr, size);
    return cupool_legacy_pool_call(pool, dptr, size);
}
static inline CUresult cupool_ordered_free(cupool_context_t *c, CUdeviceptr ptr)
{
    if (CUPOOL_UNLIKELY(cupool_queue_wanted(c))) return cupool_queue_call(c, NULL, &ptr, 0);
    return cupool_legacy_pool_call(NULL, &ptr, 0);
}

static inline CUresult cupool_free_block(cupool_context_t *c, const cupool_origin_t *o, int kept)
{
    if (kept || atomic_load_explicit(&c->mode, memory_order_relaxed) != CUPOOL_FREE_ORDERED)
        return cupool_free_block_slow(c, o, kept);
    /* On the legacy stream: ordered after the legacy, blocking and
     * per-thread streams' uses in stream order too, not only in time. */
    CUresult r = cupool_ordered_free(c, o->ptr);
    return CUPOOL_LIKELY(r == CUDA_SUCCESS) ? r : cupool_free_failed(o, r);
}

#endif
