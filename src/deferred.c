/*
 * How a free is carried out in each free mode (context.h): `ordered` and
 * `sync` hand the block straight back to its pool; `deferred` keeps it until
 * events recorded on every stream that could still use it have completed,
 * polling them on later calls and never making the host wait (unless the
 * memory waiting grows past a cap); a free made while a stream capture is in
 * progress is held until the capture ends.  Blocks stay in the origin table
 * until they are back in their pool, so a second free of one is caught.
 */
#include "context.h"

#include <stdlib.h>

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
        c->deferred_bytes -= release_blocks(c->pending, c->private_stream);
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
    if (CUPOOL_UNLIKELY(c->sync_due) && atomic_load(&cupool_captures) == 0) cupool_synchronize_switch(c);
    if (!c->head && !c->held && !c->pending) return;
    pthread_mutex_lock(&c->lock);
    CUstreamCaptureMode previous = cupool_relaxed_begin();
    reclaim_locked(c, wait ? 0 : UINT64_MAX);
    cupool_relaxed_end(previous);
    pthread_mutex_unlock(&c->lock);
}

/* A free that could not be carried out: the block stays the program's, as
 * it would after a native cuMemFree that failed, and its record says so. */
static CUresult restore(const cupool_origin_t *o, CUresult r)
{
    cupool_origin_t gone, back = *o;
    cupool_origin_remove(o->ptr, &gone);
    back.freed = 0;
    cupool_origin_insert(&back);
    return r;
}

static CUresult defer(cupool_context_t *c, const cupool_origin_t *o, int held)
{
    deferred_block_t *b = malloc(sizeof *b);
    if (!b) {
        /* No host memory to queue the block: free it the strongest way,
         * unless a capture forbids that. */
        if (held) return restore(o, CUDA_ERROR_OUT_OF_MEMORY);
        CUresult r = real_cuCtxSynchronize();
        if (r != CUDA_SUCCESS) return restore(o, r);
        cupool_origin_t gone;
        cupool_origin_remove(o->ptr, &gone);
        r = give_back(o->ptr, CU_STREAM_LEGACY);
        return r == CUDA_SUCCESS ? r : restore(o, r);
    }
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
    CUresult r = CUDA_SUCCESS;
    /* sync: the whole context first.  Then, in both modes, on the legacy
     * stream: ordered after the legacy, blocking and per-thread streams'
     * uses in stream order too, not only in time. */
    if (atomic_load_explicit(&c->mode, memory_order_relaxed) != CUPOOL_FREE_ORDERED) r = real_cuCtxSynchronize();
    if (r == CUDA_SUCCESS) r = give_back(o->ptr, CU_STREAM_LEGACY);
    return r == CUDA_SUCCESS ? r : restore(o, r);
}

int cupool_deferred_waiting(const cupool_context_t *c)
{
    return c->head || c->pending || c->held;
}

/* Hands back every deferred block of a context whose work is known to be
 * complete, without looking at its events (they may be gone with it). */
void cupool_deferred_drop(cupool_context_t *c, CUstream stream)
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
