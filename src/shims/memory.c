/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The allocation shims: cuMemAlloc, cuMemAllocPitch and cuMemFree served
 * from the device's pools in the free mode of the calling context
 * (engine/registry.c), with the pointer-origin table (engine/origin.c) remembering where
 * each block came from.  Whatever cupool cannot serve (policy off, sizes out
 * of range, CUPOOL_LIMIT reached, a pool failure) goes to the real driver,
 * whose result the program then sees.  Out of memory: trim and retry, then
 * the real cuMemAlloc, then CUDA_ERROR_OUT_OF_MEMORY.  A cuMemFree of
 * managed memory goes to the kept store (engine/kept_store.c, shims/host.c).
 */
#include "../engine/engine.h"
#include "../engine/share.h"

/* Allocation pitch the driver uses for cuMemAllocPitch on current GPUs. */
#define PITCH_ALIGNMENT 512

/* Private stream, complete before this returns: the block is ready for
 * every stream.  Out of line, so that the ordered path saves no registers. */
static __attribute__((noinline)) CUresult pool_alloc_private(cupool_context_t *c, CUmemoryPool pool,
                                                             CUdeviceptr *dptr, size_t size)
{
    CUstreamCaptureMode previous = cupool_relaxed_begin();
    CUresult r = real_cuMemAllocFromPoolAsync(dptr, size, pool, c->private_stream);
    if (r == CUDA_SUCCESS) {
        /* The stream holds nothing the GPU must run (frees of blocks whose
         * users are done, waits on completed events), so the allocation is
         * nearly always complete at once: a query says so for less than a
         * synchronize costs (PyTorch on a non-blocking stream, H200: a step
         * 17.7/20.7 ms -> 16.6/17.8 ms in two rounds).  Both promise the
         * same: every operation of the stream has completed. */
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

static inline CUresult pool_alloc_once(cupool_context_t *c, CUmemoryPool pool, CUdeviceptr *dptr, size_t size,
                                       int *mode)
{
    *mode = atomic_load_explicit(&c->mode, memory_order_relaxed);
    if (*mode == CUPOOL_FREE_DEFERRED && !cupool_capturing()) {
        /* A block of this size freed earlier, whose users are all done
         * (it reclaims too, under the lock it takes anyway). */
        if (cupool_deferred_reuse(c, size, dptr)) return CUDA_SUCCESS;
    } else if (CUPOOL_UNLIKELY(cupool_reclaim_due(c))) {
        cupool_reclaim(c, 0);
        *mode = atomic_load_explicit(&c->mode, memory_order_relaxed);
    }
    if (*mode == CUPOOL_FREE_ORDERED && !cupool_capturing()) {
        CUresult r = cupool_ordered_alloc(c, pool, dptr, size);
        /* A capture that began meanwhile keeps it off the legacy stream. */
        if (r != CUPOOL_CAPTURE_IN_PROGRESS) return r;
    }
    return pool_alloc_private(c, pool, dptr, size);
}

/* Before an allocation that ran out of memory is tried again: the memory
 * the pools keep on c's device may be what is missing.  Counted. */
static void trim_for_retry(cupool_context_t *c)
{
    atomic_fetch_add(&cupool_stats_for(c->device->ordinal)->oom_retries, 1);
    cupool_trim_device(c);
    /* Kept managed blocks may hold device memory too. */
    cupool_kept_release(0);
}

/* asked: the other processes on the device were asked for this
 * allocation already (share.c); else they are, once cupool's own trim has
 * not been enough. */
static CUresult native_alloc(cupool_context_t *c, CUdeviceptr *dptr, size_t size, cupool_call_t *call, int asked)
{
    call->route = CUPOOL_ROUTE_NATIVE;
    CUresult r = real_cuMemAlloc_v2(dptr, size);
    if (r == CUDA_ERROR_OUT_OF_MEMORY && c && c->device->pooled) {
        trim_for_retry(c);
        r = real_cuMemAlloc_v2(dptr, size);
    }
    if (r == CUDA_ERROR_OUT_OF_MEMORY && c && !asked && cupool_share_reclaim(c, size)) r = real_cuMemAlloc_v2(dptr, size);
    if (r == CUDA_SUCCESS) cupool_stats_alloc(call->device, CUPOOL_ROUTE_NATIVE, size);
    return r;
}

/* ---- the fast paths ---------------------------------------------------------
 * What nearly every allocation and free of a program under cupool's default
 * settings needs: one pool for every size, the context `ordered` (or
 * `sync`), no capture in progress, no log, statistics or limit
 * (cupool_hot.fast).  It is served here with the pool calls (in `ordered`
 * the store of freed blocks first) and the origin table, reading the hot
 * line, the thread's line (its context cache, where it also counts what it
 * serves), the context's first line and the block's shard and entry: the
 * general path below reads about twice as many cache lines, which the
 * driver's own calls evict between two of cupool's.  Anything else
 * (`deferred`, a failed pool call, a thread whose context cache misses)
 * returns 0 before it changed anything, and the general path decides from
 * the start. */

/* The free mode the fast paths serve a context in now, or 0: `ordered` or
 * `sync`, with no capture in progress (which needs the general paths). */
static inline int fast_mode(const cupool_context_t *c)
{
    _Static_assert(CUPOOL_FREE_ORDERED == 1 && CUPOOL_FREE_DEFERRED == 2 && CUPOOL_FREE_SYNC == 3,
                   "ordered and sync are the odd modes: one test, where two cost a pair 3 instructions");
    int mode = atomic_load_explicit(&c->mode, memory_order_relaxed);
    if (!(mode & 1) || cupool_capturing()) return 0;
    return mode;
}

/* Serves cuMemAlloc as the general path does in `ordered` (a block of its
 * size the context freed earlier, or from the pool in stream order on the
 * legacy stream) and `sync` (from the pool on cupool's stream, complete
 * before it returns); 1 when served. */
static inline int alloc_fast(CUdeviceptr *dptr, size_t size)
{
    if (!atomic_load_explicit(&cupool_hot.fast, memory_order_acquire) || !dptr || !size) return 0;
    cupool_context_t *c = cupool_cached_context();
    int mode;
    if (!c || !c->any_size_pool || !(mode = fast_mode(c)) || cupool_reclaim_due(c)) return 0;
    /* A failure, or a capture that began meanwhile: the general path. */
    CUresult r = CUPOOL_LIKELY(mode == CUPOOL_FREE_ORDERED) ? cupool_ordered_alloc(c, c->any_size_pool, dptr, size)
                                                           : pool_alloc_private(c, c->any_size_pool, dptr, size);
    if (r != CUDA_SUCCESS) return 0;
    cupool_origin_t origin = {.ptr = *dptr, .size = size, .owner = c, .pool = c->any_size_pool, .mode = mode};
    if (CUPOOL_UNLIKELY(cupool_origin_insert(&origin) != 0)) {
        /* Complete, or ordered after its allocation: either way (a
         * capture that began meanwhile: after it). */
        if (cupool_ordered_free(c, *dptr) == CUPOOL_CAPTURE_IN_PROGRESS) cupool_free_block_slow(c, &origin, 1);
        return 0;
    }
    cupool_stats_fast_alloc(size);
    return 1;
}

/* What the fast free does with a block (arg: the calling thread's context
 * state): nothing unless the block's context is that one and the fast
 * paths serve it now; in `ordered` it keeps the block for reuse unless
 * CUPOOL_ORDERED_READY says no; otherwise it frees it at once. */
static CUPOOL_HOT_PATH enum cupool_origin_action fast_free_action(const cupool_origin_t *o, const void *current)
{
    int mode;
    if (o->owner != current || o->exported || !(mode = fast_mode(o->owner))) return CUPOOL_ORIGIN_LEAVE;
    return mode == CUPOOL_FREE_ORDERED && cupool_ordered_keeps(o->size) ? CUPOOL_ORIGIN_KEEP : CUPOOL_ORIGIN_REMOVE;
}

/* Serves cuMemFree of a block fast_free_action() takes; 1 when served,
 * *result then holds the driver's answer (a refused free leaves the block
 * the program's, as on the general path). */
static inline int free_fast(CUdeviceptr dptr, CUresult *result)
{
    if (!atomic_load_explicit(&cupool_hot.fast, memory_order_acquire) || !dptr) return 0;
    cupool_context_t *c = cupool_cached_context();
    cupool_origin_t o;
    enum cupool_origin_action action = c ? cupool_origin_take(dptr, &o, fast_free_action, c) : CUPOOL_ORIGIN_LEAVE;
    if (action == CUPOOL_ORIGIN_LEAVE) return 0;
    if (action == CUPOOL_ORIGIN_KEEP) {
        *result = cupool_free_block_slow(c, &o, 1);
    } else if (CUPOOL_UNLIKELY(atomic_load_explicit(&c->mode, memory_order_relaxed) == CUPOOL_FREE_SYNC)) {
        *result = cupool_free_sync(&o);
    } else {
        *result = cupool_ordered_free(c, dptr);
        if (CUPOOL_UNLIKELY(*result != CUDA_SUCCESS)) *result = cupool_free_failed(&o, *result);
    }
    if (CUPOOL_LIKELY(*result == CUDA_SUCCESS)) cupool_stats_fast_free(o.size);
    else cupool_stats_count(CUPOOL_SYM_cuMemFree_v2);
    return 1;
}

/* ---- the general paths ------------------------------------------------------ */

/* Shared by cuMemAlloc and cuMemAllocPitch. */
static CUresult allocate(CUdeviceptr *dptr, size_t size, cupool_call_t *call)
{
    cupool_context_t *c = NULL;
    CUmemoryPool pool = NULL;
    if (dptr && size && cupool_active() && (c = cupool_current_context())) {
        call->device = c->device->ordinal;
        pool = cupool_pick_pool(c->device, size);
    }
    if (!pool) return native_alloc(c, dptr, size, call, 0);

    CUresult r = pool_alloc_once(c, pool, dptr, size, &call->mode);
    int asked = 0;
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        trim_for_retry(c);
        r = pool_alloc_once(c, pool, dptr, size, &call->mode);
        /* Still short: what the other processes on the device hold idle. */
        if (r == CUDA_ERROR_OUT_OF_MEMORY) {
            asked = 1;
            if (cupool_share_reclaim(c, size)) r = pool_alloc_once(c, pool, dptr, size, &call->mode);
        }
    }
    if (r != CUDA_SUCCESS) {
        if (r != CUDA_ERROR_OUT_OF_MEMORY)
            cupool_message(CUPOOL_MSG_WARN, "pool allocation of %zu bytes failed (%s); using cuMemAlloc", size,
                           cupool_result_name(r));
        return native_alloc(c, dptr, size, call, asked);
    }
    cupool_origin_t origin = {.ptr = *dptr, .size = size, .owner = c, .pool = pool, .mode = call->mode};
    if (cupool_origin_insert(&origin) != 0) {
        /* Without a record the free could not find its pool: go native. */
        cupool_message_once(CUPOOL_MSG_WARN, "out of host memory for the origin table; using cuMemAlloc");
        cupool_free_block(c, &origin, cupool_free_keeps_block(&origin));
        return native_alloc(c, dptr, size, call, asked);
    }
    cupool_device_used(c->device, (int64_t)size);
    call->route = CUPOOL_ROUTE_POOL;
    call->ptr = *dptr;
    cupool_stats_alloc(call->device, CUPOOL_ROUTE_POOL, size);
    if (cupool_hot.timing) {
        call->reserved = cupool_device_reserved_recent(c->device, call->start_ns);
        cupool_stats_reserved(call->device, call->reserved, cupool_deferred_ready_bytes(c),
                              cupool_deferred_waiting_bytes(c));
    }
    return CUDA_SUCCESS;
}

static __attribute__((noinline)) CUresult alloc_general(CUdeviceptr *dptr, size_t bytesize)
{
    CUPOOL_SHIM_BEGIN(call, cuMemAlloc_v2);
    call.size = bytesize;
    CUresult r = allocate(dptr, bytesize, &call);
    if (r == CUDA_SUCCESS) call.ptr = *dptr;
    return cupool_call_end(&call, r);
}

CUPOOL_EXPORT CUPOOL_HOT_PATH CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    if (CUPOOL_LIKELY(alloc_fast(dptr, bytesize))) return CUDA_SUCCESS;
    return alloc_general(dptr, bytesize);
}

CUPOOL_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                          unsigned int ElementSizeBytes)
{
    CUPOOL_SHIM_BEGIN(call, cuMemAllocPitch_v2);
    size_t pitch = (WidthInBytes + PITCH_ALIGNMENT - 1) / PITCH_ALIGNMENT * PITCH_ALIGNMENT;
    int valid = dptr && pPitch && WidthInBytes && Height && pitch >= WidthInBytes &&
                (ElementSizeBytes == 4 || ElementSizeBytes == 8 || ElementSizeBytes == 16) &&
                Height <= SIZE_MAX / pitch;
    /* Bad arguments get the driver's own answer. */
    if (!valid) {
        call.route = CUPOOL_ROUTE_NATIVE;
        return cupool_call_end(&call, real_cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes));
    }
    call.size = pitch * Height;
    CUresult r = allocate(dptr, pitch * Height, &call);
    if (r == CUDA_SUCCESS) {
        *pPitch = pitch;
        call.ptr = *dptr;
    }
    return cupool_call_end(&call, r);
}

static __attribute__((noinline)) CUresult free_general(CUdeviceptr dptr);

/* Whether cupool holds a freed block for a while: never one another process
 * may have open (ipc.c decides what becomes of it). */
static int free_keeps(const cupool_origin_t *o)
{
    return !o->exported && cupool_free_keeps_block(o);
}

/* A block that a cuIpcGetMemHandle handle names: 1 when another process
 * still has it open, and ipc.c now holds it; otherwise it is an ordinary
 * block again.  The context is current. */
static int held_for_importers(cupool_origin_t *o)
{
    if (CUPOOL_LIKELY(!o->exported)) return 0;
    if (cupool_ipc_owner_frees(o)) return 1;
    o->exported = 0;
    return 0;
}

CUPOOL_EXPORT CUPOOL_HOT_PATH CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    CUresult fast;
    if (CUPOOL_LIKELY(free_fast(dptr, &fast))) return fast;
    return free_general(dptr);
}

static CUresult free_general(CUdeviceptr dptr)
{
    CUPOOL_SHIM_BEGIN(call, cuMemFree_v2);
    call.ptr = dptr;
    cupool_origin_t o;
    int kept = 0;
    int claimed = dptr && cupool_active() ? cupool_origin_claim(dptr, &o, free_keeps, &kept) : -1;
    if (claimed < 0) {
        /* Managed memory the kept store tracks: kept for the next
         * allocation of its flags and size. */
        CUresult managed;
        if (cupool_kept_free(0, (uintptr_t)dptr, &call.size, &call.flags, &call.route, &managed)) {
            call.kind = CUPOOL_KIND_MANAGED;
            return cupool_call_end(&call, managed);
        }
        /* Not ours (or nothing): the driver decides, errors included. */
        call.route = CUPOOL_ROUTE_NATIVE;
        CUresult r = real_cuMemFree_v2(dptr);
        if (r == CUDA_SUCCESS && dptr) cupool_stats_free(-1, CUPOOL_ROUTE_NATIVE, 0);
        return cupool_call_end(&call, r);
    }
    cupool_context_t *c = o.owner;
    call.route = CUPOOL_ROUTE_POOL;
    call.size = o.size;
    call.device = c->device->ordinal;
    /* A second free of a block still waiting to go back to its pool: what the
     * driver answers for freeing memory that is no longer allocated. */
    if (claimed == 1) return cupool_call_end(&call, CUDA_ERROR_INVALID_VALUE);
    call.mode = atomic_load_explicit(&c->mode, memory_order_relaxed);
    /* A free runs in the context that allocated the block.  The block stops
     * counting as in use first: a deferred free may put it in the ready
     * store, whose room under CUPOOL_LIMIT is what the blocks in use leave. */
    cupool_device_used(c->device, -(int64_t)o.size);
    int pushed = cupool_enter_context(c->ctx);
    CUresult r = held_for_importers(&o) ? CUDA_SUCCESS : cupool_free_block(c, &o, kept);
    cupool_leave_context(pushed);
    /* A free that failed left the block the program's. */
    if (r == CUDA_SUCCESS) cupool_stats_free(call.device, CUPOOL_ROUTE_POOL, o.size);
    else cupool_device_used(c->device, (int64_t)o.size);
    if (cupool_hot.timing) call.reserved = cupool_device_reserved_recent(c->device, call.start_ns);
    return cupool_call_end(&call, r);
}

CUPOOL_EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    CUPOOL_SHIM_BEGIN(call, cuMemGetInfo_v2);
    CUresult r = real_cuMemGetInfo_v2(free, total);
    cupool_context_t *c;
    if (r == CUDA_SUCCESS && free && total && cupool_active() && (c = cupool_current_context()) && c->device->pooled) {
        /* What the pools hold but do not use is free for the program, and
         * so are the blocks this context keeps ready for reuse (engine/ready_store.c;
         * under `auto` a second context on the device means `sync`, which
         * keeps none).  With CUPOOL_SHARE_INFO, so is what the other
         * cupool processes on the device hold idle: an allocation that
         * needs it gets it from them (share.c). */
        uint64_t idle = cupool_device_reserved_unused(c->device) + cupool_deferred_ready_bytes(c) +
                        cupool_share_peers_idle(c);
        *free = *free + idle > *total ? *total : *free + idle;
        call.device = c->device->ordinal;
    }
    return cupool_call_end(&call, r);
}

/* ---- the program's own stream-ordered allocations ----------------------------
 * cupool passes them to the driver untouched, but what its pools keep on the
 * device may be the memory such an allocation is missing (natively it would
 * be there): on CUDA_ERROR_OUT_OF_MEMORY cupool hands back what it holds on
 * the current context's device, as for its own allocations, and the driver
 * is asked once more.  Not during a capture, where the allocation becomes a
 * graph node and the hand-back could not synchronize. */
static int trimmed_for(CUresult r)
{
    cupool_context_t *c;
    if (r != CUDA_ERROR_OUT_OF_MEMORY || !cupool_active() || cupool_capturing() || !(c = cupool_current_context()) ||
        !c->device->pooled)
        return 0;
    trim_for_retry(c);
    return 1;
}

static CUresult own_alloc_done(cupool_call_t *call, CUresult r, const CUdeviceptr *dptr, size_t size,
                               CUstream stream)
{
    call->route = CUPOOL_ROUTE_NATIVE;
    call->size = size;
    call->stream = stream;
    if (r == CUDA_SUCCESS) call->ptr = *dptr;
    return r;
}

CUPOOL_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream stream)
{
    CUPOOL_SHIM_BEGIN(call, cuMemAllocAsync);
    CUresult r = real_cuMemAllocAsync(dptr, size, stream);
    if (trimmed_for(r)) r = real_cuMemAllocAsync(dptr, size, stream);
    return cupool_call_end(&call, own_alloc_done(&call, r, dptr, size, stream));
}

CUPOOL_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream stream)
{
    CUPOOL_SHIM_BEGIN(call, cuMemAllocAsync_ptsz);
    CUresult r = real_cuMemAllocAsync_ptsz(dptr, size, stream);
    if (trimmed_for(r)) r = real_cuMemAllocAsync_ptsz(dptr, size, stream);
    return cupool_call_end(&call, own_alloc_done(&call, r, dptr, size, stream));
}

CUPOOL_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream stream)
{
    CUPOOL_SHIM_BEGIN(call, cuMemAllocFromPoolAsync);
    CUresult r = real_cuMemAllocFromPoolAsync(dptr, size, pool, stream);
    if (trimmed_for(r)) r = real_cuMemAllocFromPoolAsync(dptr, size, pool, stream);
    return cupool_call_end(&call, own_alloc_done(&call, r, dptr, size, stream));
}

CUPOOL_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t size, CUmemoryPool pool,
                                                   CUstream stream)
{
    CUPOOL_SHIM_BEGIN(call, cuMemAllocFromPoolAsync_ptsz);
    CUresult r = real_cuMemAllocFromPoolAsync_ptsz(dptr, size, pool, stream);
    if (trimmed_for(r)) r = real_cuMemAllocFromPoolAsync_ptsz(dptr, size, pool, stream);
    return cupool_call_end(&call, own_alloc_done(&call, r, dptr, size, stream));
}

/* The program frees a block cupool made with its own stream-ordered free:
 * the driver does the free, cupool forgets the record.  A block the program
 * already freed (still waiting in a deferred list) gets the driver's answer
 * to a double free without reaching the driver. */
static CUresult free_async(CUresult (*real)(CUdeviceptr, CUstream), CUdeviceptr dptr, CUstream stream,
                           cupool_call_t *call)
{
    call->ptr = dptr;
    call->stream = stream;
    cupool_origin_t o;
    int known = dptr && cupool_active() ? cupool_origin_find(dptr, &o) : -1;
    if (known == 0 && o.freed) return CUDA_ERROR_INVALID_VALUE;
    /* The record goes first: once the driver has the block back, another
     * thread may be handed the same address and record it. */
    if (known == 0 && cupool_origin_remove(dptr, &o) != 0) known = -1;
    int pushed = known == 0 && o.exported ? cupool_enter_context(o.owner->ctx) : 0;
    int held = known == 0 && held_for_importers(&o);
    cupool_leave_context(pushed);
    CUresult r = held ? CUDA_SUCCESS : real(dptr, stream);
    if (known != 0) return r;
    if (r != CUDA_SUCCESS) {
        cupool_origin_insert(&o);
        return r;
    }
    cupool_device_used(o.owner->device, -(int64_t)o.size);
    call->device = o.owner->device->ordinal;
    call->size = o.size;
    call->route = CUPOOL_ROUTE_POOL;
    cupool_stats_free(call->device, CUPOOL_ROUTE_POOL, o.size);
    return r;
}

CUPOOL_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    CUPOOL_SHIM_BEGIN(call, cuMemFreeAsync);
    return cupool_call_end(&call, free_async(real_cuMemFreeAsync, dptr, hStream, &call));
}

CUPOOL_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    CUPOOL_SHIM_BEGIN(call, cuMemFreeAsync_ptsz);
    return cupool_call_end(&call, free_async(real_cuMemFreeAsync_ptsz, dptr, hStream, &call));
}
