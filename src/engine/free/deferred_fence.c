/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `deferred`'s fences and batches: a free in `deferred` sets a fence after
 * the work of every stream that could still use its block, without making
 * the host wait (unless the memory waiting grows past a cap).  By default
 * (CUPOOL_DEFERRED_ORDER=host) cupool holds the block until the fence has
 * completed, polling on later calls, and keeps it in the ready store
 * (ready_store.c) for the next allocation of its size; with `gpu` the block
 * goes back to its pool at once, its free ordered on the GPU behind the
 * fence.  A free
 * made while a stream capture is in progress (any mode) is held here until
 * the capture ends.
 */
#include "free_store.h"

/* deferred mode must cover the work of the legacy stream and of every live
 * non-blocking stream.  Frameworks create dozens of streams (PyTorch's
 * stream pool: 32 per priority level, 128 in all) and use few of them.
 *
 * A driver of CUDA 12.5 or later records one event for all the work of a
 * context (cuCtxRecordEvent), at a cost that does not grow with the number
 * of streams, so every free sets its own fence.  compute-sanitizer (13.0) does
 * not order a free after such an event, so with a CUDA tool attached, or
 * CUPOOL_DEFERRED_FENCE=streams, each stream's work is fanned in instead:
 * cupool's fence stream waits for an event recorded on each (cuEventRecord +
 * cuStreamWaitEvent, a cost per stream: docs/DESIGN.md, "Measured costs
 * behind the code"), and one event
 * after those waits is the only thing polled.  A fan-in is set for a batch
 * of frees at once, at the first cupool call after the batch has waited
 * long enough or grown large enough for it to be cheap per free; setting
 * the fence later than the free is still correct: it then covers more
 * work, never less. */
#define BATCH_MIN_WAIT_NS 1000000
#define BATCH_WAIT_NS_PER_STREAM 16000
#define BATCH_MIN_BLOCKS 64
#define BATCH_CHEAP_STREAMS 2

/* A program that frees faster than the GPU catches up (the host runs ahead
 * of its kernels) would otherwise pile up freed memory without bound; past
 * CUPOOL_DEFERRED_WAIT bytes waiting (cupool_deferred_cap, ready_store.c),
 * a free waits for the oldest batches (a native cuMemFree would have
 * waited for the whole device). */

/* ---- frees ordered on the GPU (CUPOOL_DEFERRED_ORDER=gpu) -------------------
 * A block cupool holds until its fence completes is memory no allocation can
 * have meanwhile, and a block kept for its own size is memory no other size
 * can have: a training loop that runs the CPU ahead of the GPU held twice
 * what its framework's caching allocator holds, most of it reserved by the
 * pool while the held blocks waited (docs/DESIGN.md, "Memory held").  So a
 * batch's blocks go back to their pools as soon as its fence is recorded:
 * cupool's fence stream waits for the fence and frees them there
 * (cuMemFreeAsync), behind every use in stream order.  The pool hands their
 * memory on, to an allocation of any size on cupool's private stream, once
 * the GPU has passed the frees (its opportunistic reuse, on by default);
 * where the pool can no longer grow, it makes the allocation wait for them
 * instead (its internal dependencies, on by default), and the allocation's
 * query of its stream waits too: out of memory only where the frees could
 * not help.  The batch stays, with its fence and bytes, as the count of
 * memory waiting for the GPU (statistics, CUPOOL_DEFERRED_WAIT). */

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

static int batch_complete(deferred_batch_t *batch, int wait)
{
    CUresult r = wait ? real_cuEventSynchronize(batch->fence) : real_cuEventQuery(batch->fence);
    /* Any error but "not ready" means the event will never say more. */
    return r != CUDA_ERROR_NOT_READY;
}

/* Whether fences are one context-wide event (see above); decided once,
 * and given up for good if the driver refuses one. */
static pthread_once_t fence_kind_once = PTHREAD_ONCE_INIT;
static atomic_int context_fence;

static void decide_fence_kind(void)
{
    uint64_t kind = cupool_option_started(CUPOOL_OPT_DEFERRED_FENCE);
    const char *why = "CUPOOL_DEFERRED_FENCE=streams";
    if (kind != CUPOOL_FENCE_STREAMS && !real_cuCtxRecordEvent) {
        why = "the driver lacks cuCtxRecordEvent (CUDA 12.5+)";
        if (kind == CUPOOL_FENCE_CONTEXT)
            cupool_message(CUPOOL_MSG_WARN, "CUPOOL_DEFERRED_FENCE=context: %s; recording an event on every stream", why);
    } else if (kind == CUPOOL_FENCE_AUTO && cupool_cuda_tool_attached()) {
        why = "a CUDA tool is attached";
    } else if (kind != CUPOOL_FENCE_STREAMS) {
        atomic_store(&context_fence, 1);
    }
    if (atomic_load(&context_fence))
        cupool_message(CUPOOL_MSG_INFO, "deferred fences: one event for the whole context (cuCtxRecordEvent)");
    else
        cupool_message(CUPOOL_MSG_INFO, "deferred fences: an event on every stream (%s)", why);
}

int cupool_context_fences(void)
{
    pthread_once(&fence_kind_once, decide_fence_kind);
    return atomic_load_explicit(&context_fence, memory_order_relaxed);
}

/* How long the first free of a batch may wait for company before the
 * batch's fence is set: 0 where a fence costs one call. */
static uint64_t batch_wait_ns(const cupool_context_t *c)
{
    if (cupool_context_fences() || c->nstreams <= BATCH_CHEAP_STREAMS) return 0;
    uint64_t wait_ns = (uint64_t)c->nstreams * BATCH_WAIT_NS_PER_STREAM;
    return wait_ns < BATCH_MIN_WAIT_NS ? BATCH_MIN_WAIT_NS : wait_ns;
}

/* The fence stream and the scratch event of the per-stream fan-in, made at
 * their first use. */
static CUresult fan_in_ready(cupool_context_t *c)
{
    CUresult r = CUDA_SUCCESS;
    if (!c->fence_stream) r = real_cuStreamCreate(&c->fence_stream, CU_STREAM_NON_BLOCKING);
    if (r == CUDA_SUCCESS && !c->scratch_event) r = real_cuEventCreate(&c->scratch_event, CU_EVENT_DISABLE_TIMING);
    return r;
}

/* Makes the fence stream wait for the work submitted so far to one stream. */
static CUresult fan_in(cupool_context_t *c, CUstream stream)
{
    CUresult r = real_cuEventRecord(c->scratch_event, stream);
    return r == CUDA_SUCCESS ? real_cuStreamWaitEvent(c->fence_stream, c->scratch_event, 0) : r;
}

/* Records `fence` after all the work submitted so far to the context: the
 * legacy stream's (which follows every blocking and per-thread stream) and
 * each live non-blocking stream's.  c->lock and the capture gate held. */
static CUresult record_fence(cupool_context_t *c, CUevent fence)
{
    CUPOOL_ASSERT_HELD(&c->lock);
    CUPOOL_ASSERT_HELD(cupool_capture_gate_lock());
    if (cupool_context_fences()) {
        CUresult r = real_cuCtxRecordEvent(c->ctx, fence);
        if (r == CUDA_SUCCESS) return r;
        /* A driver that has the call may still refuse it (a platform or
         * mode without it): the fan-in from now on, rather than a
         * synchronization at every free. */
        int was = 1;
        if (atomic_compare_exchange_strong(&context_fence, &was, 0))
            cupool_message(CUPOOL_MSG_WARN, "cuCtxRecordEvent failed (%s); deferred fences record an event on every "
                                            "stream from now on", cupool_result_name(r));
    }
    /* With no non-blocking stream, and none destroyed whose work the fence
     * stream waits for, the legacy stream alone covers every use: the fence
     * is an event recorded there, nothing to fan in. */
    if (c->nstreams == 0 && !c->streams_folded) return real_cuEventRecord(fence, CU_STREAM_LEGACY);
    CUresult r = fan_in_ready(c);
    /* A wait enqueued by cuStreamWaitEvent holds on to the record made
     * before it, so one scratch event serves every stream. */
    for (int i = -1; r == CUDA_SUCCESS && i < c->nstreams; i++) r = fan_in(c, i < 0 ? CU_STREAM_LEGACY : c->streams[i]);
    return r == CUDA_SUCCESS ? real_cuEventRecord(fence, c->fence_stream) : r;
}

/* A stream destroyed with work still queued is no longer among those the
 * per-stream fan-in visits, yet that work may use a block the program frees
 * after the destroy (natively cuMemFree would wait for it).  Its work is
 * folded into the fence stream, where every later fence waits: one event
 * and one wait, no host wait.  A context-wide fence (cuCtxRecordEvent)
 * covers all the context's work, a destroyed stream's included, and with
 * it nothing is folded; blocks freed before the destroy whose fence is not
 * recorded yet, or a fold that fails or would touch a stream capture, get
 * the stream synchronized instead, as before. */
void cupool_deferred_stream_destroyed(cupool_context_t *c, CUstream stream)
{
    CUPOOL_ASSERT_HELD(&c->lock);
    int per_stream = !cupool_context_fences() && atomic_load(&c->mode) == CUPOOL_FREE_DEFERRED;
    CUresult r = CUDA_ERROR_NOT_READY;
    if (per_stream && atomic_load(&cupool_hot.captures) == 0) {
        r = fan_in_ready(c);
        if (r == CUDA_SUCCESS) r = fan_in(c, stream);
        if (r == CUDA_SUCCESS) c->streams_folded = 1;
    }
    if (r == CUDA_SUCCESS || !(per_stream || cupool_deferred_waiting(c))) return;
    CUstreamCaptureMode previous = cupool_relaxed_begin();
    real_cuStreamSynchronize(stream);
    cupool_relaxed_end(previous);
}


/* After a completed fence, makes cupool's private stream wait for it: the
 * wait costs nothing on the GPU but makes the frees that follow
 * stream-ordered after every use, which is what compute-sanitizer's
 * stream-ordered race tracking looks for (in vain after a context-wide
 * event, which it does not model). */
static void order_after(cupool_context_t *c, CUevent fence)
{
    if (!cupool_context_fences()) real_cuStreamWaitEvent(c->private_stream, fence, 0);
}

/* With CUPOOL_DEFERRED_ORDER=gpu, hands the batch's blocks back to their
 * pools on the fence stream, behind its fence (see above); 1 when they are
 * back, 0 when they stay in the batch, to go back once it has completed.
 * c->lock and the capture gate held, no capture in progress. */
static int free_behind(cupool_context_t *c, deferred_batch_t *batch)
{
    CUPOOL_ASSERT_HELD(&c->lock);
    CUPOOL_ASSERT_HELD(cupool_capture_gate_lock());
    CUPOOL_ASSERT(atomic_load(&cupool_hot.captures) == 0);
    if (!cupool_deferred_on_gpu()) return 0;
    CUresult r = fan_in_ready(c);
    if (r == CUDA_SUCCESS) r = real_cuStreamWaitEvent(c->fence_stream, batch->fence, 0);
    if (r != CUDA_SUCCESS) {
        cupool_message_once(CUPOOL_MSG_WARN, "cannot order frees on the GPU (%s); deferred blocks wait for their "
                                             "fences on the host",
                            cupool_result_name(r));
        return 0;
    }
    cupool_release_blocks(c, batch->blocks, c->fence_stream);
    batch->blocks = NULL;
    return 1;
}

/* Records `fence` unless a stream capture is in progress (the fence would
 * invalidate it): the check and the record under the capture gate, so that
 * no capture begins in between; with a batch, its blocks go back to their
 * pools behind the fence under the same hold (free_behind).  Returns record_fence()'s answer, or
 * CUPOOL_CAPTURE_IN_PROGRESS: the caller then waits for the capture to
 * end.  The gate is never held across a synchronization: a thread
 * beginning a capture may wait for it while the GPU's work waits for that
 * thread. */
static CUresult cupool_record_fence_gated(cupool_context_t *c, CUevent fence, deferred_batch_t *batch)
{
    CUPOOL_ASSERT_HELD(&c->lock);
    cupool_capture_gate_enter();
    CUresult r = atomic_load(&cupool_hot.captures) > 0 ? CUPOOL_CAPTURE_IN_PROGRESS : record_fence(c, fence);
    if (r == CUDA_SUCCESS && batch && free_behind(c, batch))
        atomic_fetch_add_explicit(&cupool_stats_for(c->ordinal)->gpu_ordered_frees, 1, memory_order_relaxed);
    cupool_capture_gate_leave();
    return r;
}

/* Sets a fence after all the work of the context and queues the pending
 * frees behind it (or, failing that, synchronizes the context and frees
 * them); a capture in progress leaves them pending until its end.  Called
 * with c->lock held and c->ctx current. */
static void record_batch(cupool_context_t *c)
{
    CUPOOL_ASSERT_HELD(&c->lock);
    CUPOOL_ASSERT(c->pending != NULL);
    deferred_batch_t *batch = cupool_take_record(&c->spare_batches, sizeof(deferred_batch_t));
    CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
    if (batch && (batch->fence = take_event(c))) {
        batch->fenced_ns = cupool_now_ns();
        batch->blocks = c->pending;
        batch->bytes = 0;
        for (freed_block_t *b = c->pending; b; b = b->next) batch->bytes += b->size;
        r = cupool_record_fence_gated(c, batch->fence, batch);
        if (r != CUDA_SUCCESS) give_event(c, batch->fence);
    }
    if (r == CUPOOL_CAPTURE_IN_PROGRESS) {
        cupool_give_record(&c->spare_batches, batch);
        return;
    }
    if (r != CUDA_SUCCESS) {
        /* Could not set the fence: fall back to the strongest order. */
        cupool_message_once(CUPOOL_MSG_WARN, "cannot record events for deferred frees (%s); synchronizing instead",
                            cupool_result_name(r));
        if (batch) cupool_give_record(&c->spare_batches, batch);
        real_cuCtxSynchronize();
        CUPOOL_HINT_WRITE(c->deferred_bytes, c->deferred_bytes - cupool_release_blocks(c, c->pending, c->private_stream));
    } else {
        batch->next = NULL;
        if (c->tail) c->tail->next = batch;
        else CUPOOL_HINT_WRITE(c->head, batch);
        c->tail = batch;
    }
    CUPOOL_HINT_WRITE(c->pending, NULL);
    c->npending = 0;
    c->batch_start_ns = 0;
}

/* Frees made while a capture was in progress go back to their pools once
 * it has ended and all the work so far has completed: a fence as for a
 * batch, then a wait for it.  Called with c->lock held and c->ctx current. */
static void release_held(cupool_context_t *c)
{
    CUPOOL_ASSERT_HELD(&c->lock);
    CUevent fence = take_event(c);
    CUresult r = fence ? cupool_record_fence_gated(c, fence, NULL) : CUDA_ERROR_OUT_OF_MEMORY;
    if (r != CUPOOL_CAPTURE_IN_PROGRESS) {
        if (r == CUDA_SUCCESS) r = real_cuEventSynchronize(fence);
        else real_cuCtxSynchronize(); /* could not record: the strongest order */
        if (r == CUDA_SUCCESS) order_after(c, fence);
        cupool_release_blocks(c, c->held, c->private_stream);
        CUPOOL_HINT_WRITE(c->held, NULL);
    }
    if (fence) give_event(c, fence);
}

/* Moves the blocks of the batches whose events have completed to the ready
 * store (in `deferred`) or their pools, and waits for the oldest batches
 * while more than `keep` bytes are still waiting (0: wait for all, and empty
 * the ready store too; UINT64_MAX: never wait).  Called with c->lock held
 * and c->ctx current. */
static void reclaim_locked(cupool_context_t *c, uint64_t keep)
{
    CUPOOL_ASSERT_HELD(&c->lock);
    /* The store serves `deferred` and `ordered` allocations: in `sync` it
     * only empties. */
    uint64_t cap = keep ? cupool_ready_cap(c) : 0;
    if (c->pending && atomic_load(&cupool_hot.captures) == 0) {
        /* The clock is read last: where fences are cheap every free sets
         * its own. */
        uint64_t wait_ns = batch_wait_ns(c);
        if (c->deferred_bytes > keep || wait_ns == 0 || c->npending >= BATCH_MIN_BLOCKS + c->nstreams ||
            cupool_now_ns() - c->batch_start_ns >= wait_ns)
            record_batch(c);
    }
    while (c->head && batch_complete(c->head, c->deferred_bytes > keep)) {
        deferred_batch_t *batch = c->head;
        CUPOOL_HINT_WRITE(c->head, batch->next);
        if (!c->head) c->tail = NULL;
        order_after(c, batch->fence);
        give_event(c, batch->fence);
        CUPOOL_ASSERT(c->deferred_bytes >= batch->bytes);
        CUPOOL_HINT_WRITE(c->deferred_bytes, c->deferred_bytes - batch->bytes);
        for (freed_block_t *b = batch->blocks, *next; b; b = next) {
            next = b->next;
            if (cap) cupool_ready_put(c, b, batch->fenced_ns, c->private_stream);
            else cupool_release_block(c, b, c->private_stream);
        }
        cupool_give_record(&c->spare_batches, batch);
    }
    if (c->ready_oldest) cupool_ready_trim(c, cap, cupool_now_ns(), c->private_stream);
    if (c->held && atomic_load(&cupool_hot.captures) == 0) release_held(c);
    if (cupool_hot.timing) cupool_stats_held(c->ordinal, c->ready_bytes, c->deferred_bytes);
}

/* Reclaims under the context's lock (keep as for reclaim_locked) and, for a
 * size, takes a ready block of it; returns the block, or 0. */
static CUdeviceptr reclaim_and_take(cupool_context_t *c, uint64_t keep, size_t size)
{
    CUPOOL_ASSERT_NOT_HELD(&c->lock);
    if (CUPOOL_UNLIKELY(CUPOOL_HINT_READ(c->sync_due)) && atomic_load(&cupool_hot.captures) == 0) cupool_ordered_leave(c);
    /* Ready blocks alone matter to a taker, and to a wait for everything
     * (which empties the store too).  Batches whose blocks are back in their
     * pools already (CUPOOL_DEFERRED_ORDER=gpu) only count bytes, which the
     * next free brings up to date: only a wait for everything waits for
     * them. */
    int waiting = keep == 0 || !cupool_deferred_on_gpu() ? cupool_deferred_waiting(c)
                                               : CUPOOL_HINT_READ(c->pending) || CUPOOL_HINT_READ(c->held);
    if (!waiting && !(CUPOOL_HINT_READ(c->ready_oldest) && (size || keep == 0))) return 0;
    pthread_mutex_lock(&c->lock);
    CUstreamCaptureMode previous = cupool_relaxed_begin();
    reclaim_locked(c, keep);
    CUdeviceptr ptr = size ? cupool_ready_take(c, size) : 0;
    cupool_relaxed_end(previous);
    pthread_mutex_unlock(&c->lock);
    return ptr;
}

void cupool_reclaim(cupool_context_t *c)
{
    reclaim_and_take(c, UINT64_MAX, 0);
}

void cupool_reclaim_all(cupool_context_t *c)
{
    reclaim_and_take(c, 0, 0);
}

int cupool_deferred_reuse(cupool_context_t *c, size_t size, CUdeviceptr *dptr)
{
    CUdeviceptr ptr = reclaim_and_take(c, UINT64_MAX, size);
    if (!ptr) return 0;
    *dptr = ptr;
    return 1;
}

/* Queues a free behind a fence (held 0) or until the capture in progress
 * has ended (held 1). */
static CUresult defer(cupool_context_t *c, const cupool_origin_t *o, int held)
{
    CUPOOL_ASSERT_NOT_HELD(&c->lock);
    pthread_mutex_lock(&c->lock);
    freed_block_t *b = cupool_take_record(&c->spare_blocks, sizeof(freed_block_t));
    if (!b) {
        pthread_mutex_unlock(&c->lock);
        /* No host memory to queue the block: free it the strongest way,
         * unless a capture forbids that. */
        if (held) return cupool_restore_block(o, CUDA_ERROR_OUT_OF_MEMORY);
        CUresult r = real_cuCtxSynchronize();
        if (r != CUDA_SUCCESS) return cupool_restore_block(o, r);
        cupool_origin_t gone;
        cupool_origin_remove(o->ptr, &gone);
        r = cupool_give_back(o->ptr, CU_STREAM_LEGACY);
        return r == CUDA_SUCCESS ? r : cupool_restore_block(o, r);
    }
    b->ptr = o->ptr;
    b->size = o->size;
    b->due = b->kept = 0; /* back in its pool, or in the store, only once its fence has completed */
    if (held) {
        b->next = c->held;
        CUPOOL_HINT_WRITE(c->held, b);
    } else {
        b->next = c->pending;
        CUPOOL_HINT_WRITE(c->pending, b);
        CUPOOL_HINT_WRITE(c->deferred_bytes, c->deferred_bytes + o->size);
        /* Only a batch that may wait for company needs its start time. */
        if (c->npending++ == 0 && batch_wait_ns(c) > 0) c->batch_start_ns = cupool_now_ns();
        /* Past the cap, wait for the oldest batches until a quarter of it
         * is free again: the host stays ahead of the GPU, by less. */
        uint64_t cap = cupool_deferred_cap(c, CUPOOL_OPT_DEFERRED_WAIT);
        int over = c->deferred_bytes > cap;
        if (over) atomic_fetch_add_explicit(&cupool_stats_for(c->ordinal)->deferred_waits, 1, memory_order_relaxed);
        reclaim_locked(c, over ? cap / 4 * 3 : UINT64_MAX);
    }
    pthread_mutex_unlock(&c->lock);
    return CUDA_SUCCESS;
}

CUresult cupool_defer(cupool_context_t *c, const cupool_origin_t *o)
{
    return defer(c, o, 0);
}

CUresult cupool_defer_held(cupool_context_t *c, const cupool_origin_t *o)
{
    return defer(c, o, 1);
}

/* Hands back every deferred block of a context whose work is known to be
 * complete, without looking at its events (they may be gone with it). */
void cupool_deferred_drop(cupool_context_t *c, CUstream stream)
{
    CUPOOL_ASSERT_HELD(&c->lock);
    c->kept_done = c->kept;
    while (c->head) {
        deferred_batch_t *batch = c->head;
        CUPOOL_HINT_WRITE(c->head, batch->next);
        cupool_release_blocks(c, batch->blocks, stream);
        give_event(c, batch->fence);
        cupool_give_record(&c->spare_batches, batch);
    }
    c->tail = NULL;
    while (c->ready_oldest) cupool_ready_evict(c, c->ready_oldest, stream);
    cupool_release_blocks(c, c->pending, stream);
    cupool_release_blocks(c, c->held, stream);
    CUPOOL_HINT_WRITE(c->pending, NULL);
    CUPOOL_HINT_WRITE(c->held, NULL);
    c->npending = 0;
    CUPOOL_HINT_WRITE(c->deferred_bytes, 0);
}

/* ---- fences for the kept store (kept_store.c) ------------------------------ */

CUresult cupool_fence_record(cupool_context_t *c, CUevent *fence)
{
    CUPOOL_ASSERT_NOT_HELD(&c->lock);
    pthread_mutex_lock(&c->lock);
    int pushed = cupool_enter_context(c->ctx);
    CUstreamCaptureMode previous = cupool_relaxed_begin();
    CUevent ev = take_event(c);
    CUresult r = ev ? cupool_record_fence_gated(c, ev, NULL) : CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) *fence = ev;
    else if (ev) give_event(c, ev);
    cupool_relaxed_end(previous);
    cupool_leave_context(pushed);
    pthread_mutex_unlock(&c->lock);
    return r;
}

int cupool_fence_passed(cupool_context_t *c, CUevent fence, int wait)
{
    CUresult r = wait ? real_cuEventSynchronize(fence) : real_cuEventQuery(fence);
    /* Any error but "not ready" means the event will never say more. */
    if (r == CUDA_ERROR_NOT_READY) return 0;
    cupool_fence_forget(c, fence);
    return 1;
}

void cupool_fence_forget(cupool_context_t *c, CUevent fence)
{
    CUPOOL_ASSERT_NOT_HELD(&c->lock);
    pthread_mutex_lock(&c->lock);
    give_event(c, fence);
    pthread_mutex_unlock(&c->lock);
}
