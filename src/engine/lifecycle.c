/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A context's end and the engine's start: the teardown of a context's
 * state when the program destroys the context, resets its device's primary
 * one or releases it for the last time (every block goes back to its pool,
 * as natively its memory dies with it, and what else must go with it: the
 * kept store's part, the blocks it exported); the engine's start-up; the
 * fork handlers; and what runs when the last capture in progress has
 * ended.  The list of contexts is contexts.c's (registry.h).
 */
#include "registry.h"

#include <stdlib.h>

/* ---- context teardown ---------------------------------------------------- */

static cupool_teardown_fn *teardown_hook;

void cupool_context_on_teardown(cupool_teardown_fn *fn)
{
    teardown_hook = fn;
}

static void free_on_legacy(const cupool_origin_t *o, void *arg)
{
    cupool_context_t *c = arg;
    real_cuMemFreeAsync(o->ptr, CU_STREAM_LEGACY);
    cupool_device_used(c->device, -(int64_t)o->size);
    cupool_stats_free(c->device->ordinal, CUPOOL_ROUTE_POOL, o->size);
}

/* Returns every block of the context to its pool and forgets the context:
 * natively its memory dies with it.  The context must be current. */
static void teardown_current(cupool_context_t *c)
{
    CUstreamCaptureMode previous = cupool_relaxed_begin();
    real_cuCtxSynchronize();
    pthread_mutex_lock(&c->lock);
    cupool_deferred_drop(c, c->private_stream);
    pthread_mutex_unlock(&c->lock);
    if (teardown_hook) teardown_hook(c, CUPOOL_CONTEXT_ALIVE);
    if (c->device->pooled) {
        cupool_origin_drain(c, free_on_legacy, c);
        cupool_ipc_forget_context(c);
        real_cuStreamSynchronize(c->private_stream);
        real_cuStreamDestroy_v2(c->private_stream);
    }
    if (c->fence_stream) real_cuStreamDestroy_v2(c->fence_stream);
    if (c->scratch_event) real_cuEventDestroy_v2(c->scratch_event);
    if (c->ordered_fence) real_cuEventDestroy_v2(c->ordered_fence);
    for (int i = 0; i < c->nspare; i++) real_cuEventDestroy_v2(c->spare_events[i]);
    cupool_relaxed_end(previous);
}

/* Unlinks and frees the state of ctx; called with cupool_registry_lock held. */
static cupool_context_t *unlink_context(CUcontext ctx)
{
    CUPOOL_ASSERT_HELD(&cupool_registry_lock);
    for (cupool_context_t **p = &cupool_contexts; *p; p = &(*p)->next) {
        if ((*p)->ctx != ctx) continue;
        cupool_context_t *c = *p;
        *p = c->next;
        c->device->contexts--;
        atomic_fetch_add(&cupool_hot.generation, 1);
        return c;
    }
    return NULL;
}

static void destroy_state(cupool_context_t *c)
{
    free(c->streams);
    free(c->blocking);
    free(c->spare_events);
    cupool_ready_drop_records(c);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static void forget_context(CUcontext ctx)
{
    pthread_mutex_lock(&cupool_registry_lock);
    cupool_context_t *c = unlink_context(ctx);
    pthread_mutex_unlock(&cupool_registry_lock);
    if (!c) return;
    int pushed = cupool_enter_context(ctx);
    teardown_current(c);
    cupool_leave_context(pushed);
    destroy_state(c);
}

/* The state of a device's primary context; cupool_registry_lock held. */
static cupool_context_t *primary_locked(int ordinal)
{
    CUPOOL_ASSERT_HELD(&cupool_registry_lock);
    cupool_context_t *c = cupool_contexts;
    while (c && !(c->primary && c->device->ordinal == ordinal)) c = c->next;
    return c;
}

static cupool_context_t *find_primary(int ordinal)
{
    pthread_mutex_lock(&cupool_registry_lock);
    cupool_context_t *c = primary_locked(ordinal);
    pthread_mutex_unlock(&cupool_registry_lock);
    return c;
}

/* Unlinks the primary context state of a device in one critical section, so
 * that of two threads releasing it at once only one tears it down. */
static cupool_context_t *unlink_primary(int ordinal)
{
    pthread_mutex_lock(&cupool_registry_lock);
    cupool_context_t *c = primary_locked(ordinal);
    if (c) c = unlink_context(c->ctx);
    pthread_mutex_unlock(&cupool_registry_lock);
    return c;
}

/* ---- start-up and fork --------------------------------------------------- */

/* The capture gate too: a child's capture must not wait for a thread of
 * the parent's that held it. */
static void fork_prepare(void)
{
    pthread_mutex_lock(&cupool_registry_lock);
    cupool_capture_gate_enter();
    cupool_origin_lock_all();
}

static void fork_parent(void)
{
    cupool_origin_unlock_all();
    cupool_capture_gate_leave();
    pthread_mutex_unlock(&cupool_registry_lock);
}

static void fork_child(void)
{
    cupool_origin_unlock_all();
    cupool_capture_gate_leave();
    pthread_mutex_unlock(&cupool_registry_lock);
    /* The parent's contexts are not the child's: pass everything through. */
    cupool_stop();
}

static void captures_ended(void);

void cupool_engine_start(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    cupool_capture_on_end(captures_ended);
    cupool_queue_decide();
    /* Under CUPOOL_LIMIT the store keeps no block larger than itself
     * (free/ordered_keep.c, cupool_ordered_keep): the limit's room is already
     * tight. */
    uint64_t keep = cupool_option(CUPOOL_OPT_ORDERED_READY), threshold = cupool_option(CUPOOL_OPT_RELEASE_THRESHOLD);
    if (keep && cupool_option(CUPOOL_OPT_LIMIT) == CUPOOL_SIZE_UNLIMITED) keep = UINT64_MAX;
    cupool_hot.ordered_keep_max = keep < threshold ? keep : threshold;
    int mode = (int)cupool_option(CUPOOL_OPT_FREE);
    atomic_store(&cupool_hot.fast, !cupool_hot.count_used && mode != CUPOOL_FREE_DEFERRED);
}

/* ---- what the context and peer-access shims tell the registry ------------ */

/* Whether cuCtxDestroy will destroy ctx: it must be a valid context and
 * not a device's primary one (those go with cuDevicePrimaryCtxRelease; the
 * driver refuses them here).  Tearing down cupool's state for a context the
 * driver then keeps would hand its live blocks out a second time. */
static int destroyable(CUcontext ctx)
{
    unsigned version;
    if (real_cuCtxGetApiVersion(ctx, &version) != CUDA_SUCCESS) return 0;
    pthread_mutex_lock(&cupool_registry_lock);
    cupool_context_t *c = cupool_context_find_locked(ctx);
    int primary = c && c->primary;
    pthread_mutex_unlock(&cupool_registry_lock);
    return !primary;
}

void cupool_context_destroying(CUcontext ctx)
{
    if (destroyable(ctx)) forget_context(ctx);
}

void cupool_primary_resetting(int ordinal)
{
    cupool_context_t *c = find_primary(ordinal);
    if (c) forget_context(c->ctx);
}

void cupool_primary_releasing(int ordinal)
{
    pthread_mutex_lock(&cupool_registry_lock);
    cupool_context_t *primary = primary_locked(ordinal);
    if (primary) cupool_ready_return_all(primary);
    pthread_mutex_unlock(&cupool_registry_lock);
}

/* A release that drops the last reference destroys the primary context, and
 * only the driver knows the count.  So release first and look: if the context
 * is gone, its blocks (which live in the device's pools, not in the context)
 * are handed back from a fresh primary context, as natively the context's
 * memory would have died with it. */
static void forget_dead_primary(cupool_context_t *c, int ordinal)
{
    CUcontext fresh;
    if (c->device->pooled && real_cuDevicePrimaryCtxRetain(&fresh, ordinal) == CUDA_SUCCESS) {
        int pushed = cupool_enter_context(fresh);
        CUstreamCaptureMode previous = cupool_relaxed_begin();
        cupool_origin_drain(c, free_on_legacy, c);
        /* Nobody else reaches c now: the lock only keeps the free store's
         * rule (its functions run with c->lock held). */
        pthread_mutex_lock(&c->lock);
        cupool_deferred_drop(c, CU_STREAM_LEGACY);
        pthread_mutex_unlock(&c->lock);
        real_cuCtxSynchronize();
        cupool_relaxed_end(previous);
        cupool_leave_context(pushed);
        real_cuDevicePrimaryCtxRelease_v2(ordinal);
    }
    /* The context's stream and events died with it: only host state is left. */
    if (teardown_hook) teardown_hook(c, CUPOOL_CONTEXT_GONE);
    destroy_state(c);
}

void cupool_primary_released(int ordinal)
{
    cupool_context_t *c = unlink_primary(ordinal);
    if (c) forget_dead_primary(c, ordinal);
}

/* The last capture in progress has ended: what waited for it (the
 * synchronization of a switch out of `ordered`, frees held during the
 * capture) happens now rather than at the context's next allocation. */
static void captures_ended(void)
{
    pthread_mutex_lock(&cupool_registry_lock);
    for (cupool_context_t *c = cupool_contexts; c; c = c->next) {
        if (!cupool_reclaim_due(c)) continue;
        int pushed = cupool_enter_context(c->ctx);
        cupool_reclaim(c);
        cupool_leave_context(pushed);
    }
    pthread_mutex_unlock(&cupool_registry_lock);
}
