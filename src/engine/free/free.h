/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The free subsystem (engine/free/) as the rest of the engine sees it: the
 * free modes and their stores.  A free reads top-down from free_modes.c,
 * which dispatches it to the store of its mode: `ordered`'s keep and reuse
 * (ordered_keep.c), `deferred`'s fences and batches (deferred_fence.c),
 * and the ready store both hand their blocks to (ready_store.c), with the
 * records they share (free_store.h, the files of free/ alone).  What the
 * shims call of it is in engine.h (cupool_free_fast, cupool_free_block,
 * cupool_free_keeps_block); here is what the allocation path (alloc.c),
 * the registry, the kept store and the share thread call.
 */
#ifndef CUPOOL_ENGINE_FREE_H
#define CUPOOL_ENGINE_FREE_H

#include "../state.h"

/* ---- ordered_keep.c: `ordered`'s reuse and the move out of it -------------- */

/* Serves an `ordered` allocation (the context current) from a block of
 * this size the context freed earlier: CUDA_SUCCESS when *dptr is such a
 * block (still in the origin table, marked freed), CUDA_ERROR_NOT_FOUND
 * when there is none, CUPOOL_CAPTURE_IN_PROGRESS when a capture began
 * meanwhile. */
CUresult cupool_ordered_reuse(cupool_context_t *c, size_t size, CUdeviceptr *dptr);
static inline CUresult ordered_alloc_made(cupool_context_t *c, CUresult r);
/* An `ordered` allocation: a block the context freed earlier, else one
 * from the pool on the order stream; CUPOOL_CAPTURE_IN_PROGRESS when a
 * capture keeps it off the program's streams. */
static inline CUresult cupool_ordered_alloc(cupool_context_t *c, CUmemoryPool pool, CUdeviceptr *dptr, size_t size)
{
    /* An empty store costs one look at the context's first line, no call. */
    if (CUPOOL_HINT_READ(c->ready_oldest)) {
        CUresult r = cupool_ordered_reuse(c, size, dptr);
        if (r != CUDA_ERROR_NOT_FOUND) return ordered_alloc_made(c, r);
    }
    if (CUPOOL_UNLIKELY(cupool_queue_wanted(c))) return ordered_alloc_made(c, cupool_queue_call(c, pool, dptr, size));
    return ordered_alloc_made(c, cupool_order_pool_call(c, pool, dptr, size));
}
/* The context left `ordered` while the allocation was made (another
 * thread's work moved it to `deferred`, whose other streams no longer
 * follow the order stream): the block is made complete before the program
 * has it (cupool_order_settle, queue.c). */
static inline CUresult ordered_alloc_made(cupool_context_t *c, CUresult r)
{
    if (CUPOOL_UNLIKELY(atomic_load_explicit(&c->mode, memory_order_acquire) != CUPOOL_FREE_ORDERED) &&
        r == CUDA_SUCCESS)
        cupool_order_settle(c);
    return r;
}
/* An `ordered` free on the order stream, through the driver queue when
 * the context wants it (out of line, cupool_queue_free: the caller's frame
 * then holds no slot for the pointer the queue is handed). */
static inline CUresult cupool_ordered_free(cupool_context_t *c, CUdeviceptr ptr)
{
    if (CUPOOL_UNLIKELY(cupool_queue_wanted(c))) return cupool_queue_free(c, ptr);
    return cupool_order_pool_call(c, NULL, &ptr, 0);
}
/* Moves a context out of `ordered`: synchronizes it (after the capture in
 * progress, if any), after which the users of every block `ordered` kept
 * until then are known to be done (those blocks then serve `deferred`
 * too). */
void cupool_ordered_leave(cupool_context_t *c);

/* ---- deferred_fence.c: `deferred`'s frees, and the reclaim ------------------ */

/* Whether any deferred block waits (read without the context's lock: a
 * hint, which cupool_reclaim confirms under it). */
static inline int cupool_deferred_waiting(const cupool_context_t *c)
{
    return CUPOOL_HINT_READ(c->head) || CUPOOL_HINT_READ(c->pending) || CUPOOL_HINT_READ(c->held);
}
/* Bytes of the context's blocks waiting for their fences (a hint). */
static inline uint64_t cupool_deferred_waiting_bytes(const cupool_context_t *c)
{
    return CUPOOL_HINT_READ(c->deferred_bytes);
}
/* Serves a `deferred` allocation from the blocks freed earlier in the
 * context whose users are all done, returning completed ones first; 1 when
 * *dptr is such a block (still in the origin table, marked freed). */
int cupool_deferred_reuse(cupool_context_t *c, size_t size, CUdeviceptr *dptr);
/* Returns completed deferred blocks to their pools, and does what waited
 * for the end of a capture (a switch out of `ordered`, frees held during
 * it), without waiting for the GPU; cupool_reclaim_all waits until every
 * block is back, and empties the ready store (out of memory). */
void cupool_reclaim(cupool_context_t *c);
void cupool_reclaim_all(cupool_context_t *c);
/* Whether cupool_reclaim has anything to do for a context (a switch out of
 * `ordered` waiting to synchronize, or deferred blocks): read unlocked, so
 * the common case makes no call. */
static inline int cupool_reclaim_due(const cupool_context_t *c)
{
    return CUPOOL_HINT_READ(c->sync_due) || cupool_deferred_waiting(c);
}
/* Hands back every deferred block of a context whose work is known to be
 * complete, without looking at its events (they may be gone with it).
 * c->lock held. */
void cupool_deferred_drop(cupool_context_t *c, CUstream stream);
/* The program is destroying one of the context's non-blocking streams,
 * whose work may still use blocks it frees later: later fences must cover
 * that work too.  c->lock held. */
void cupool_deferred_stream_destroyed(cupool_context_t *c, CUstream stream);

/* A fence for a block kept outside the context's own store (kept_store.c):
 * an event recorded after all the work submitted so far to the context, as
 * a `deferred` batch's is; CUPOOL_CAPTURE_IN_PROGRESS while a capture is in
 * progress.  c->lock not held. */
CUresult cupool_fence_record(cupool_context_t *c, CUevent *fence);
/* Whether the fence has completed (wait: once it has); a completed fence's
 * event goes back to the context's spares, as does a forgotten one's. */
int cupool_fence_passed(cupool_context_t *c, CUevent fence, int wait);
void cupool_fence_forget(cupool_context_t *c, CUevent fence);

/* ---- ready_store.c: the blocks ready for reuse ------------------------------ */

/* Bytes of the context's ready blocks (a hint, read without its lock). */
static inline uint64_t cupool_ready_bytes(const cupool_context_t *c)
{
    return CUPOOL_HINT_READ(c->ready_bytes);
}
/* Hands the context's ready blocks back to the pool now, on its own stream
 * (it has left `deferred`, or may be about to die). */
void cupool_ready_return_all(cupool_context_t *c);
/* Frees the records a context keeps (its ready store's, and those kept for
 * reuse): its teardown. */
void cupool_ready_drop_records(cupool_context_t *c);

#endif
