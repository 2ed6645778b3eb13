/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How a free is carried out in each free mode (engine.h): `sync` hands the
 * block straight back to its pool, and so does `ordered` unless it keeps the
 * block for the context's next allocation of its size (ordered_keep.c,
 * "ordered reuse"); `deferred` keeps it until
 * events recorded on every stream that could still use it have completed,
 * polling them on later calls and never making the host wait (unless the
 * memory waiting grows past a cap); a free made while a stream capture is in
 * progress is held until the capture ends.  A `deferred` block whose events
 * have completed is kept ready for the context's next allocation of the same
 * size (ready_store.c, "ready blocks") before it goes back to its pool.  Blocks
 * stay in the origin table until they are back in their pool, so a second
 * free of one is caught.  This file is the dispatch: which mode's path a
 * free takes.  `ordered`'s keep and reuse are ordered_keep.c, `deferred`'s
 * fences and batches deferred_fence.c, the store of ready blocks both use
 * ready_store.c.
 */
#include "free_store.h"

int cupool_free_keeps_block(const cupool_origin_t *o)
{
    /* During a capture neither the legacy stream nor a context-wide
     * synchronization may be touched: the block is held until it ends. */
    if (cupool_capturing()) return 1;
    int mode = atomic_load_explicit(&o->owner->mode, memory_order_relaxed);
    return mode == CUPOOL_FREE_DEFERRED || (mode == CUPOOL_FREE_ORDERED && cupool_ordered_keeps(o->size));
}

__attribute__((noinline, cold)) CUresult cupool_free_failed(const cupool_origin_t *o, CUresult r)
{
    if (r == CUPOOL_CAPTURE_IN_PROGRESS) return cupool_defer(o->owner, o, 1);
    cupool_warn_give_back(o->ptr, r);
    return cupool_restore_block(o, r);
}

CUresult cupool_free_sync(const cupool_origin_t *o)
{
    /* The whole context first, then on the legacy stream as ordered, both
     * counted as a legacy-stream call (a capture beginning on another
     * thread waits for them); a capture in progress holds the block until
     * it has ended. */
    if (!cupool_legacy_enter()) return cupool_defer(o->owner, o, 1);
    CUresult r = real_cuCtxSynchronize();
    if (r == CUDA_SUCCESS) r = cupool_give_back(o->ptr, CU_STREAM_LEGACY);
    cupool_legacy_leave();
    return r == CUDA_SUCCESS ? r : cupool_restore_block(o, r);
}

/* An `ordered` free the store did not keep: back to the pool at once, as
 * `ordered` frees what it does not keep (cupool_free_block, engine.h, with
 * the block no longer kept: the mode may have moved on meanwhile). */
static CUresult free_not_kept(cupool_context_t *c, const cupool_origin_t *o)
{
    cupool_origin_t gone;
    cupool_origin_remove(o->ptr, &gone);
    if (atomic_load_explicit(&c->mode, memory_order_relaxed) != CUPOOL_FREE_ORDERED) return cupool_free_sync(o);
    CUresult r = cupool_queue_free(c, o->ptr);
    return CUPOOL_LIKELY(r == CUDA_SUCCESS) ? r : cupool_free_failed(o, r);
}

CUresult cupool_free_block_slow(cupool_context_t *c, const cupool_origin_t *o, int kept)
{
    if (!kept) return cupool_free_sync(o);
    int capturing = cupool_capturing();
    /* The mode may have moved on since the block was kept: then deferred. */
    if (!capturing && atomic_load_explicit(&c->mode, memory_order_relaxed) == CUPOOL_FREE_ORDERED)
        return cupool_ordered_keep(c, o) ? CUDA_SUCCESS : free_not_kept(c, o);
    return cupool_defer(c, o, capturing);
}
