/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A free, from the top: which free mode's path it takes, in the order a free
 * reads (engine.h has what the shims call, free.h what the rest of the
 * engine calls, free_store.h what the files of free/ call of each other).
 * `sync` hands the block straight back to its pool, and so does `ordered`
 * unless it keeps the block for the context's next allocation of its size
 * (ordered_keep.c, "ordered reuse"); `deferred` keeps it until events
 * recorded on every stream that could still use it have completed, polling
 * them on later calls and never making the host wait (unless the memory
 * waiting grows past a cap), and a free made while a stream capture is in
 * progress is held until the capture ends (deferred_fence.c).  A block
 * whose users are done waits in the context's ready store for the next
 * allocation of its size (ready_store.c, "ready blocks") before it goes
 * back to its pool.  Blocks stay in the origin table until they are back in
 * their pool, so a second free of one is caught.
 */
#include "free_store.h"

static CUresult free_block(cupool_context_t *c, const cupool_origin_t *o, enum cupool_free_how how);
static enum cupool_origin_action fast_free_action(const cupool_origin_t *o, const void *current);

/* ---- the fast path (see alloc.c, "the fast paths") ------------------------- */

/* Serves cuMemFree of a block fast_free_action() takes; 1 when served. */
CUPOOL_HOT_PATH int cupool_free_fast(CUdeviceptr dptr, CUresult *result)
{
    if (!atomic_load_explicit(&cupool_hot.fast, memory_order_acquire) || !dptr) return 0;
    cupool_context_t *c = cupool_cached_context();
    cupool_origin_t o;
    enum cupool_origin_action action = c ? cupool_origin_take(dptr, &o, fast_free_action, c) : CUPOOL_ORIGIN_LEAVE;
    if (action == CUPOOL_ORIGIN_LEAVE) return 0;
    *result = free_block(c, &o, action == CUPOOL_ORIGIN_KEEP ? CUPOOL_FREE_KEPT : CUPOOL_FREE_NOW);
    if (CUPOOL_LIKELY(*result == CUDA_SUCCESS)) cupool_stats_fast_free(o.size);
    else cupool_stats_count(CUPOOL_SYM_cuMemFree_v2);
    return 1;
}

/* What the fast free does with a block (arg: the calling thread's context
 * state): nothing unless the block's context is that one and the fast
 * paths serve it now; in `ordered` it keeps the block for reuse unless
 * CUPOOL_ORDERED_READY says no; otherwise it frees it at once. */
static CUPOOL_HOT_PATH enum cupool_origin_action fast_free_action(const cupool_origin_t *o, const void *current)
{
    int mode;
    if (o->owner != current || o->exported || !(mode = cupool_fast_mode(o->owner))) return CUPOOL_ORIGIN_LEAVE;
    return mode == CUPOOL_FREE_ORDERED && cupool_ordered_keeps(o->size) ? CUPOOL_ORIGIN_KEEP : CUPOOL_ORIGIN_REMOVE;
}

/* ---- the dispatch ------------------------------------------------------------ */

CUresult cupool_free_block(cupool_context_t *c, const cupool_origin_t *o, enum cupool_free_how how)
{
    return free_block(c, o, how);
}

int cupool_free_keeps_block(const cupool_origin_t *o)
{
    /* During a capture neither the legacy stream nor a context-wide
     * synchronization may be touched: the block is held until it ends. */
    if (cupool_capturing()) return 1;
    int mode = atomic_load_explicit(&o->owner->mode, memory_order_relaxed);
    return mode == CUPOOL_FREE_DEFERRED || (mode == CUPOOL_FREE_ORDERED && cupool_ordered_keeps(o->size));
}

static CUresult free_kept(cupool_context_t *c, const cupool_origin_t *o);

/* The free's mode dispatch: inline in the fast path, out of line for the
 * shims (cupool_free_block).  A block freed now goes back to its pool on
 * the legacy stream in `ordered` (ordered after the legacy, blocking and
 * per-thread streams' uses in stream order too, not only in time), after a
 * synchronization of the context otherwise (`sync`, or a block no mode
 * keeps); a kept block goes to the store of its mode. */
static inline CUresult free_block(cupool_context_t *c, const cupool_origin_t *o, enum cupool_free_how how)
{
    if (how == CUPOOL_FREE_KEPT) return free_kept(c, o);
    if (atomic_load_explicit(&c->mode, memory_order_relaxed) != CUPOOL_FREE_ORDERED) return cupool_free_sync(o);
    CUresult r = cupool_ordered_free(c, o->ptr);
    return CUPOOL_LIKELY(r == CUDA_SUCCESS) ? r : cupool_free_failed(o, r);
}

static CUresult free_not_kept(cupool_context_t *c, const cupool_origin_t *o);

/* A block cupool keeps for a while: `ordered`'s store (ordered_keep.c),
 * else `deferred`'s fences (deferred_fence.c; held until its end while a
 * capture is in progress).  The mode may have moved on since the block was
 * kept: then deferred. */
static CUresult free_kept(cupool_context_t *c, const cupool_origin_t *o)
{
    if (CUPOOL_UNLIKELY(cupool_capturing())) return cupool_defer_held(c, o);
    if (atomic_load_explicit(&c->mode, memory_order_relaxed) == CUPOOL_FREE_ORDERED)
        return cupool_ordered_keep(c, o) ? CUDA_SUCCESS : free_not_kept(c, o);
    return cupool_defer(c, o);
}

/* ---- frees made now -------------------------------------------------------- */

/* An `ordered` free the store did not keep: back to the pool at once, as
 * `ordered` frees what it does not keep (free_block, with the block no
 * longer kept: the mode may have moved on meanwhile).  Out of line: the
 * kept free's frame then holds no slot for the pointer the driver queue is
 * handed. */
static __attribute__((noinline)) CUresult free_not_kept(cupool_context_t *c, const cupool_origin_t *o)
{
    cupool_origin_t gone;
    cupool_origin_remove(o->ptr, &gone);
    if (atomic_load_explicit(&c->mode, memory_order_relaxed) != CUPOOL_FREE_ORDERED) return cupool_free_sync(o);
    CUresult r = cupool_queue_free(c, o->ptr);
    return CUPOOL_LIKELY(r == CUDA_SUCCESS) ? r : cupool_free_failed(o, r);
}

CUresult cupool_free_sync(const cupool_origin_t *o)
{
    /* The whole context first, then on the legacy stream as ordered, both
     * counted as a legacy-stream call (a capture beginning on another
     * thread waits for them); a capture in progress holds the block until
     * it has ended. */
    if (!cupool_legacy_enter()) return cupool_defer_held(o->owner, o);
    CUresult r = real_cuCtxSynchronize();
    if (r == CUDA_SUCCESS) r = cupool_give_back(o->ptr, CU_STREAM_LEGACY);
    cupool_legacy_leave();
    return r == CUDA_SUCCESS ? r : cupool_restore_block(o, r);
}

__attribute__((noinline, cold)) CUresult cupool_free_failed(const cupool_origin_t *o, CUresult r)
{
    if (r == CUPOOL_CAPTURE_IN_PROGRESS) return cupool_defer_held(o->owner, o);
    cupool_warn_give_back(o->ptr, r);
    return cupool_restore_block(o, r);
}
