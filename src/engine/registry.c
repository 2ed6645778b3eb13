/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The registry of devices, pools, contexts and their free modes (state.h).  The free mode of a
 * context decides how a free is ordered against work that may still use the
 * block (DESIGN.md, "Allocation semantics"): `ordered` puts alloc and free on
 * the legacy stream, `deferred` hands a block back only once events recorded
 * on every stream that could use it have completed, `sync` waits for the
 * whole context.  Under CUPOOL_FREE=auto a context starts `ordered` and is
 * moved, synchronizing once, the moment the program does something that
 * would make `ordered` wrong: a non-blocking stream (to `deferred`), a second
 * context on the device or peer access (to `sync`).  The context and peer
 * access shims (shims/context.c) and the stream shims (shims/stream.c)
 * watch for exactly those things and tell the registry here; the free files
 * (free/free_modes.c and the files it dispatches to) carry the frees out.  Here
 * too: the engine's start-up, and the teardown of a context's state.
 */
#include "free/free.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static cupool_device_t devices[CUPOOL_MAX_DEVICES];
static int devices_ready[CUPOOL_MAX_DEVICES];
static cupool_context_t *contexts;         /* every context cupool knows */


/* ---- helpers ------------------------------------------------------------- */

static const char *mode_name(int mode)
{
    static const char *const names[] = {"auto", "ordered", "deferred", "sync"};
    return mode >= 0 && mode < 4 ? names[mode] : "?";
}

/* ---- devices and pools --------------------------------------------------- */

static int pool_entry_points(void)
{
    return real_cuMemPoolCreate && real_cuMemAllocFromPoolAsync && real_cuMemFreeAsync && real_cuMemPoolTrimTo &&
           real_cuMemPoolGetAttribute && real_cuMemPoolSetAttribute && real_cuDeviceGetDefaultMemPool &&
           real_cuEventCreate && real_cuEventRecord && real_cuEventQuery && real_cuStreamSynchronize && real_cuStreamQuery &&
           real_cuStreamWaitEvent;
}

static void set_threshold(CUmemoryPool pool)
{
    uint64_t threshold = cupool_option(CUPOOL_OPT_RELEASE_THRESHOLD);
    uint64_t limit = cupool_option(CUPOOL_OPT_LIMIT);
    /* CUPOOL_LIMIT caps what a pool keeps across synchronizations too. */
    if (limit < threshold) threshold = limit;
    cuuint64_t value = threshold;
    real_cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &value);
}

/* With CUPOOL_IPC a pool is made exportable (a POSIX file descriptor
 * shares it, ipc.c); where the driver or the system cannot, it is made as
 * before and its memory cannot be shared. */
static CUresult create_pool(cupool_device_t *dev, CUmemoryPool *pool)
{
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = dev->ordinal;
    int first = dev->npools == 0;
    if (first) dev->exportable = cupool_option(CUPOOL_OPT_IPC) != 0 && real_cuMemPoolExportToShareableHandle &&
                                 real_cuMemPoolExportPointer;
    props.handleTypes = dev->exportable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
    CUresult r = real_cuMemPoolCreate(pool, &props);
    if (r != CUDA_SUCCESS && dev->exportable && first) {
        cupool_message(CUPOOL_MSG_INFO, "device %d: pools cannot be exportable (%s); IPC handles of pooled memory fail",
                       dev->ordinal, cupool_result_name(r));
        dev->exportable = 0;
        props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
        r = real_cuMemPoolCreate(pool, &props);
    }
    return r;
}

/* Called with registry_lock held. */
static cupool_device_t *device_get(int ordinal)
{
    if (ordinal < 0 || ordinal >= CUPOOL_MAX_DEVICES) return NULL;
    cupool_device_t *dev = &devices[ordinal];
    if (devices_ready[ordinal]) return dev;
    devices_ready[ordinal] = 1;
    dev->ordinal = ordinal;
    int policy = (int)cupool_option(CUPOOL_OPT_POLICY);
    if (policy == CUPOOL_POLICY_OFF) return dev;
    int supported = 0;
    if (!pool_entry_points()) {
        cupool_message_once(CUPOOL_MSG_WARN, "this driver lacks the memory-pool entry points; passing allocations through");
        return dev;
    }
    if (real_cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, ordinal) != CUDA_SUCCESS ||
        !supported) {
        cupool_message(CUPOOL_MSG_WARN, "device %d does not support memory pools; passing its allocations through",
                       ordinal);
        return dev;
    }
    CUresult r = CUDA_SUCCESS;
    if (policy == CUPOOL_POLICY_DEFAULT) {
        r = real_cuDeviceGetDefaultMemPool(&dev->pools[0], ordinal);
        dev->npools = r == CUDA_SUCCESS;
    } else {
        int want = policy == CUPOOL_POLICY_SPLIT ? 2 : 1;
        for (; dev->npools < want && r == CUDA_SUCCESS; dev->npools++) {
            r = create_pool(dev, &dev->pools[dev->npools]);
            if (r != CUDA_SUCCESS) break;
        }
    }
    if (r != CUDA_SUCCESS) {
        cupool_message(CUPOOL_MSG_WARN, "cannot set up a memory pool on device %d (%s); passing its allocations through",
                       ordinal, cupool_result_name(r));
        /* Pools this policy created itself (never the device's default). */
        for (int i = 0; policy != CUPOOL_POLICY_DEFAULT && i < dev->npools; i++) real_cuMemPoolDestroy(dev->pools[i]);
        dev->npools = 0;
        return dev;
    }
    for (int i = 0; i < dev->npools; i++) set_threshold(dev->pools[i]);
    dev->pooled = 1;
    cupool_message(CUPOOL_MSG_INFO, "device %d: %d pool(s), policy %s", ordinal, dev->npools,
                   cupool_option_string(CUPOOL_OPT_POLICY));
    return dev;
}

CUmemoryPool cupool_pick_pool(cupool_context_t *c, size_t size)
{
    const cupool_device_t *dev = c->device;
    if (!dev->pooled) return NULL;
    if (size < cupool_option_started(CUPOOL_OPT_MIN_SIZE) || size > cupool_option_started(CUPOOL_OPT_MAX_SIZE))
        return NULL;
    uint64_t limit = cupool_option_started(CUPOOL_OPT_LIMIT);
    if (limit != CUPOOL_SIZE_UNLIMITED && atomic_load_explicit(&dev->used, memory_order_relaxed) + size > limit)
        return NULL;
    if (dev->npools == 2 && size >= cupool_option_started(CUPOOL_OPT_SPLIT_SIZE)) return dev->pools[CUPOOL_POOL_LARGE];
    return dev->pools[CUPOOL_POOL_MAIN];
}

static uint64_t pool_attribute(CUmemoryPool pool, CUmemPool_attribute attr)
{
    cuuint64_t value = 0;
    real_cuMemPoolGetAttribute(pool, attr, &value);
    return value;
}

uint64_t cupool_device_reserved(cupool_device_t *dev)
{
    uint64_t total = 0;
    for (int i = 0; i < dev->npools; i++) total += pool_attribute(dev->pools[i], CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
    return total;
}

uint64_t cupool_device_reserved_recent(cupool_device_t *dev, uint64_t now_ns)
{
    uint64_t reserved = atomic_load_explicit(&dev->reserved, memory_order_relaxed);
    uint64_t at = atomic_load_explicit(&dev->reserved_at_ns, memory_order_relaxed);
    if (reserved >= atomic_load_explicit(&dev->used, memory_order_relaxed) && now_ns - at < 1000000) return reserved;
    reserved = cupool_device_reserved(dev);
    atomic_store_explicit(&dev->reserved, reserved, memory_order_relaxed);
    atomic_store_explicit(&dev->reserved_at_ns, now_ns, memory_order_relaxed);
    return reserved;
}

uint64_t cupool_device_reserved_unused(cupool_device_t *dev)
{
    uint64_t total = 0;
    for (int i = 0; i < dev->npools; i++) {
        uint64_t reserved = pool_attribute(dev->pools[i], CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
        uint64_t used = pool_attribute(dev->pools[i], CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
        if (reserved > used) total += reserved - used;
    }
    return total;
}

/* For the live statistics page (live.c): per device ordinal, the free
 * modes its contexts are in (bit m: mode m), how many contexts cupool
 * keeps, whether pools serve it and, with `query`, what its pools reserve.
 * The driver is asked only for a device with a live context, and under
 * registry_lock: no context teardown cupool sees (the program's own, or a
 * runtime's at exit) runs meanwhile.  Returns 1 + the highest ordinal set
 * up, 0 for none. */
int cupool_devices_report(int query, unsigned modes[], unsigned ncontexts[], int pooled[], uint64_t reserved[])
{
    int n = 0;
    pthread_mutex_lock(&registry_lock);
    for (int d = 0; d < CUPOOL_MAX_DEVICES; d++) {
        modes[d] = ncontexts[d] = 0;
        pooled[d] = devices_ready[d] && devices[d].pooled;
        reserved[d] = 0;
        if (devices_ready[d]) n = d + 1;
    }
    for (cupool_context_t *c = contexts; c; c = c->next) {
        if (c->ordinal < 0 || c->ordinal >= CUPOOL_MAX_DEVICES) continue;
        modes[c->ordinal] |= 1u << atomic_load_explicit(&c->mode, memory_order_relaxed);
        ncontexts[c->ordinal]++;
    }
    if (query) {
        CUstreamCaptureMode previous = cupool_relaxed_begin();
        for (int d = 0; d < n; d++)
            if (pooled[d] && devices[d].contexts > 0) reserved[d] = cupool_device_reserved(&devices[d]);
        cupool_relaxed_end(previous);
    }
    pthread_mutex_unlock(&registry_lock);
    return n;
}

static void grant_access(cupool_device_t *dev, int to, CUmemAccess_flags flags)
{
    if (!real_cuMemPoolSetAccess) return;
    CUmemAccessDesc desc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = to}, .flags = flags};
    for (int i = 0; i < dev->npools; i++) {
        CUresult r = real_cuMemPoolSetAccess(dev->pools[i], &desc, 1);
        if (r != CUDA_SUCCESS)
            cupool_message(CUPOOL_MSG_WARN, "cannot mirror peer access of device %d to device %d's pool: %s", to,
                           dev->ordinal, cupool_result_name(r));
    }
}

/* ---- contexts ------------------------------------------------------------ */

static int configured_mode(void)
{
    return (int)cupool_option(CUPOOL_OPT_FREE);
}

/* Moves a context to a stronger free mode.  Called with registry_lock held. */
static void promote(cupool_context_t *c, int mode)
{
    int old = atomic_load(&c->mode);
    if (configured_mode() != CUPOOL_FREE_AUTO || old >= mode) return;
    /* A context-wide synchronization would invalidate a capture in progress:
     * it then waits for the capture to end (cupool_reclaim). */
    if (old == CUPOOL_FREE_ORDERED) {
        if (atomic_load(&cupool_hot.captures) > 0) CUPOOL_HINT_WRITE(c->sync_due, 1);
        else cupool_ordered_leave(c);
    }
    atomic_store(&c->mode, mode);
    /* `sync` keeps no freed blocks; `deferred` keeps those `ordered` kept,
     * their users done once the switch has synchronized. */
    if (mode == CUPOOL_FREE_SYNC) cupool_ready_return_all(c);
    /* The fast paths serve `ordered` and `sync` alone: after a move to
     * `deferred` they stay off from now on. */
    if (mode == CUPOOL_FREE_DEFERRED) atomic_store(&cupool_hot.fast, 0);
    cupool_message(CUPOOL_MSG_INFO, "context %p: free mode %s -> %s", (void *)c->ctx, mode_name(old), mode_name(mode));
}

static void promote_device(cupool_device_t *dev, int mode)
{
    for (cupool_context_t *c = contexts; c; c = c->next)
        if (c->device == dev) promote(c, mode);
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

/* The state cupool keeps for ctx, or NULL; registry_lock held. */
static cupool_context_t *lookup_locked(CUcontext ctx)
{
    cupool_context_t *c = contexts;
    while (c && c->ctx != ctx) c = c->next;
    return c;
}

/* The pool every allocation on the device goes to whatever its size (one
 * pool, no size bounds, no CUPOOL_LIMIT to count against); NULL when
 * cupool_pick_pool must decide each time. */
static CUmemoryPool any_size_pool(const cupool_device_t *dev)
{
    if (!dev->pooled || dev->npools != 1) return NULL;
    if (cupool_option(CUPOOL_OPT_MIN_SIZE) > 1 || cupool_option(CUPOOL_OPT_MAX_SIZE) != CUPOOL_SIZE_UNLIMITED ||
        cupool_option(CUPOOL_OPT_LIMIT) != CUPOOL_SIZE_UNLIMITED)
        return NULL;
    return dev->pools[CUPOOL_POOL_MAIN];
}

_Static_assert(offsetof(cupool_context_t, tail) <= 64, "what every allocation and free reads fits one cache line");

/* Finds or creates the state of ctx, which must be current.  Called with
 * registry_lock held. */
static cupool_context_t *context_locked(CUcontext ctx)
{
    cupool_context_t *known = lookup_locked(ctx);
    if (known) return known;
    CUdevice ordinal;
    if (real_cuCtxGetDevice(&ordinal) != CUDA_SUCCESS) return NULL;
    cupool_device_t *dev = device_get(ordinal);
    if (!dev) return NULL;
    cupool_context_t *c = aligned_alloc(_Alignof(cupool_context_t), sizeof *c);
    if (!c) return NULL;
    memset(c, 0, sizeof *c);
    c->ctx = ctx;
    c->device = dev;
    c->ordinal = ordinal;
    c->any_size_pool = any_size_pool(dev);
    c->primary = is_primary(ctx, ordinal);
    pthread_mutex_init(&c->lock, NULL);
    int mode = configured_mode();
    atomic_store(&c->mode, mode == CUPOOL_FREE_AUTO ? CUPOOL_FREE_ORDERED : mode);
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
    c->next = contexts;
    contexts = c;
    if (++dev->contexts > 1) dev->shared = 1;
    if (dev->shared) promote_device(dev, CUPOOL_FREE_SYNC);
    return c;
}

cupool_context_t *cupool_context_of(CUcontext ctx)
{
    if (!ctx) return NULL;
    pthread_mutex_lock(&registry_lock);
    cupool_context_t *c = context_locked(ctx);
    pthread_mutex_unlock(&registry_lock);
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

cupool_context_t *cupool_context_lookup(CUcontext ctx, unsigned generation)
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

/* ---- out of memory ------------------------------------------------------------ */

void cupool_trim_device(cupool_context_t *c)
{
    cupool_device_t *dev = c->device;
    /* Every context on the device: the blocks one holds freed (deferred,
     * ready) may be the memory another is missing. */
    pthread_mutex_lock(&registry_lock);
    for (cupool_context_t *each = contexts; each; each = each->next) {
        if (each->device != dev) continue;
        int pushed = cupool_enter_context(each->ctx);
        cupool_reclaim(each, 1);
        cupool_leave_context(pushed);
    }
    pthread_mutex_unlock(&registry_lock);
    CUstreamCaptureMode previous = cupool_relaxed_begin();
    if (atomic_load(&cupool_hot.captures) == 0) real_cuCtxSynchronize();
    for (int i = 0; i < dev->npools; i++) real_cuMemPoolTrimTo(dev->pools[i], 0);
    cupool_relaxed_end(previous);
    atomic_fetch_add(&cupool_stats_for(dev->ordinal)->trims, 1);
}

void cupool_trim_for_retry(cupool_context_t *c)
{
    atomic_fetch_add(&cupool_stats_for(c->device->ordinal)->oom_retries, 1);
    cupool_trim_device(c);
    /* Kept managed blocks may hold device memory too. */
    cupool_kept_release(0);
}

int cupool_pools_in_use(void)
{
    for (int d = 0; d < CUPOOL_MAX_DEVICES; d++)
        if (devices_ready[d] && devices[d].pooled) return 1;
    return 0;
}

int cupool_each_context(int (*fn)(cupool_context_t *c, void *arg), void *arg)
{
    int stop = 0;
    pthread_mutex_lock(&registry_lock);
    for (cupool_context_t *c = contexts; c && !stop; c = c->next) stop = fn(c, arg);
    pthread_mutex_unlock(&registry_lock);
    return stop;
}

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
    if (teardown_hook) teardown_hook(c, 1);
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

/* Unlinks and frees the state of ctx; called with registry_lock held. */
static cupool_context_t *unlink_context(CUcontext ctx)
{
    for (cupool_context_t **p = &contexts; *p; p = &(*p)->next) {
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
    free(c->spare_events);
    cupool_ready_drop_records(c);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static void forget_context(CUcontext ctx)
{
    pthread_mutex_lock(&registry_lock);
    cupool_context_t *c = unlink_context(ctx);
    pthread_mutex_unlock(&registry_lock);
    if (!c) return;
    int pushed = cupool_enter_context(ctx);
    teardown_current(c);
    cupool_leave_context(pushed);
    destroy_state(c);
}

/* The state of a device's primary context; registry_lock held. */
static cupool_context_t *primary_locked(int ordinal)
{
    cupool_context_t *c = contexts;
    while (c && !(c->primary && c->device->ordinal == ordinal)) c = c->next;
    return c;
}

static cupool_context_t *find_primary(int ordinal)
{
    pthread_mutex_lock(&registry_lock);
    cupool_context_t *c = primary_locked(ordinal);
    pthread_mutex_unlock(&registry_lock);
    return c;
}

/* Unlinks the primary context state of a device in one critical section, so
 * that of two threads releasing it at once only one tears it down. */
static cupool_context_t *unlink_primary(int ordinal)
{
    pthread_mutex_lock(&registry_lock);
    cupool_context_t *c = primary_locked(ordinal);
    if (c) c = unlink_context(c->ctx);
    pthread_mutex_unlock(&registry_lock);
    return c;
}

/* ---- start-up and fork --------------------------------------------------- */

/* The capture gate too: a child's capture must not wait for a thread of
 * the parent's that held it. */
static void fork_prepare(void)
{
    pthread_mutex_lock(&registry_lock);
    cupool_capture_gate_enter();
    cupool_origin_lock_all();
}

static void fork_parent(void)
{
    cupool_origin_unlock_all();
    cupool_capture_gate_leave();
    pthread_mutex_unlock(&registry_lock);
}

static void fork_child(void)
{
    cupool_origin_unlock_all();
    cupool_capture_gate_leave();
    pthread_mutex_unlock(&registry_lock);
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
    pthread_mutex_lock(&registry_lock);
    cupool_context_t *c = lookup_locked(ctx);
    int primary = c && c->primary;
    pthread_mutex_unlock(&registry_lock);
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
    pthread_mutex_lock(&registry_lock);
    cupool_context_t *primary = primary_locked(ordinal);
    if (primary) cupool_ready_return_all(primary);
    pthread_mutex_unlock(&registry_lock);
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
        cupool_deferred_drop(c, CU_STREAM_LEGACY);
        real_cuCtxSynchronize();
        cupool_relaxed_end(previous);
        cupool_leave_context(pushed);
        real_cuDevicePrimaryCtxRelease_v2(ordinal);
    }
    /* The context's stream and events died with it: only host state is left. */
    if (teardown_hook) teardown_hook(c, 0);
    destroy_state(c);
}

void cupool_primary_released(int ordinal)
{
    cupool_context_t *c = unlink_primary(ordinal);
    if (c) forget_dead_primary(c, ordinal);
}

static int context_device(CUcontext ctx)
{
    CUdevice ordinal = -1;
    int pushed = cupool_enter_context(ctx);
    if (real_cuCtxGetDevice(&ordinal) != CUDA_SUCCESS) ordinal = -1;
    cupool_leave_context(pushed);
    return ordinal;
}

/* Pools ignore cuCtxEnablePeerAccess: the current device is granted access to
 * the peer device's pools, and both devices' memory now escapes a context. */
void cupool_peer_access(CUcontext peer, int enable)
{
    CUcontext current = NULL;
    real_cuCtxGetCurrent(&current);
    int self = current ? context_device(current) : -1, other = context_device(peer);
    if (self < 0 || other < 0 || self >= CUPOOL_MAX_DEVICES || other >= CUPOOL_MAX_DEVICES) return;
    if (current) cupool_context_of(current);
    pthread_mutex_lock(&registry_lock);
    cupool_device_t *dev = device_get(other);
    if (dev) {
        if (enable) dev->peers |= 1ull << self;
        else dev->peers &= ~(1ull << self);
        if (dev->pooled) grant_access(dev, self, enable ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE);
        if (enable) {
            dev->shared = devices[self].shared = 1;
            promote_device(dev, CUPOOL_FREE_SYNC);
            promote_device(&devices[self], CUPOOL_FREE_SYNC);
        }
    }
    pthread_mutex_unlock(&registry_lock);
}

/* ---- streams ------------------------------------------------------------- */

void cupool_track_stream(CUstream stream, unsigned flags)
{
    if (!cupool_active()) return;
    /* The calling thread's current context (cupool_current_context). */
    CUcontext ctx = NULL;
    unsigned generation;
    cupool_context_t *c = cupool_context_from_cache(&ctx, &generation);
    if (!c && ctx) c = cupool_context_lookup(ctx, generation);
    if (!c) return;
    order_after_allocations(c, stream);
    if (!(flags & CU_STREAM_NON_BLOCKING)) return;
    pthread_mutex_lock(&c->lock);
    if (c->nstreams == c->streams_cap) {
        int cap = c->streams_cap ? 2 * c->streams_cap : 8;
        CUstream *grown = realloc(c->streams, (size_t)cap * sizeof *grown);
        if (grown) {
            c->streams = grown;
            c->streams_cap = cap;
        }
    }
    int tracked = c->nstreams < c->streams_cap;
    if (tracked) c->streams[c->nstreams++] = stream;
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_lock(&registry_lock);
    /* An untracked stream could not be waited for: only sync is safe then. */
    promote(c, tracked ? CUPOOL_FREE_DEFERRED : CUPOOL_FREE_SYNC);
    pthread_mutex_unlock(&registry_lock);
}

void cupool_forget_stream(CUstream stream)
{
    pthread_mutex_lock(&registry_lock);
    for (cupool_context_t *c = contexts; c; c = c->next) {
        pthread_mutex_lock(&c->lock);
        for (int i = 0; i < c->nstreams; i++) {
            if (c->streams[i] != stream) continue;
            c->streams[i] = c->streams[--c->nstreams];
            /* Its remaining work may still use blocks freed in deferred
             * mode, before or after this, which will no longer wait on it. */
            cupool_deferred_stream_destroyed(c, stream);
            break;
        }
        pthread_mutex_unlock(&c->lock);
    }
    pthread_mutex_unlock(&registry_lock);
}

/* The last capture in progress has ended: what waited for it (the
 * synchronization of a switch out of `ordered`, frees held during the
 * capture) happens now rather than at the context's next allocation. */
static void captures_ended(void)
{
    pthread_mutex_lock(&registry_lock);
    for (cupool_context_t *c = contexts; c; c = c->next) {
        if (!cupool_reclaim_due(c)) continue;
        int pushed = cupool_enter_context(c->ctx);
        cupool_reclaim(c, 0);
        cupool_leave_context(pushed);
    }
    pthread_mutex_unlock(&registry_lock);
}
