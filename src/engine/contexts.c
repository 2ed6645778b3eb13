/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The registry of contexts and their free modes (cupool_context_t,
 * state.h).  The free mode of a context decides how a free is ordered
 * against work that may still use the block (docs/DESIGN.md, "Free
 * modes"): `ordered` puts alloc and free on the context's order stream
 * (order.c), `deferred` hands a block back only once events recorded on
 * every stream that could use it have completed, `sync` waits for the
 * whole context.  Under CUPOOL_FREE=auto a context starts `ordered` and is
 * moved, synchronizing once, the moment the program does something
 * `ordered` cannot follow: streams given work by turns (to `deferred`,
 * decided by order.c), a second context on the device or peer access (to
 * `sync`, decided here).  The context and peer-access shims
 * (shims/context.c) and the stream shims (shims/stream.c) tell the
 * registry of those things;
 * the free subsystem (free/free_modes.c and the files it dispatches to)
 * carries the frees out.  Here too: a thread's context cache, what the
 * shims read of a context, and the registry's report for the live
 * statistics page.  The registry sits above the devices (devices.c, which
 * knows no context) and below a context's end (lifecycle.c).
 */
#include "registry.h"

#include <stdlib.h>
#include <string.h>

cupool_context_t *cupool_contexts;

static const char *mode_name(int mode)
{
    static const char *const names[] = {"auto", "ordered", "deferred", "sync"};
    return mode >= 0 && mode < 4 ? names[mode] : "?";
}


/* ---- free modes and a context's state ------------------------------------- */

static int configured_mode(void)
{
    return (int)cupool_option(CUPOOL_OPT_FREE);
}

/* Moves a context to a stronger free mode.  Called with
 * cupool_registry_lock held. */
static void promote(cupool_context_t *c, int mode)
{
    CUPOOL_ASSERT_HELD(&cupool_registry_lock);
    int old = atomic_load(&c->mode);
    if (configured_mode() != CUPOOL_FREE_AUTO || old >= mode) return;
    /* The mode first, then the synchronization.  Until it is done, work
     * given to any stream, and an `ordered` allocation another thread was
     * making as the mode moved, waits on the host for the order stream
     * instead of following it in stream order (c->leaving, order.c and
     * cupool_ordered_alloc): nothing given after the move runs before what
     * the order stream held.  A context-wide synchronization would
     * invalidate a capture in progress: it then waits for the capture to
     * end (cupool_reclaim). */
    if (old == CUPOOL_FREE_ORDERED) atomic_store(&c->leaving, 1);
    atomic_store(&c->mode, mode);
    if (old == CUPOOL_FREE_ORDERED) {
        if (atomic_load(&cupool_hot.captures) > 0) CUPOOL_HINT_WRITE(c->sync_due, 1);
        else cupool_ordered_leave(c);
    }
    /* `sync` keeps no freed blocks; `deferred` keeps those `ordered` kept,
     * their users done once the switch has synchronized. */
    if (mode == CUPOOL_FREE_SYNC) cupool_ready_return_all(c);
    /* The fast paths serve `ordered` and `sync` alone: after a move to
     * `deferred` they stay off from now on. */
    if (mode == CUPOOL_FREE_DEFERRED) atomic_store(&cupool_hot.fast, 0);
    cupool_message(CUPOOL_MSG_INFO, "context %p: free mode %s -> %s", (void *)c->ctx, mode_name(old), mode_name(mode));
}

void cupool_context_promote(cupool_context_t *c, int mode)
{
    pthread_mutex_lock(&cupool_registry_lock);
    promote(c, mode);
    pthread_mutex_unlock(&cupool_registry_lock);
}

/* Moves every context of the device of this ordinal to a stronger free
 * mode (under CUPOOL_FREE=auto).  Called with cupool_registry_lock held. */
static void promote_device(int ordinal, int mode)
{
    CUPOOL_ASSERT_HELD(&cupool_registry_lock);
    for (cupool_context_t *c = cupool_contexts; c; c = c->next)
        if (c->ordinal == ordinal) promote(c, mode);
}

static int is_primary(CUcontext ctx, int ordinal)
{
    unsigned flags;
    int active = 0;
    CUcontext primary = NULL;
    if (real_cuDevicePrimaryCtxGetState(ordinal, &flags, &active) != CUDA_SUCCESS || !active) return 0;
    if (real_cuDevicePrimaryCtxRetain(&primary, ordinal) != CUDA_SUCCESS) return 0;
    real_cuDevicePrimaryCtxRelease_v2(ordinal);
    return primary == ctx;
}

cupool_context_t *cupool_context_find_locked(CUcontext ctx)
{
    CUPOOL_ASSERT_HELD(&cupool_registry_lock);
    cupool_context_t *c = cupool_contexts;
    while (c && c->ctx != ctx) c = c->next;
    return c;
}

_Static_assert(offsetof(cupool_context_t, tail) <= 64, "what every allocation and free reads fits one cache line");

/* Finds or creates the state of ctx, which must be current.  Called with
 * cupool_registry_lock held. */
static cupool_context_t *context_locked(CUcontext ctx)
{
    CUPOOL_ASSERT_HELD(&cupool_registry_lock);
    cupool_context_t *known = cupool_context_find_locked(ctx);
    if (known) return known;
    CUdevice ordinal;
    if (real_cuCtxGetDevice(&ordinal) != CUDA_SUCCESS) return NULL;
    cupool_device_t *dev = cupool_device_get(ordinal);
    if (!dev) return NULL;
    cupool_context_t *c = aligned_alloc(_Alignof(cupool_context_t), sizeof *c);
    if (!c) return NULL;
    memset(c, 0, sizeof *c);
    c->ctx = ctx;
    c->device = dev;
    c->ordinal = ordinal;
    c->any_size_pool = cupool_device_any_size_pool(dev);
    c->primary = is_primary(ctx, ordinal);
    pthread_mutex_init(&c->lock, NULL);
    int mode = configured_mode();
    atomic_store(&c->mode, mode == CUPOOL_FREE_AUTO ? CUPOOL_FREE_ORDERED : mode);
    atomic_store(&c->order, CU_STREAM_LEGACY);
    if (dev->pooled) {
        CUstreamCaptureMode previous = cupool_relaxed_begin();
        CUresult r = real_cuStreamCreate(&c->private_stream, CU_STREAM_NON_BLOCKING);
        cupool_relaxed_end(previous);
        if (r != CUDA_SUCCESS) {
            cupool_message(CUPOOL_MSG_WARN, "cannot create cupool's stream in context %p (%s); passing through",
                           (void *)ctx, cupool_result_name(r));
            free(c);
            return NULL;
        }
    }
    c->next = cupool_contexts;
    cupool_contexts = c;
    if (++dev->contexts > 1) dev->shared = 1;
    if (dev->shared) promote_device(ordinal, CUPOOL_FREE_SYNC);
    return c;
}

cupool_context_t *cupool_context_of(CUcontext ctx)
{
    if (!ctx) return NULL;
    pthread_mutex_lock(&cupool_registry_lock);
    cupool_context_t *c = context_locked(ctx);
    pthread_mutex_unlock(&cupool_registry_lock);
    return c;
}

/* Orders a new stream after the allocations cupool made on its private
 * stream, explicitly.  compute-sanitizer's stream-ordered checker does not
 * order a stream created after an allocation behind it, even once the host
 * has synchronized: it reports the stream's first use of the block as
 * use-before-alloc, for plain cuMemAllocAsync programs too (measured: alloc +
 * cuStreamSynchronize, then cuStreamCreate and a memset on the new stream).
 * A wait on an event recorded on cupool's stream gives the checker that
 * order; on the GPU the wait is one more dependency of the new stream's
 * first work, on allocations complete or about to be.  cupool's stream is
 * non-blocking and holds nothing but cupool's allocations, so the wait adds
 * no dependency on the program's own work.  The legacy stream (where
 * `ordered` allocates) is not waited on: recording on it while another
 * thread captures a blocking stream would invalidate that capture, and a
 * blocking stream follows the legacy stream on the GPU anyway. */
static void order_after_allocations(cupool_context_t *c, CUstream stream)
{
    if (!c->private_stream || cupool_capturing()) return;
    CUevent done;
    if (real_cuEventCreate(&done, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return;
    if (real_cuEventRecord(done, c->private_stream) == CUDA_SUCCESS) real_cuStreamWaitEvent(stream, done, 0);
    real_cuEventDestroy_v2(done);
}

/* The contexts whose per-thread stream the calling thread has ordered;
 * a few suffice (a thread rarely works in more contexts than that, and one
 * it forgets is ordered again, which is harmless). */
#define ORDERED_PTDS_MAX 8
static CUPOOL_THREAD_LOCAL CUcontext ordered_ptds[ORDERED_PTDS_MAX];
static CUPOOL_THREAD_LOCAL unsigned ordered_ptds_next;

/* A thread's per-thread default stream is created by the driver at its
 * first use, which cupool does not see: at the thread's first call in a
 * context, cupool orders that stream behind the allocations so far (which
 * also creates it, before the thread's own allocations). */
static void order_thread_stream(cupool_context_t *c)
{
    for (int i = 0; i < ORDERED_PTDS_MAX; i++)
        if (ordered_ptds[i] == c->ctx) return;
    ordered_ptds[ordered_ptds_next++ % ORDERED_PTDS_MAX] = c->ctx;
    order_after_allocations(c, CU_STREAM_PER_THREAD);
}

/* Asks the registry for the state of ctx and fills the thread's cache. */
static cupool_context_t *context_lookup(CUcontext ctx, unsigned generation)
{
    cupool_context_t *c = cupool_context_of(ctx);
    if (c) order_thread_stream(c);
    /* A lookup is the thread's cache missing: its first call in this
     * context, or its first since it used another or some context went
     * away.  So a thread switching contexts back and forth is counted again
     * each time: too many threads only turn the driver queue on. */
    if (c && cupool_hot.queue) atomic_fetch_add_explicit(&c->threads, 1, memory_order_relaxed);
    if (cupool_stats_thread(c ? c->ordinal : -1)) {
        cupool_thread.context_handle = ctx;
        cupool_thread.context = c;
        cupool_thread.context_generation = generation;
    }
    return c;
}

cupool_context_t *cupool_current_context(void)
{
    CUcontext ctx = NULL;
    unsigned generation;
    cupool_context_t *c = cupool_context_from_cache(&ctx, &generation);
    if (CUPOOL_LIKELY(c) || !ctx) return c;
    return context_lookup(ctx, generation);
}

/* ---- what the shims read of a context (engine.h) ---------------------------- */

CUcontext cupool_context_handle(const cupool_context_t *c)
{
    return c->ctx;
}

int cupool_context_ordinal(const cupool_context_t *c)
{
    return c->ordinal;
}

int cupool_context_pooled(const cupool_context_t *c)
{
    return c->device->pooled;
}

int cupool_context_exportable(const cupool_context_t *c)
{
    return c->device->exportable;
}

int cupool_context_mode(const cupool_context_t *c)
{
    return atomic_load_explicit(&c->mode, memory_order_relaxed);
}

void cupool_context_set_primary(cupool_context_t *c)
{
    c->primary = 1;
}

void cupool_context_used(cupool_context_t *c, int64_t delta)
{
    cupool_device_used(c->device, delta);
}

uint64_t cupool_context_reserved_recent(cupool_context_t *c, uint64_t now_ns)
{
    return cupool_device_reserved_recent(c->device, now_ns);
}

uint64_t cupool_context_ready_bytes(const cupool_context_t *c)
{
    return cupool_ready_bytes(c);
}

uint64_t cupool_context_waiting_bytes(const cupool_context_t *c)
{
    return cupool_deferred_waiting_bytes(c);
}

uint64_t cupool_context_idle_bytes(cupool_context_t *c)
{
    return cupool_device_reserved_unused(c->device) + cupool_ready_bytes(c);
}

int cupool_each_context(int (*fn)(cupool_context_t *c, void *arg), void *arg)
{
    int stop = 0;
    pthread_mutex_lock(&cupool_registry_lock);
    for (cupool_context_t *c = cupool_contexts; c && !stop; c = c->next) stop = fn(c, arg);
    pthread_mutex_unlock(&cupool_registry_lock);
    return stop;
}


/* ---- streams ------------------------------------------------------------- */

/* Room for one more in a list of streams holding n; 0 when there is none
 * (no host memory). */
static int grow(CUstream **list, int *cap, int n)
{
    if (n < *cap) return 1;
    int more = *cap ? 2 * *cap : 8;
    CUstream *grown = realloc(*list, (size_t)more * sizeof *grown);
    if (!grown) return 0;
    *list = grown;
    *cap = more;
    return 1;
}

/* Takes `stream` out of a list of n streams; 1 when it was there. */
static int unlist(CUstream *list, int *n, CUstream stream)
{
    for (int i = 0; i < *n; i++) {
        if (list[i] != stream) continue;
        list[i] = list[--*n];
        return 1;
    }
    return 0;
}

void cupool_track_stream(CUstream stream, unsigned flags)
{
    if (!cupool_active()) return;
    /* The calling thread's current context (cupool_current_context). */
    CUcontext ctx = NULL;
    unsigned generation;
    cupool_context_t *c = cupool_context_from_cache(&ctx, &generation);
    if (!c && ctx) c = context_lookup(ctx, generation);
    if (!c) return;
    order_after_allocations(c, stream);
    if (!(flags & CU_STREAM_NON_BLOCKING)) {
        /* The order stream's (order.c): with the legacy stream, one order.
         * One that does not fit counts as non-blocking, which moves the
         * order where it need not, never wrongly. */
        pthread_mutex_lock(&c->lock);
        if (grow(&c->blocking, &c->blocking_cap, c->nblocking)) c->blocking[c->nblocking++] = stream;
        pthread_mutex_unlock(&c->lock);
        return;
    }
    pthread_mutex_lock(&c->lock);
    int tracked = grow(&c->streams, &c->streams_cap, c->nstreams);
    if (tracked) c->streams[c->nstreams++] = stream;
    pthread_mutex_unlock(&c->lock);
    /* An untracked stream could not be waited for by `deferred`'s fences:
     * only sync is safe then.  A tracked one changes nothing until it is
     * given work (order.c). */
    if (!tracked) cupool_context_promote(c, CUPOOL_FREE_SYNC);
}

void cupool_forget_stream(CUstream stream)
{
    pthread_mutex_lock(&cupool_registry_lock);
    for (cupool_context_t *c = cupool_contexts; c; c = c->next) {
        pthread_mutex_lock(&c->lock);
        unlist(c->blocking, &c->nblocking, stream);
        /* Its remaining work may still use blocks freed in deferred mode,
         * before or after this, which will no longer wait on it. */
        if (unlist(c->streams, &c->nstreams, stream)) cupool_deferred_stream_destroyed(c, stream);
        pthread_mutex_unlock(&c->lock);
    }
    pthread_mutex_unlock(&cupool_registry_lock);
}

/* ---- peer access ------------------------------------------------------------ */

static int context_device(CUcontext ctx)
{
    CUdevice ordinal = -1;
    int pushed = cupool_enter_context(ctx);
    if (real_cuCtxGetDevice(&ordinal) != CUDA_SUCCESS) ordinal = -1;
    cupool_leave_context(pushed);
    return ordinal;
}

/* Pools ignore cuCtxEnablePeerAccess: the current device is granted access to
 * the peer device's pools (devices.c), and both devices' memory now escapes a
 * context. */
void cupool_peer_access(CUcontext peer, int enable)
{
    CUcontext current = NULL;
    real_cuCtxGetCurrent(&current);
    int self = current ? context_device(current) : -1, other = context_device(peer);
    if (self < 0 || other < 0 || self >= CUPOOL_MAX_DEVICES || other >= CUPOOL_MAX_DEVICES) return;
    if (current) cupool_context_of(current);
    pthread_mutex_lock(&cupool_registry_lock);
    if (cupool_device_peer_access(self, other, enable)) {
        promote_device(other, CUPOOL_FREE_SYNC);
        promote_device(self, CUPOOL_FREE_SYNC);
    }
    pthread_mutex_unlock(&cupool_registry_lock);
}

/* ---- the live statistics page ----------------------------------------------- */

/* Per device ordinal, the free modes its contexts are in (bit m: mode m),
 * how many contexts cupool keeps, and what devices.c reports of its pools.
 * Under cupool_registry_lock: no context teardown cupool sees (the
 * program's own, or a runtime's at exit) runs meanwhile. */
int cupool_devices_report(int query, unsigned modes[], unsigned ncontexts[], int pooled[], uint64_t reserved[])
{
    pthread_mutex_lock(&cupool_registry_lock);
    for (int d = 0; d < CUPOOL_MAX_DEVICES; d++) modes[d] = ncontexts[d] = 0;
    for (cupool_context_t *c = cupool_contexts; c; c = c->next) {
        if (c->ordinal < 0 || c->ordinal >= CUPOOL_MAX_DEVICES) continue;
        modes[c->ordinal] |= 1u << atomic_load_explicit(&c->mode, memory_order_relaxed);
        ncontexts[c->ordinal]++;
    }
    int n = cupool_devices_pools_report(query, pooled, reserved);
    pthread_mutex_unlock(&cupool_registry_lock);
    return n;
}
