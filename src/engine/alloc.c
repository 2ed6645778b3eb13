/* SPDX-License-Identifier: Apache-2.0 */
/*
 * An allocation's path through the engine: the allocation's mode dispatch
 * (cupool_alloc_block: `deferred` takes a block freed earlier whose users
 * are done, `ordered` a block it kept or the pool on the legacy stream,
 * the rest the pool on cupool's own stream) and the fast path of cuMemAlloc
 * (cupool_alloc_fast), which the allocation shims (shims/memory.c) ask
 * first; and what an allocation that ran out of memory makes cupool hand
 * back before it is tried again (cupool_trim_for_retry), which drives the
 * free stores of every context on the device and the kept store, and so
 * sits above the registry (contexts.c, devices.c).  The free's
 * counterparts are free/free_modes.c.
 */
#include "free/free.h"

/* cupool's private stream, complete before this returns: the block is
 * ready for every stream.  Out of line, so that the ordered path saves no
 * registers. */
__attribute__((noinline)) CUresult cupool_alloc_private(cupool_context_t *c, CUmemoryPool pool, CUdeviceptr *dptr,
                                                        size_t size)
{
    CUstreamCaptureMode previous = cupool_relaxed_begin();
    CUresult r = real_cuMemAllocFromPoolAsync(dptr, size, pool, c->private_stream);
    if (r == CUDA_SUCCESS) {
        /* The stream holds nothing the GPU must run (frees of blocks whose
         * users are done, waits on completed events), so the allocation is
         * nearly always complete at once: a query says so for less than a
         * synchronize costs (PyTorch's steps are faster for it: docs/DESIGN.md,
         * "Measured costs behind the code").  Both promise the same: every
         * operation of the stream has completed. */
        CUresult s = real_cuStreamQuery(c->private_stream);
        if (s == CUDA_ERROR_NOT_READY) s = real_cuStreamSynchronize(c->private_stream);
        if (s != CUDA_SUCCESS) {
            real_cuMemFreeAsync(*dptr, c->private_stream);
            r = s;
        }
    }
    cupool_relaxed_end(previous);
    return r;
}

CUresult cupool_alloc_block(cupool_context_t *c, CUmemoryPool pool, CUdeviceptr *dptr, size_t size, int *mode)
{
    *mode = atomic_load_explicit(&c->mode, memory_order_relaxed);
    if (*mode == CUPOOL_FREE_DEFERRED && !cupool_capturing()) {
        /* A block of this size freed earlier, whose users are all done
         * (it reclaims too, under the lock it takes anyway). */
        if (cupool_deferred_reuse(c, size, dptr)) return CUDA_SUCCESS;
    } else if (CUPOOL_UNLIKELY(cupool_reclaim_due(c))) {
        cupool_reclaim(c);
        *mode = atomic_load_explicit(&c->mode, memory_order_relaxed);
    }
    if (*mode == CUPOOL_FREE_ORDERED && !cupool_capturing()) {
        CUresult r = cupool_ordered_alloc(c, pool, dptr, size);
        /* A capture that began meanwhile keeps it off the legacy stream. */
        if (r != CUPOOL_CAPTURE_IN_PROGRESS) return r;
    }
    return cupool_alloc_private(c, pool, dptr, size);
}

/* ---- the fast paths ---------------------------------------------------------
 * What nearly every allocation and free of a program under cupool's default
 * settings needs: one pool for every size, the context `ordered` (or
 * `sync`), no capture in progress, no log, statistics or limit
 * (cupool_hot.fast).  It is served here (and in free/free_modes.c,
 * cupool_free_fast) with the pool calls (in `ordered` the store of freed
 * blocks first) and the origin table, reading the hot line, the thread's
 * line (its context cache, where it also counts what it serves), the
 * context's first line and the block's shard and entry: the general path
 * of the shims reads about twice as many cache lines, which the driver's
 * own calls evict between two of cupool's.  Anything else (`deferred`, a
 * failed pool call, a thread whose context cache misses) returns 0 before
 * it changed anything, and the general path decides from the start.  The
 * shims call these from another file: link-time optimisation (configure's
 * --enable-lto, the default) inlines them there. */

/* A block the fast path allocated but could not record (no host memory
 * for the origin table) goes back to its pool: complete, or ordered after
 * its allocation, either way (a capture that began meanwhile: after it).
 * Out of line, so that the fast path's frame stays as small as its common
 * case needs. */
static __attribute__((noinline, cold)) void unrecorded(cupool_context_t *c, const cupool_origin_t *origin)
{
    if (cupool_ordered_free(c, origin->ptr) == CUPOOL_CAPTURE_IN_PROGRESS)
        cupool_free_block(c, origin, CUPOOL_FREE_KEPT);
}

/* Serves cuMemAlloc as the general path does in `ordered` (a block of its
 * size the context freed earlier, or from the pool in stream order on the
 * legacy stream) and `sync` (from the pool on cupool's stream, complete
 * before it returns); 1 when served. */
CUPOOL_HOT_PATH int cupool_alloc_fast(CUdeviceptr *dptr, size_t size)
{
    if (!atomic_load_explicit(&cupool_hot.fast, memory_order_acquire) || !dptr || !size) return 0;
    cupool_context_t *c = cupool_cached_context();
    int mode;
    if (!c || !c->any_size_pool || !(mode = cupool_fast_mode(c)) || cupool_reclaim_due(c)) return 0;
    /* A failure, or a capture that began meanwhile: the general path. */
    CUresult r = CUPOOL_LIKELY(mode == CUPOOL_FREE_ORDERED) ? cupool_ordered_alloc(c, c->any_size_pool, dptr, size)
                                                           : cupool_alloc_private(c, c->any_size_pool, dptr, size);
    if (r != CUDA_SUCCESS) return 0;
    cupool_origin_t origin = {.ptr = *dptr, .size = size, .owner = c, .pool = c->any_size_pool, .mode = mode};
    if (CUPOOL_UNLIKELY(cupool_origin_insert(&origin) != 0)) {
        unrecorded(c, &origin);
        return 0;
    }
    cupool_stats_fast_alloc(size);
    return 1;
}

/* ---- out of memory ---------------------------------------------------------- */

/* Hands back what one context holds freed (deferred, ready) when it is on
 * the device that ran out of memory (arg). */
static int reclaim_on_device(cupool_context_t *each, void *arg)
{
    if (each->device != arg) return 0;
    int pushed = cupool_enter_context(each->ctx);
    cupool_reclaim_all(each);
    cupool_leave_context(pushed);
    return 0;
}

/* Frees everything the pools no longer need on a device. */
static void trim_device(cupool_context_t *c)
{
    cupool_device_t *dev = c->device;
    /* Every context on the device: the blocks one holds freed (deferred,
     * ready) may be the memory another is missing. */
    cupool_each_context(reclaim_on_device, dev);
    CUstreamCaptureMode previous = cupool_relaxed_begin();
    if (atomic_load(&cupool_hot.captures) == 0) real_cuCtxSynchronize();
    for (int i = 0; i < dev->npools; i++) real_cuMemPoolTrimTo(dev->pools[i], 0);
    cupool_relaxed_end(previous);
    atomic_fetch_add(&cupool_stats_for(dev->ordinal)->trims, 1);
}

void cupool_trim_for_retry(cupool_context_t *c)
{
    atomic_fetch_add(&cupool_stats_for(c->device->ordinal)->oom_retries, 1);
    trim_device(c);
    /* Kept managed blocks may hold device memory too. */
    cupool_kept_release(CUPOOL_KEPT_CLASS_MANAGED);
}
