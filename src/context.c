/*
 * Devices, contexts, streams and free modes (context.h).  The free mode of a
 * context decides how a free is ordered against work that may still use the
 * block (DESIGN.md, "Allocation semantics"): `ordered` puts alloc and free on
 * the legacy stream, `deferred` hands a block back only once events recorded
 * on every stream that could use it have completed, `sync` waits for the
 * whole context.  Under CUPOOL_FREE=auto a context starts `ordered` and is
 * moved, synchronizing once, the moment the program does something that
 * would make `ordered` wrong: a non-blocking stream (to `deferred`), a second
 * context on the device or peer access (to `sync`).  The shims here watch
 * for exactly those things.
 */
#include "context.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A freed block not yet back in its pool. */
struct deferred_block {
    CUdeviceptr ptr;
    size_t size;
    deferred_block_t *next;
};

/* Blocks freed before one set of events was recorded: they go back to the
 * pool together once every event has completed. */
struct deferred_batch {
    deferred_block_t *blocks;
    deferred_batch_t *next;
    int nevents, checked;                 /* events[checked..] not yet seen complete */
    CUevent events[];
};

/* deferred mode records one event per live non-blocking stream (plus the
 * legacy stream).  Frameworks create dozens of streams (PyTorch's stream
 * pool: 32 per priority), so events are recorded for a batch of frees at
 * once, at the first cupool call after the batch has waited this long or
 * grown this large.  Recording later than the free is still correct: the
 * events then cover more work, never less. */
#define BATCH_MAX_WAIT_NS 1000000
#define BATCH_MAX_BLOCKS 64
#define BATCH_CHEAP_STREAMS 2

/* A program that frees faster than the GPU catches up (the host runs ahead
 * of its kernels) would otherwise pile up freed memory without bound; past
 * this many bytes waiting, a free waits for the oldest batches (a native
 * cuMemFree would have waited for the whole device). */
#define DEFERRED_MAX_BYTES (1ull << 30)

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static cupool_device_t devices[CUPOOL_MAX_DEVICES];
static int devices_ready[CUPOOL_MAX_DEVICES];
static cupool_context_t *contexts;         /* every context cupool knows */
static atomic_uint generation = 1;         /* bumped when a context goes away */
static int forked_child;
atomic_int cupool_captures;

static __thread struct {
    CUcontext ctx;
    cupool_context_t *state;
    unsigned generation;
} cache;

/* ---- helpers ------------------------------------------------------------- */

/* Every capture starts in one of cupool's BeginCapture shims, so while none
 * is in progress the thread's capture mode cannot matter and the two driver
 * calls are skipped (CUPOOL_NO_EXCHANGE marks that). */
#define CUPOOL_NO_EXCHANGE ((CUstreamCaptureMode)-1)

CUstreamCaptureMode cupool_relaxed_begin(void)
{
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (atomic_load_explicit(&cupool_captures, memory_order_relaxed) == 0 || !real_cuThreadExchangeStreamCaptureMode ||
        real_cuThreadExchangeStreamCaptureMode(&mode) != CUDA_SUCCESS)
        return CUPOOL_NO_EXCHANGE;
    return mode;
}

void cupool_relaxed_end(CUstreamCaptureMode previous)
{
    if (previous != CUPOOL_NO_EXCHANGE) real_cuThreadExchangeStreamCaptureMode(&previous);
}

int cupool_enter_context(CUcontext ctx)
{
    CUcontext current = NULL;
    real_cuCtxGetCurrent(&current);
    if (current == ctx) return 0;
    return real_cuCtxPushCurrent_v2(ctx) == CUDA_SUCCESS;
}

void cupool_leave_context(int pushed)
{
    CUcontext popped;
    if (pushed) real_cuCtxPopCurrent_v2(&popped);
}

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
           real_cuEventCreate && real_cuEventRecord && real_cuEventQuery && real_cuStreamSynchronize &&
           real_cuStreamWaitEvent && real_cuStreamQuery;
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

static CUresult create_pool(int ordinal, CUmemoryPool *pool)
{
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = ordinal;
    return real_cuMemPoolCreate(pool, &props);
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
            r = create_pool(ordinal, &dev->pools[dev->npools]);
            if (r != CUDA_SUCCESS) break;
        }
    }
    if (r != CUDA_SUCCESS) {
        cupool_message(CUPOOL_MSG_WARN, "cannot set up a memory pool on device %d (%s); passing its allocations through",
                       ordinal, cupool_result_name(r));
        return dev;
    }
    for (int i = 0; i < dev->npools; i++) set_threshold(dev->pools[i]);
    dev->pooled = 1;
    cupool_message(CUPOOL_MSG_INFO, "device %d: %d pool(s), policy %s", ordinal, dev->npools,
                   cupool_option_string(CUPOOL_OPT_POLICY));
    return dev;
}

CUmemoryPool cupool_pick_pool(cupool_device_t *dev, size_t size)
{
    if (!dev->pooled) return NULL;
    if (size < cupool_option(CUPOOL_OPT_MIN_SIZE) || size > cupool_option(CUPOOL_OPT_MAX_SIZE)) return NULL;
    uint64_t limit = cupool_option(CUPOOL_OPT_LIMIT);
    if (limit != CUPOOL_SIZE_UNLIMITED && atomic_load_explicit(&dev->used, memory_order_relaxed) + size > limit)
        return NULL;
    if (dev->npools == 2 && size >= cupool_option(CUPOOL_OPT_SPLIT_SIZE)) return dev->pools[CUPOOL_POOL_LARGE];
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

/* The legacy-stream work of `ordered` (allocations and frees still queued
 * behind kernels) must be complete before another stream can touch its
 * blocks. */
static void synchronize_for_switch(cupool_context_t *c)
{
    int pushed = cupool_enter_context(c->ctx);
    CUstreamCaptureMode previous = cupool_relaxed_begin();
    CUresult r = real_cuCtxSynchronize();
    cupool_relaxed_end(previous);
    cupool_leave_context(pushed);
    c->sync_due = 0;
    if (r != CUDA_SUCCESS)
        cupool_message(CUPOOL_MSG_WARN, "synchronizing context %p to leave ordered mode failed: %s", (void *)c->ctx,
                       cupool_result_name(r));
}

/* Moves a context to a stronger free mode.  Called with registry_lock held. */
static void promote(cupool_context_t *c, int mode)
{
    int old = atomic_load(&c->mode);
    if (configured_mode() != CUPOOL_FREE_AUTO || old >= mode) return;
    /* A context-wide synchronization would invalidate a capture in progress:
     * it then waits for the capture to end (cupool_reclaim). */
    if (old == CUPOOL_FREE_ORDERED) {
        if (atomic_load(&cupool_captures) > 0) c->sync_due = 1;
        else synchronize_for_switch(c);
    }
    atomic_store(&c->mode, mode);
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

/* Finds or creates the state of ctx, which must be current.  Called with
 * registry_lock held. */
static cupool_context_t *context_locked(CUcontext ctx)
{
    for (cupool_context_t *c = contexts; c; c = c->next)
        if (c->ctx == ctx) return c;
    CUdevice ordinal;
    if (real_cuCtxGetDevice(&ordinal) != CUDA_SUCCESS) return NULL;
    cupool_device_t *dev = device_get(ordinal);
    if (!dev) return NULL;
    cupool_context_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->ctx = ctx;
    c->device = dev;
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
    if (!ctx || forked_child) return NULL;
    pthread_mutex_lock(&registry_lock);
    cupool_context_t *c = context_locked(ctx);
    pthread_mutex_unlock(&registry_lock);
    return c;
}

cupool_context_t *cupool_current_context(void)
{
    CUcontext ctx = NULL;
    if (real_cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) return NULL;
    unsigned gen = atomic_load_explicit(&generation, memory_order_acquire);
    if (CUPOOL_LIKELY(cache.ctx == ctx && cache.generation == gen && cache.state)) return cache.state;
    cupool_context_t *c = cupool_context_of(ctx);
    cache.ctx = ctx;
    cache.state = c;
    cache.generation = gen;
    return c;
}

/* ---- deferred frees ------------------------------------------------------ */

static CUevent take_event(cupool_context_t *c)
{
    CUevent ev = NULL;
    if (c->nspare) return c->spare_events[--c->nspare];
    real_cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING);
    return ev;
}

static void give_event(cupool_context_t *c, CUevent ev)
{
    if (c->nspare == c->spare_cap) {
        int cap = c->spare_cap ? 2 * c->spare_cap : 16;
        CUevent *grown = realloc(c->spare_events, (size_t)cap * sizeof *grown);
        if (!grown) {
            real_cuEventDestroy_v2(ev);
            return;
        }
        c->spare_events = grown;
        c->spare_cap = cap;
    }
    c->spare_events[c->nspare++] = ev;
}

/* Returns one block, no longer in the origin table, to its pool. */
static CUresult give_back(CUdeviceptr ptr, CUstream stream)
{
    CUresult r = real_cuMemFreeAsync(ptr, stream);
    if (r != CUDA_SUCCESS)
        cupool_message(CUPOOL_MSG_WARN, "returning block 0x%llx to its pool failed: %s", (unsigned long long)ptr,
                       cupool_result_name(r));
    return r;
}

/* Hands a list of blocks back to the pool; their users are all done.
 * Returns the bytes released. */
static uint64_t release_blocks(deferred_block_t *b, CUstream stream)
{
    uint64_t bytes = 0;
    while (b) {
        deferred_block_t *next = b->next;
        /* The record leaves the origin table first: once the pool has the
         * block, another thread may be handed the same address. */
        cupool_origin_t gone;
        cupool_origin_remove(b->ptr, &gone);
        give_back(b->ptr, stream);
        bytes += b->size;
        free(b);
        b = next;
    }
    return bytes;
}

static int batch_complete(deferred_batch_t *batch, int wait)
{
    for (; batch->checked < batch->nevents; batch->checked++) {
        CUevent ev = batch->events[batch->checked];
        CUresult r = wait ? real_cuEventSynchronize(ev) : real_cuEventQuery(ev);
        if (r == CUDA_ERROR_NOT_READY) return 0;
        /* Any other error means the event will never say more: stop waiting on it. */
    }
    return 1;
}

/* Records the events that cover every pending free: one on the legacy stream
 * (which follows every blocking and per-thread stream) and one on each live
 * non-blocking stream.  Called with c->lock held and c->ctx current. */
static void record_batch(cupool_context_t *c)
{
    deferred_batch_t *batch = malloc(sizeof *batch + (size_t)(1 + c->nstreams) * sizeof(CUevent));
    CUresult r = batch ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    if (batch) batch->nevents = batch->checked = 0;
    for (int i = -1; r == CUDA_SUCCESS && i < c->nstreams; i++) {
        CUstream stream = i < 0 ? CU_STREAM_LEGACY : c->streams[i];
        /* An idle stream has nothing left that could use the blocks (work
         * submitted after the free may not use them), so it needs no event:
         * frameworks keep dozens of streams, most of them idle. */
        if (i >= 0 && real_cuStreamQuery(stream) == CUDA_SUCCESS) continue;
        CUevent ev = take_event(c);
        r = ev ? real_cuEventRecord(ev, stream) : CUDA_ERROR_OUT_OF_MEMORY;
        if (r == CUDA_SUCCESS) batch->events[batch->nevents++] = ev;
        else if (ev) give_event(c, ev);
    }
    if (r != CUDA_SUCCESS) {
        /* Could not record: fall back to the strongest order. */
        cupool_message_once(CUPOOL_MSG_WARN, "cannot record events for deferred frees (%s); synchronizing instead",
                            cupool_result_name(r));
        if (batch) {
            for (int i = 0; i < batch->nevents; i++) give_event(c, batch->events[i]);
            free(batch);
        }
        real_cuCtxSynchronize();
        release_blocks(c->pending, c->private_stream);
        c->deferred_bytes = 0;
    } else {
        batch->blocks = c->pending;
        batch->next = NULL;
        if (c->tail) c->tail->next = batch;
        else c->head = batch;
        c->tail = batch;
    }
    c->pending = NULL;
    c->npending = 0;
    c->batch_start_ns = 0;
}

/* Returns the batches whose events have completed to the pools, and waits
 * for the oldest ones while more than `keep` bytes are still waiting (0:
 * wait for all; UINT64_MAX: never wait).  Called with c->lock held and
 * c->ctx current. */
static void reclaim_locked(cupool_context_t *c, uint64_t keep)
{
    if (c->pending && atomic_load(&cupool_captures) == 0) {
        uint64_t now = cupool_now_ns();
        if (c->deferred_bytes > keep || c->nstreams <= BATCH_CHEAP_STREAMS || c->npending >= BATCH_MAX_BLOCKS ||
            now - c->batch_start_ns >= BATCH_MAX_WAIT_NS)
            record_batch(c);
    }
    while (c->head && batch_complete(c->head, c->deferred_bytes > keep)) {
        deferred_batch_t *batch = c->head;
        c->head = batch->next;
        if (!c->head) c->tail = NULL;
        /* The events have completed; the waits cost nothing on the GPU but
         * make the free stream-ordered after every use, which is what
         * compute-sanitizer's stream-ordered race tracking looks for. */
        for (int i = 0; i < batch->nevents; i++) {
            real_cuStreamWaitEvent(c->private_stream, batch->events[i], 0);
            give_event(c, batch->events[i]);
        }
        c->deferred_bytes -= release_blocks(batch->blocks, c->private_stream);
        free(batch);
    }
    /* Frees made while a capture was in progress wait for it to end. */
    if (c->held && atomic_load(&cupool_captures) == 0) {
        real_cuCtxSynchronize();
        release_blocks(c->held, c->private_stream);
        c->held = NULL;
    }
}

void cupool_reclaim(cupool_context_t *c, int wait)
{
    if (CUPOOL_UNLIKELY(c->sync_due) && atomic_load(&cupool_captures) == 0) synchronize_for_switch(c);
    if (!c->head && !c->held && !c->pending) return;
    pthread_mutex_lock(&c->lock);
    CUstreamCaptureMode previous = cupool_relaxed_begin();
    reclaim_locked(c, wait ? 0 : UINT64_MAX);
    cupool_relaxed_end(previous);
    pthread_mutex_unlock(&c->lock);
}

static CUresult defer(cupool_context_t *c, const cupool_origin_t *o, int held)
{
    deferred_block_t *b = malloc(sizeof *b);
    if (!b) return CUDA_ERROR_OUT_OF_MEMORY;
    b->ptr = o->ptr;
    b->size = o->size;
    pthread_mutex_lock(&c->lock);
    if (held) {
        b->next = c->held;
        c->held = b;
    } else {
        b->next = c->pending;
        c->pending = b;
        c->deferred_bytes += o->size;
        if (c->npending++ == 0) c->batch_start_ns = cupool_now_ns();
        /* Past the cap, wait for the oldest batches until a quarter of it
         * is free again: the host stays ahead of the GPU, by less. */
        reclaim_locked(c, c->deferred_bytes > DEFERRED_MAX_BYTES ? DEFERRED_MAX_BYTES / 4 * 3 : UINT64_MAX);
    }
    pthread_mutex_unlock(&c->lock);
    return CUDA_SUCCESS;
}

int cupool_free_is_deferred(const cupool_origin_t *o)
{
    /* During a capture neither the legacy stream nor a context-wide
     * synchronization may be touched: the block is held until it ends. */
    return atomic_load_explicit(&cupool_captures, memory_order_relaxed) > 0 ||
           atomic_load_explicit(&o->owner->mode, memory_order_relaxed) == CUPOOL_FREE_DEFERRED;
}

CUresult cupool_free_block(cupool_context_t *c, const cupool_origin_t *o, int deferred)
{
    if (deferred) return defer(c, o, atomic_load_explicit(&cupool_captures, memory_order_relaxed) > 0);
    if (atomic_load_explicit(&c->mode, memory_order_relaxed) == CUPOOL_FREE_ORDERED)
        return give_back(o->ptr, CU_STREAM_LEGACY);
    CUresult r = real_cuCtxSynchronize();
    /* A context that cannot synchronize is broken: the block is forgotten. */
    if (r != CUDA_SUCCESS) return r;
    /* On the legacy stream: ordered after the legacy, blocking and
     * per-thread streams' uses in stream order too, not only in time. */
    return give_back(o->ptr, CU_STREAM_LEGACY);
}

void cupool_trim_device(cupool_context_t *c)
{
    cupool_device_t *dev = c->device;
    cupool_reclaim(c, 1);
    CUstreamCaptureMode previous = cupool_relaxed_begin();
    if (atomic_load(&cupool_captures) == 0) real_cuCtxSynchronize();
    for (int i = 0; i < dev->npools; i++) real_cuMemPoolTrimTo(dev->pools[i], 0);
    cupool_relaxed_end(previous);
    atomic_fetch_add(&cupool_stats_for(dev->ordinal)->trims, 1);
}

/* ---- context teardown ---------------------------------------------------- */

static void free_on_legacy(const cupool_origin_t *o, void *arg)
{
    cupool_context_t *c = arg;
    real_cuMemFreeAsync(o->ptr, CU_STREAM_LEGACY);
    cupool_device_used(c->device, -(int64_t)o->size);
    cupool_stats_free(c->device->ordinal, CUPOOL_ROUTE_POOL, o->size);
}

/* Hands back every deferred block of a context whose work is known to be
 * complete, without looking at its events (they may be gone with it). */
static void drop_deferred(cupool_context_t *c, CUstream stream)
{
    while (c->head) {
        deferred_batch_t *batch = c->head;
        c->head = batch->next;
        release_blocks(batch->blocks, stream);
        free(batch);
    }
    c->tail = NULL;
    release_blocks(c->pending, stream);
    release_blocks(c->held, stream);
    c->pending = c->held = NULL;
    c->npending = 0;
    c->deferred_bytes = 0;
}

/* Returns every block of the context to its pool and forgets the context:
 * natively its memory dies with it.  The context must be current. */
static void teardown_current(cupool_context_t *c)
{
    CUstreamCaptureMode previous = cupool_relaxed_begin();
    real_cuCtxSynchronize();
    pthread_mutex_lock(&c->lock);
    drop_deferred(c, c->private_stream);
    pthread_mutex_unlock(&c->lock);
    if (c->device->pooled) {
        cupool_origin_drain(c, free_on_legacy, c);
        real_cuStreamSynchronize(c->private_stream);
        real_cuStreamDestroy_v2(c->private_stream);
    }
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
        atomic_fetch_add(&generation, 1);
        return c;
    }
    return NULL;
}

static void destroy_state(cupool_context_t *c)
{
    free(c->streams);
    free(c->spare_events);
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

static cupool_context_t *find_primary(int ordinal)
{
    pthread_mutex_lock(&registry_lock);
    cupool_context_t *c = contexts;
    while (c && !(c->primary && c->device->ordinal == ordinal)) c = c->next;
    pthread_mutex_unlock(&registry_lock);
    return c;
}

/* ---- start-up and fork --------------------------------------------------- */

static void fork_prepare(void)
{
    pthread_mutex_lock(&registry_lock);
    cupool_origin_lock_all();
}

static void fork_parent(void)
{
    cupool_origin_unlock_all();
    pthread_mutex_unlock(&registry_lock);
}

static void fork_child(void)
{
    cupool_origin_unlock_all();
    pthread_mutex_unlock(&registry_lock);
    /* The parent's contexts are not the child's: pass everything through. */
    forked_child = 1;
    cupool_stop();
}

void cupool_pools_start(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* ---- shims: contexts ----------------------------------------------------- */

static CUresult after_create(CUresult result, CUcontext *pctx)
{
    if (result == CUDA_SUCCESS && pctx && cupool_active()) cupool_context_of(*pctx);
    return result;
}

CUPOOL_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CUPOOL_SHIM_BEGIN(call, cuCtxCreate_v2);
    call.device = dev;
    return cupool_call_end(&call, after_create(real_cuCtxCreate_v2(pctx, flags, dev), pctx));
}

CUPOOL_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                      unsigned int flags, CUdevice dev)
{
    CUPOOL_SHIM_BEGIN(call, cuCtxCreate_v3);
    call.device = dev;
    return cupool_call_end(&call, after_create(real_cuCtxCreate_v3(pctx, paramsArray, numParams, flags, dev), pctx));
}

CUPOOL_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev)
{
    CUPOOL_SHIM_BEGIN(call, cuCtxCreate_v4);
    call.device = dev;
    return cupool_call_end(&call, after_create(real_cuCtxCreate_v4(pctx, params, flags, dev), pctx));
}

CUPOOL_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUPOOL_SHIM_BEGIN(call, cuDevicePrimaryCtxRetain);
    call.device = dev;
    CUresult r = real_cuDevicePrimaryCtxRetain(pctx, dev);
    if (r == CUDA_SUCCESS && pctx && cupool_active()) {
        /* Registering needs the context current: borrow it for a moment. */
        int pushed = cupool_enter_context(*pctx);
        cupool_context_t *c = cupool_context_of(*pctx);
        if (c) c->primary = 1;
        cupool_leave_context(pushed);
    }
    return cupool_call_end(&call, r);
}

CUPOOL_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    CUPOOL_SHIM_BEGIN(call, cuCtxDestroy_v2);
    if (ctx && cupool_active()) forget_context(ctx);
    return cupool_call_end(&call, real_cuCtxDestroy_v2(ctx));
}

CUPOOL_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    CUPOOL_SHIM_BEGIN(call, cuDevicePrimaryCtxReset_v2);
    call.device = dev;
    cupool_context_t *c = cupool_active() ? find_primary(dev) : NULL;
    if (c) forget_context(c->ctx);
    return cupool_call_end(&call, real_cuDevicePrimaryCtxReset_v2(dev));
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
        drop_deferred(c, CU_STREAM_LEGACY);
        real_cuCtxSynchronize();
        cupool_relaxed_end(previous);
        cupool_leave_context(pushed);
        real_cuDevicePrimaryCtxRelease_v2(ordinal);
    }
    /* The context's stream and events died with it: only host state is left. */
    destroy_state(c);
}

CUPOOL_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    CUPOOL_SHIM_BEGIN(call, cuDevicePrimaryCtxRelease_v2);
    call.device = dev;
    CUresult r = real_cuDevicePrimaryCtxRelease_v2(dev);
    cupool_context_t *c = r == CUDA_SUCCESS && cupool_active() ? find_primary(dev) : NULL;
    unsigned flags;
    int active = 1;
    if (c && real_cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && !active) {
        pthread_mutex_lock(&registry_lock);
        c = unlink_context(c->ctx);
        pthread_mutex_unlock(&registry_lock);
        if (c) forget_dead_primary(c, dev);
    }
    return cupool_call_end(&call, r);
}

/* ---- shims: peer access -------------------------------------------------- */

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
static void mirror_peer_access(CUcontext peer, int enable)
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

CUPOOL_EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
    CUPOOL_SHIM_BEGIN(call, cuCtxEnablePeerAccess);
    CUresult r = real_cuCtxEnablePeerAccess(peerContext, Flags);
    if (r == CUDA_SUCCESS && cupool_active()) mirror_peer_access(peerContext, 1);
    return cupool_call_end(&call, r);
}

CUPOOL_EXPORT CUresult cuCtxDisablePeerAccess(CUcontext peerContext)
{
    CUPOOL_SHIM_BEGIN(call, cuCtxDisablePeerAccess);
    CUresult r = real_cuCtxDisablePeerAccess(peerContext);
    if (r == CUDA_SUCCESS && cupool_active()) mirror_peer_access(peerContext, 0);
    return cupool_call_end(&call, r);
}

/* ---- shims: streams ------------------------------------------------------ */

static void track_stream(CUstream stream, unsigned flags)
{
    if (!(flags & CU_STREAM_NON_BLOCKING) || !cupool_active()) return;
    cupool_context_t *c = cupool_current_context();
    if (!c) return;
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

CUPOOL_EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    CUPOOL_SHIM_BEGIN(call, cuStreamCreate);
    CUresult r = real_cuStreamCreate(phStream, Flags);
    if (r == CUDA_SUCCESS) track_stream(*phStream, Flags);
    call.stream = r == CUDA_SUCCESS ? *phStream : NULL;
    return cupool_call_end(&call, r);
}

CUPOOL_EXPORT CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    CUPOOL_SHIM_BEGIN(call, cuStreamCreateWithPriority);
    CUresult r = real_cuStreamCreateWithPriority(phStream, flags, priority);
    if (r == CUDA_SUCCESS) track_stream(*phStream, flags);
    call.stream = r == CUDA_SUCCESS ? *phStream : NULL;
    return cupool_call_end(&call, r);
}

CUPOOL_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream)
{
    CUPOOL_SHIM_BEGIN(call, cuStreamDestroy_v2);
    call.stream = hStream;
    if (hStream && cupool_active() && !forked_child) {
        pthread_mutex_lock(&registry_lock);
        for (cupool_context_t *c = contexts; c; c = c->next) {
            pthread_mutex_lock(&c->lock);
            for (int i = 0; i < c->nstreams; i++) {
                if (c->streams[i] != hStream) continue;
                c->streams[i] = c->streams[--c->nstreams];
                /* Its remaining work may still use blocks freed in deferred
                 * mode, which will no longer wait on it: let it finish. */
                if (c->head || c->pending) real_cuStreamSynchronize(hStream);
                break;
            }
            pthread_mutex_unlock(&c->lock);
        }
        pthread_mutex_unlock(&registry_lock);
    }
    return cupool_call_end(&call, real_cuStreamDestroy_v2(hStream));
}

/* ---- shims: capture ------------------------------------------------------ */

static CUresult after_begin(CUresult r)
{
    if (r == CUDA_SUCCESS) atomic_fetch_add(&cupool_captures, 1);
    return r;
}

static int capturing(CUstream stream)
{
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    return real_cuStreamIsCapturing && real_cuStreamIsCapturing(stream, &status) == CUDA_SUCCESS &&
           status != CU_STREAM_CAPTURE_STATUS_NONE;
}

CUPOOL_EXPORT CUresult cuStreamBeginCapture(CUstream hStream)
{
    CUPOOL_SHIM_BEGIN(call, cuStreamBeginCapture);
    call.stream = hStream;
    return cupool_call_end(&call, after_begin(real_cuStreamBeginCapture(hStream)));
}

CUPOOL_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream hStream)
{
    CUPOOL_SHIM_BEGIN(call, cuStreamBeginCapture_ptsz);
    call.stream = hStream;
    return cupool_call_end(&call, after_begin(real_cuStreamBeginCapture_ptsz(hStream)));
}

CUPOOL_EXPORT CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    CUPOOL_SHIM_BEGIN(call, cuStreamBeginCapture_v2);
    call.stream = hStream;
    return cupool_call_end(&call, after_begin(real_cuStreamBeginCapture_v2(hStream, mode)));
}

CUPOOL_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    CUPOOL_SHIM_BEGIN(call, cuStreamBeginCapture_v2_ptsz);
    call.stream = hStream;
    return cupool_call_end(&call, after_begin(real_cuStreamBeginCapture_v2_ptsz(hStream, mode)));
}

CUPOOL_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                                   const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                                   CUstreamCaptureMode mode)
{
    CUPOOL_SHIM_BEGIN(call, cuStreamBeginCaptureToGraph);
    call.stream = hStream;
    return cupool_call_end(&call, after_begin(real_cuStreamBeginCaptureToGraph(hStream, hGraph, dependencies,
                                                                               dependencyData, numDependencies, mode)));
}

CUPOOL_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
                                                        const CUgraphNode *dependencies,
                                                        const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                                        CUstreamCaptureMode mode)
{
    CUPOOL_SHIM_BEGIN(call, cuStreamBeginCaptureToGraph_ptsz);
    call.stream = hStream;
    return cupool_call_end(&call, after_begin(real_cuStreamBeginCaptureToGraph_ptsz(
                                      hStream, hGraph, dependencies, dependencyData, numDependencies, mode)));
}

static CUresult end_capture(CUresult (*end)(CUstream, CUgraph *), CUstream stream, CUgraph *graph)
{
    int was = capturing(stream);
    CUresult r = end(stream, graph);
    if (was) atomic_fetch_sub(&cupool_captures, 1);
    return r;
}

CUPOOL_EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    CUPOOL_SHIM_BEGIN(call, cuStreamEndCapture);
    call.stream = hStream;
    return cupool_call_end(&call, end_capture(real_cuStreamEndCapture, hStream, phGraph));
}

CUPOOL_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    CUPOOL_SHIM_BEGIN(call, cuStreamEndCapture_ptsz);
    call.stream = hStream;
    return cupool_call_end(&call, end_capture(real_cuStreamEndCapture_ptsz, hStream, phGraph));
}
