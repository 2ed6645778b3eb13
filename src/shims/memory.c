/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The allocation shims: cuMemAlloc, cuMemAllocPitch and cuMemFree served
 * from the device's pools in the free mode of the calling context, with the
 * pointer-origin table (engine/origin.c) remembering where each block came
 * from.  The engine's fast paths come first (cupool_alloc_fast,
 * cupool_free_fast); the general paths here keep the call's record for the
 * log and statistics and leave the mode dispatch to the engine
 * (cupool_alloc_block, engine/alloc.c; cupool_free_block,
 * engine/free/free_modes.c).  Whatever cupool cannot serve (policy off, sizes
 * out of range, CUPOOL_LIMIT reached, a pool failure) goes to the real
 * driver, whose result the program then sees.  Out of memory: trim and
 * retry, then the real cuMemAlloc, then CUDA_ERROR_OUT_OF_MEMORY.  A
 * cuMemFree of managed memory goes to the kept store (engine/kept_store.c,
 * shims/host.c).
 */
#include "../engine/engine.h"
#include "../engine/share.h"

/* Allocation pitch the driver uses for cuMemAllocPitch on current GPUs. */
#define PITCH_ALIGNMENT 512

/* asked: the other processes on the device were asked for this
 * allocation already (share.c); else they are, once cupool's own trim has
 * not been enough. */
static CUresult native_alloc(cupool_context_t *c, CUdeviceptr *dptr, size_t size, cupool_call_t *call, int asked)
{
    call->route = CUPOOL_ROUTE_NATIVE;
    CUresult r = real_cuMemAlloc_v2(dptr, size);
    if (r == CUDA_ERROR_OUT_OF_MEMORY && c && cupool_context_pooled(c)) {
        cupool_trim_for_retry(c);
        r = real_cuMemAlloc_v2(dptr, size);
    }
    if (r == CUDA_ERROR_OUT_OF_MEMORY && c && !asked && cupool_share_reclaim(c, size)) r = real_cuMemAlloc_v2(dptr, size);
    if (r == CUDA_SUCCESS) cupool_stats_alloc(call->device, CUPOOL_ROUTE_NATIVE, size);
    return r;
}

/* ---- the general paths ------------------------------------------------------ */

/* Shared by cuMemAlloc and cuMemAllocPitch. */
static CUresult allocate(CUdeviceptr *dptr, size_t size, cupool_call_t *call)
{
    cupool_context_t *c = NULL;
    CUmemoryPool pool = NULL;
    if (dptr && size && cupool_active() && (c = cupool_current_context())) {
        call->device = cupool_context_ordinal(c);
        pool = cupool_pick_pool(c, size);
    }
    if (!pool) return native_alloc(c, dptr, size, call, 0);

    unsigned long takes = cupool_store_takes;
    CUresult r = cupool_alloc_block(c, pool, dptr, size, &call->mode);
    int asked = 0;
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        cupool_trim_for_retry(c);
        r = cupool_alloc_block(c, pool, dptr, size, &call->mode);
        /* Still short: what the other processes on the device hold idle. */
        if (r == CUDA_ERROR_OUT_OF_MEMORY) {
            asked = 1;
            if (cupool_share_reclaim(c, size)) r = cupool_alloc_block(c, pool, dptr, size, &call->mode);
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
    cupool_context_used(c, (int64_t)size);
    call->route = CUPOOL_ROUTE_POOL;
    call->ptr = *dptr;
    call->from_store = cupool_store_takes != takes;
    cupool_stats_alloc(call->device, CUPOOL_ROUTE_POOL, size);
    if (cupool_hot.timing) {
        call->reserved = cupool_context_reserved_recent(c, call->start_ns);
        cupool_stats_reserved(call->device, call->reserved, cupool_context_ready_bytes(c),
                              cupool_context_waiting_bytes(c));
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
    if (CUPOOL_LIKELY(cupool_alloc_fast(dptr, bytesize))) return CUDA_SUCCESS;
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
 * may have open (ipc_export.c decides what becomes of it). */
static int free_keeps(const cupool_origin_t *o)
{
    return !o->exported && cupool_free_keeps_block(o);
}

/* A block that a cuIpcGetMemHandle handle names: 1 when another process
 * still has it open, and ipc_export.c now holds it; otherwise it is an
 * ordinary block again.  The context is current. */
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
    if (CUPOOL_LIKELY(cupool_free_fast(dptr, &fast))) return fast;
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
        if (cupool_kept_free(CUPOOL_KEPT_CLASS_MANAGED, (uintptr_t)dptr, &call.size, &call.flags, &call.route, &managed)) {
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
    call.device = cupool_context_ordinal(c);
    /* A second free of a block still waiting to go back to its pool: what the
     * driver answers for freeing memory that is no longer allocated. */
    if (claimed == 1) return cupool_call_end(&call, CUDA_ERROR_INVALID_VALUE);
    call.mode = cupool_context_mode(c);
    /* A free runs in the context that allocated the block.  The block stops
     * counting as in use first: a deferred free may put it in the ready
     * store, whose room under CUPOOL_LIMIT is what the blocks in use leave. */
    cupool_context_used(c, -(int64_t)o.size);
    int pushed = cupool_enter_context(cupool_context_handle(c));
    CUresult r = held_for_importers(&o) ? CUDA_SUCCESS : cupool_free_block(c, &o, kept);
    cupool_leave_context(pushed);
    /* A free that failed left the block the program's. */
    if (r == CUDA_SUCCESS) cupool_stats_free(call.device, CUPOOL_ROUTE_POOL, o.size);
    else cupool_context_used(c, (int64_t)o.size);
    if (cupool_hot.timing) call.reserved = cupool_context_reserved_recent(c, call.start_ns);
    return cupool_call_end(&call, r);
}

CUPOOL_EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    CUPOOL_SHIM_BEGIN(call, cuMemGetInfo_v2);
    CUresult r = real_cuMemGetInfo_v2(free, total);
    cupool_context_t *c;
    if (r == CUDA_SUCCESS && free && total && cupool_active() && (c = cupool_current_context()) &&
        cupool_context_pooled(c)) {
        /* What the pools hold but do not use is free for the program, and
         * so are the blocks this context keeps ready for reuse (engine/free/ready_store.c;
         * under `auto` a second context on the device means `sync`, which
         * keeps none).  With CUPOOL_SHARE_INFO, so is what the other
         * cupool processes on the device hold idle: an allocation that
         * needs it gets it from them (share.c). */
        uint64_t idle = cupool_context_idle_bytes(c) + cupool_share_peers_idle(c);
        *free = *free + idle > *total ? *total : *free + idle;
        call.device = cupool_context_ordinal(c);
    }
    return cupool_call_end(&call, r);
}

/* ---- the program's own stream-ordered allocations ----------------------------
 * cupool passes them to the driver untouched, but what its pools keep on the
 * device may be the memory such an allocation is missing (natively it would
 * be there): on CUDA_ERROR_OUT_OF_MEMORY cupool hands back what it holds on
 * the current context's device, as for its own allocations, and the driver
 * is asked once more.  Not during a capture, where the allocation becomes a
 * graph node and the hand-back could not synchronize.  Each of these calls,
 * and the program's stream-ordered frees, gives its stream work: the work
 * tracker hears of it first, as of every call of shims/work.c. */
static int trimmed_for(CUresult r)
{
    cupool_context_t *c;
    if (r != CUDA_ERROR_OUT_OF_MEMORY || !cupool_active() || cupool_capturing() || !(c = cupool_current_context()) ||
        !cupool_context_pooled(c))
        return 0;
    cupool_trim_for_retry(c);
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
    cupool_work_t work = cupool_work_begin(stream, 0);
    CUresult r = real_cuMemAllocAsync(dptr, size, stream);
    if (trimmed_for(r)) r = real_cuMemAllocAsync(dptr, size, stream);
    cupool_work_end(&work);
    return cupool_call_end(&call, own_alloc_done(&call, r, dptr, size, stream));
}

CUPOOL_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream stream)
{
    CUPOOL_SHIM_BEGIN(call, cuMemAllocAsync_ptsz);
    cupool_work_t work = cupool_work_begin(stream, 1);
    CUresult r = real_cuMemAllocAsync_ptsz(dptr, size, stream);
    if (trimmed_for(r)) r = real_cuMemAllocAsync_ptsz(dptr, size, stream);
    cupool_work_end(&work);
    return cupool_call_end(&call, own_alloc_done(&call, r, dptr, size, stream));
}

CUPOOL_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream stream)
{
    CUPOOL_SHIM_BEGIN(call, cuMemAllocFromPoolAsync);
    cupool_work_t work = cupool_work_begin(stream, 0);
    CUresult r = real_cuMemAllocFromPoolAsync(dptr, size, pool, stream);
    if (trimmed_for(r)) r = real_cuMemAllocFromPoolAsync(dptr, size, pool, stream);
    cupool_work_end(&work);
    return cupool_call_end(&call, own_alloc_done(&call, r, dptr, size, stream));
}

CUPOOL_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t size, CUmemoryPool pool,
                                                   CUstream stream)
{
    CUPOOL_SHIM_BEGIN(call, cuMemAllocFromPoolAsync_ptsz);
    cupool_work_t work = cupool_work_begin(stream, 1);
    CUresult r = real_cuMemAllocFromPoolAsync_ptsz(dptr, size, pool, stream);
    if (trimmed_for(r)) r = real_cuMemAllocFromPoolAsync_ptsz(dptr, size, pool, stream);
    cupool_work_end(&work);
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
    int pushed = known == 0 && o.exported ? cupool_enter_context(cupool_context_handle(o.owner)) : 0;
    int held = known == 0 && held_for_importers(&o);
    cupool_leave_context(pushed);
    CUresult r = held ? CUDA_SUCCESS : real(dptr, stream);
    if (known != 0) return r;
    if (r != CUDA_SUCCESS) {
        cupool_origin_insert(&o);
        return r;
    }
    cupool_context_used(o.owner, -(int64_t)o.size);
    call->device = cupool_context_ordinal(o.owner);
    call->size = o.size;
    call->route = CUPOOL_ROUTE_POOL;
    cupool_stats_free(call->device, CUPOOL_ROUTE_POOL, o.size);
    return r;
}

CUPOOL_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    CUPOOL_SHIM_BEGIN(call, cuMemFreeAsync);
    cupool_work_t work = cupool_work_begin(hStream, 0);
    CUresult r = free_async(real_cuMemFreeAsync, dptr, hStream, &call);
    cupool_work_end(&work);
    return cupool_call_end(&call, r);
}

CUPOOL_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    CUPOOL_SHIM_BEGIN(call, cuMemFreeAsync_ptsz);
    cupool_work_t work = cupool_work_begin(hStream, 1);
    CUresult r = free_async(real_cuMemFreeAsync_ptsz, dptr, hStream, &call);
    cupool_work_end(&work);
    return cupool_call_end(&call, r);
}
