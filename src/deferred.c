/*
 * How a free is carried out in each free mode (context.h): `sync` hands the
 * block straight back to its pool, and so does `ordered` unless it keeps the
 * block for the context's next allocation of its size (see "ordered reuse"
 * below); `deferred` keeps it until
 * events recorded on every stream that could still use it have completed,
 * polling them on later calls and never making the host wait (unless the
 * memory waiting grows past a cap); a free made while a stream capture is in
 * progress is held until the capture ends.  A `deferred` block whose events
 * have completed is kept ready for the context's next allocation of the same
 * size (see "ready blocks" below) before it goes back to its pool.  Blocks
 * stay in the origin table until they are back in their pool, so a second
 * free of one is caught.
 */
#include "context.h"

#include <stdlib.h>
#include <time.h>

/* A block the ready store cannot index (no host memory for uthash's
 * buckets) goes back to its pool instead: never uthash's exit(). */
#define HASH_NONFATAL_OOM 1
#define HASH_FUNCTION CUPOOL_WORD_HASH
#include <uthash.h>

/* A freed block not yet back in its pool. */
struct deferred_block {
    CUdeviceptr ptr;
    size_t size;
    deferred_block_t *next;               /* in its pending, batch or held list, or its size's ready list */
    deferred_block_t *older, *newer;      /* ready: the context's ready blocks, oldest first */
    uint64_t fenced_ns;                   /* ready: when its batch's fence was recorded (ordered: its free) */
    uint64_t due;                         /* ready, kept by `ordered`: the count of c->fences from which it may
                                             serve (see "ordered reuse"); 0 otherwise */
    uint64_t kept;                        /* ready, kept by `ordered`: its number in c->kept; 0 otherwise (its
                                             users are done) */
};

/* The ready blocks of one size, oldest first. */
struct ready_size {
    size_t size;
    deferred_block_t *oldest, *newest;
    UT_hash_handle hh;
};

/* Blocks freed before one fence was set: they go back to the pool together
 * once it has completed. */
struct deferred_batch {
    deferred_block_t *blocks;
    deferred_batch_t *next;
    CUevent fence;                        /* after all the work of the context (record_fence) */
    uint64_t fenced_ns;                   /* when it was recorded */
};

/* deferred mode must cover the work of the legacy stream and of every live
 * non-blocking stream.  Frameworks create dozens of streams (PyTorch's
 * stream pool: 32 per priority level, 128 in all) and use few of them.
 *
 * A driver of CUDA 12.5 or later records one event for all the work of a
 * context (cuCtxRecordEvent): 0.2-0.3 us on the H200 whatever the number of
 * streams, so every free sets its own fence.  compute-sanitizer (13.0) does
 * not order a free after such an event, so with a CUDA tool attached, or
 * CUPOOL_DEFERRED_FENCE=streams, each stream's work is fanned in instead:
 * cupool's fence stream waits for an event recorded on each (cuEventRecord +
 * cuStreamWaitEvent, about 0.25 us a stream, 32 us for 128), and one event
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
 * this many bytes waiting, a free waits for the oldest batches (a native
 * cuMemFree would have waited for the whole device). */
#ifndef DEFERRED_MAX_BYTES /* -D for a measurement (docs/examples/run24.sh) */
#define DEFERRED_MAX_BYTES (1ull << 30)
#endif

/* The records of blocks and batches are kept for reuse (up to SPARE_MAX
 * of each per context, under c->lock): a deferred free in steady state then
 * makes no host allocation.  A record on a spare list is dead but for the
 * link in its first bytes. */
#define SPARE_MAX 1024

static void *take_record(cupool_spare_list_t *list, size_t size)
{
    void *record = list->head;
    if (!record) return malloc(size);
    list->head = *(void **)record;
    list->count--;
    return record;
}

static void give_record(cupool_spare_list_t *list, void *record)
{
    if (list->count == SPARE_MAX) {
        free(record);
        return;
    }
    *(void **)record = list->head;
    list->head = record;
    list->count++;
}

static void free_records(cupool_spare_list_t *list)
{
    while (list->head) {
        void *record = list->head;
        list->head = *(void **)record;
        free(record);
    }
    list->count = 0;
}

void cupool_deferred_free_spares(cupool_context_t *c)
{
    /* The ready store holds its sentinel and empty lists alone by now,
     * unless the context's blocks could not be handed back (they died with
     * it). */
    for (deferred_block_t *b = c->ready_oldest, *newer; b; b = newer) {
        newer = b->newer;
        free(b);
    }
    CUPOOL_HINT_WRITE(c->ready_oldest, NULL);
    c->ready_newest = NULL;
    CUPOOL_HINT_WRITE(c->ready_bytes, 0);
    struct ready_size *rs, *tmp;
    HASH_ITER(hh, c->ready_sizes, rs, tmp)
    {
        HASH_DEL(c->ready_sizes, rs);
        free(rs);
    }
    c->ready_empty = 0;
    free_records(&c->spare_blocks);
    free_records(&c->spare_batches);
    free_records(&c->spare_sizes);
}

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

static void warn_give_back(CUdeviceptr ptr, CUresult r)
{
    cupool_message(CUPOOL_MSG_WARN, "returning block 0x%llx to its pool failed: %s", (unsigned long long)ptr,
                   cupool_result_name(r));
}

/* Returns one block, no longer in the origin table, to its pool. */
static CUresult give_back(CUdeviceptr ptr, CUstream stream)
{
    CUresult r = real_cuMemFreeAsync(ptr, stream);
    if (r != CUDA_SUCCESS) warn_give_back(ptr, r);
    return r;
}

/* ---- ready blocks ------------------------------------------------------------
 * A `deferred` allocation costs a pool call on cupool's private stream and a
 * query of that stream, so that the block is complete for every stream
 * (about 3.6 us under PyTorch on the H200, where `ordered`'s pool call is
 * 0.6 us).  A freed block whose fence has completed is that already: no work
 * of the program uses it any more, and it never left cupool's hands.  So it
 * waits in the context's ready store, still allocated from its pool, for the
 * context's next `deferred` allocation of the same size, which it serves
 * under c->lock with no driver call.  (For compute-sanitizer the block simply
 * stays allocated; its allocation is ordered before every stream as before.)
 * A ready block goes back to its pool, oldest first, when the store holds
 * more than ready_cap(), when READY_MAX_AGE_NS have passed since its free
 * (its fence) without a taker (a program that moved on to other sizes), when
 * the context leaves `deferred`, and on out-of-memory (cupool_trim_device).
 * cuMemGetInfo counts the store as free memory.
 * The price is memory: a block waits for its own size, where the pool could
 * have served any smaller request from it.  PyTorch on a non-blocking stream
 * (H200, docs/examples/run12-bench.txt): a step 1.08-1.30x -> 1.03-1.17x the
 * caching allocator's time (median 1.055), peak memory 1.45x -> 1.57-1.69x.
 * Handing the oldest ready blocks back on a miss kept the peak at 1.51x but
 * cost more time than the store saved (1.16x): a miss is mostly a block of
 * that size still waiting for its fence, not a size the program dropped. */
#define READY_MAX_AGE_NS 1000000000ull

/* The most the store keeps now: CUPOOL_DEFERRED_READY or
 * CUPOOL_ORDERED_READY as the context's mode says (0 turns it off; `sync`
 * keeps nothing), no more than a pool keeps across synchronizations
 * (CUPOOL_RELEASE_THRESHOLD), and no more than CUPOOL_LIMIT leaves beside
 * the blocks in use on the device (the count CUPOOL_LIMIT keeps). */
static uint64_t ready_cap(const cupool_context_t *c)
{
    int mode = atomic_load_explicit(&c->mode, memory_order_relaxed);
    uint64_t cap = mode == CUPOOL_FREE_DEFERRED  ? cupool_option_started(CUPOOL_OPT_DEFERRED_READY)
                   : mode == CUPOOL_FREE_ORDERED ? cupool_option_started(CUPOOL_OPT_ORDERED_READY)
                                                 : 0;
    uint64_t threshold = cupool_option_started(CUPOOL_OPT_RELEASE_THRESHOLD);
    uint64_t limit = cupool_option_started(CUPOOL_OPT_LIMIT);
    if (threshold < cap) cap = threshold;
    if (limit != CUPOOL_SIZE_UNLIMITED) {
        uint64_t used = atomic_load_explicit(&c->device->used, memory_order_relaxed);
        uint64_t room = limit > used ? limit - used : 0;
        if (room < cap) cap = room;
    }
    return cap;
}

/* The list of a size, which may be empty; NULL when the size has none. */
static struct ready_size *ready_find(cupool_context_t *c, size_t size)
{
    struct ready_size *rs = NULL;
    HASH_FIND(hh, c->ready_sizes, &size, sizeof size, rs);
    return rs;
}

/* A size whose list empties keeps it, for the next block of that size: a
 * program frees and allocates the same sizes over and over, and removing
 * the list and adding it again cost more than the rest of a reuse.  Past
 * READY_EMPTY_MAX empty lists they all go.  c->lock held. */
#define READY_EMPTY_MAX 256

static void ready_drop_empty(cupool_context_t *c)
{
    struct ready_size *rs, *tmp;
    HASH_ITER(hh, c->ready_sizes, rs, tmp)
    {
        if (rs->oldest || rs->size == 0) continue; /* the sentinel (ready_put) stays */
        HASH_DEL(c->ready_sizes, rs);
        give_record(&c->spare_sizes, rs);
    }
    c->ready_empty = 0;
}

/* Takes the oldest block of its size (rs) out of the store.  c->lock held. */
static deferred_block_t *ready_pop(cupool_context_t *c, struct ready_size *rs)
{
    deferred_block_t *b = rs->oldest;
    rs->oldest = b->next;
    if (!rs->oldest) {
        rs->newest = NULL;
        if (++c->ready_empty > READY_EMPTY_MAX) ready_drop_empty(c);
    }
    if (b->older) b->older->newer = b->newer;
    else CUPOOL_HINT_WRITE(c->ready_oldest, b->newer);
    if (b->newer) b->newer->older = b->older;
    else c->ready_newest = b->older;
    if (b == c->ready_oversize) CUPOOL_HINT_WRITE(c->ready_oversize, NULL);
    CUPOOL_HINT_WRITE(c->ready_bytes, c->ready_bytes - b->size);
    return b;
}

/* Whether the users of a block in the store may still be running: kept by
 * `ordered`, and the context not synchronized since.  c->lock held. */
static int ready_block_busy(const cupool_context_t *c, const deferred_block_t *b)
{
    return b->kept > c->kept_done;
}

/* Hands one block, no longer anywhere in cupool's lists, back to its pool,
 * on `stream` once its users are done; c->lock held, c->ctx current.  A
 * block whose users may still run goes back on the legacy stream, after
 * them in stream order, as `ordered` frees; but while a capture is in
 * progress, which the legacy stream would disturb, it waits with the frees
 * held for the capture's end (release_held waits for their users). */
static void release_block(cupool_context_t *c, deferred_block_t *b, CUstream stream)
{
    int legacy = 0, hold = 0;
    if (CUPOOL_UNLIKELY(ready_block_busy(c, b))) {
        legacy = cupool_legacy_enter();
        hold = !legacy;
        stream = CU_STREAM_LEGACY;
    }
    if (hold) {
        b->due = b->kept = 0;
        b->next = c->held;
        CUPOOL_HINT_WRITE(c->held, b);
    } else {
        /* The record leaves the origin table first: once the pool has the
         * block, another thread may be handed the same address. */
        cupool_origin_t gone;
        cupool_origin_remove(b->ptr, &gone);
        give_back(b->ptr, stream);
        give_record(&c->spare_blocks, b);
    }
    if (legacy) cupool_legacy_leave();
}

/* Hands a list of blocks back to the pool; their users are all done.
 * Returns the bytes released.  c->lock held. */
static uint64_t release_blocks(cupool_context_t *c, deferred_block_t *b, CUstream stream)
{
    uint64_t bytes = 0;
    while (b) {
        deferred_block_t *next = b->next;
        bytes += b->size;
        release_block(c, b, stream);
        b = next;
    }
    return bytes;
}

/* Returns a ready block of b's size (the oldest of that size, which is b
 * or as large) to its pool.  c->lock held. */
static void ready_evict(cupool_context_t *c, const deferred_block_t *b, CUstream stream)
{
    release_block(c, ready_pop(c, ready_find(c, b->size)), stream);
}

/* A new, empty list for the ready blocks of this size; NULL when out of host
 * memory.  c->lock held. */
static struct ready_size *ready_size_add(cupool_context_t *c, size_t size)
{
    struct ready_size *rs = take_record(&c->spare_sizes, sizeof *rs);
    if (!rs) return NULL;
    memset(rs, 0, sizeof *rs);
    rs->size = size;
    HASH_ADD(hh, c->ready_sizes, size, sizeof rs->size, rs);
    if (rs->hh.tbl) return rs;
    give_record(&c->spare_sizes, rs); /* uthash could not grow its table */
    return NULL;
}

/* Keeps a block whose users are all done for the next allocation of its
 * size, or hands it back to its pool when the store cannot take it.
 * c->lock held. */
static void ready_put(cupool_context_t *c, deferred_block_t *b, uint64_t fenced_ns, CUstream stream)
{
    struct ready_size *rs = ready_find(c, b->size);
    if (rs && !rs->oldest) c->ready_empty--;
    /* A sentinel of size 0 (no allocation has that size) keeps the table
     * from emptying: uthash would free its buckets with the last size and
     * allocate them again with the next. */
    if (!rs && !c->ready_sizes) ready_size_add(c, 0);
    if (!rs && c->ready_sizes) rs = ready_size_add(c, b->size);
    if (!rs) {
        release_block(c, b, stream);
        return;
    }
    b->next = NULL;
    if (rs->newest) rs->newest->next = b;
    else rs->oldest = b;
    rs->newest = b;
    b->fenced_ns = fenced_ns;
    b->newer = NULL;
    b->older = c->ready_newest;
    if (c->ready_newest) c->ready_newest->newer = b;
    else CUPOOL_HINT_WRITE(c->ready_oldest, b);
    c->ready_newest = b;
    CUPOOL_HINT_WRITE(c->ready_bytes, c->ready_bytes + b->size);
}

/* Hands the oldest block of its size (rs, not empty) to an allocation, in
 * `deferred` or `ordered`, and counts it.  c->lock held. */
static CUdeviceptr ready_take_oldest(cupool_context_t *c, struct ready_size *rs)
{
    deferred_block_t *b = ready_pop(c, rs);
    CUdeviceptr ptr = b->ptr;
    give_record(&c->spare_blocks, b);
    atomic_fetch_add_explicit(&cupool_stats_for(c->ordinal)->ready_reuses, 1, memory_order_relaxed);
    return ptr;
}

/* Takes a ready block of exactly this size for `deferred`; 0 when there is
 * none.  A block freed in `ordered` serves only once the context has
 * synchronized since its free (the move out of `ordered` does).
 * c->lock held. */
static CUdeviceptr ready_take(cupool_context_t *c, size_t size)
{
    struct ready_size *rs = c->ready_oldest ? ready_find(c, size) : NULL;
    if (!rs || !rs->oldest || ready_block_busy(c, rs->oldest)) return 0;
    return ready_take_oldest(c, rs);
}

/* Returns to the pools what the store should no longer keep: past its cap
 * (0: everything; the block kept though larger than the store does not
 * count against any other) or its age.  c->lock held. */
static void ready_trim(cupool_context_t *c, uint64_t cap, uint64_t now_ns, CUstream stream)
{
    for (;;) {
        uint64_t counted = c->ready_bytes - (cap && c->ready_oversize ? c->ready_oversize->size : 0);
        if (!c->ready_oldest || (counted <= cap && now_ns <= c->ready_oldest->fenced_ns + READY_MAX_AGE_NS)) return;
        ready_evict(c, c->ready_oldest, stream);
    }
}

/* A miss of at least this size makes the store hand back its oldest
 * blocks, as many bytes as the allocation asks, before the pool serves it.
 * Smaller requests fit in granules the pool already holds and would only
 * cost the store its blocks. */
#define MISS_GIVES_BACK (1ull << 20)

/* An allocation of `size` the store has no block for: its blocks are
 * memory the pool cannot give to it, so the pool would reserve more while
 * they wait for sizes that may not come again (PyTorch inference over
 * changing shapes, a 256 MiB store: the peak 2.10x the caching allocator's,
 * nineteenth session; 1.09-1.17x with this, and 1.01-1.09x with it and a
 * 64 MiB store, twentieth).  The oldest go back on
 * `stream` (on the legacy stream while their users may still run), where
 * the allocation follows them, so the pool can hand their memory straight
 * on.  c->lock held. */
static void ready_make_room(cupool_context_t *c, size_t size, CUstream stream)
{
    if (size < MISS_GIVES_BACK || !c->ready_oldest) return;
    uint64_t back = 0;
    while (back < size && c->ready_oldest) {
        /* The block larger than the store first: most room, one call. */
        const deferred_block_t *b = c->ready_oversize ? c->ready_oversize : c->ready_oldest;
        back += b->size;
        ready_evict(c, b, stream);
    }
    cupool_device_stats_t *st = cupool_stats_for(c->ordinal);
    atomic_fetch_add_explicit(&st->misses_given_back, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&st->given_back_bytes, back, memory_order_relaxed);
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

static int context_fences(void)
{
    pthread_once(&fence_kind_once, decide_fence_kind);
    return atomic_load_explicit(&context_fence, memory_order_relaxed);
}

/* How long the first free of a batch may wait for company before the
 * batch's fence is set: 0 where a fence costs one call. */
static uint64_t batch_wait_ns(const cupool_context_t *c)
{
    if (context_fences() || c->nstreams <= BATCH_CHEAP_STREAMS) return 0;
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
    if (context_fences()) {
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
    int per_stream = !context_fences() && atomic_load(&c->mode) == CUPOOL_FREE_DEFERRED;
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

/* Records `fence` unless a stream capture is in progress (the fence would
 * invalidate it): the check and the record under the capture gate, so that
 * no capture begins in between.  Returns record_fence()'s answer, or
 * CUPOOL_CAPTURE_IN_PROGRESS: the caller then waits for the capture to
 * end.  The gate is never held across a synchronization: a thread
 * beginning a capture may wait for it while the GPU's work waits for that
 * thread. */
static CUresult record_fence_gated(cupool_context_t *c, CUevent fence)
{
    cupool_capture_gate_enter();
    CUresult r = atomic_load(&cupool_hot.captures) > 0 ? CUPOOL_CAPTURE_IN_PROGRESS : record_fence(c, fence);
    cupool_capture_gate_leave();
    return r;
}

/* ---- ordered reuse ----------------------------------------------------------
 * An `ordered` allocation and free cost two pool calls on the legacy stream
 * (0.7-1.2 us a pair on the H200), and PyTorch makes about 520 pairs in a
 * training step (2.4-4.1% of it; docs/examples/README.md, seventeenth
 * session).  A freed block need not leave cupool's hands to serve the
 * context's next allocation of its size: what that needs is order, not
 * completion.  `ordered` holds while every user of the context's memory is
 * on the legacy, a blocking or a per-thread stream; an operation on the
 * legacy stream waits for all the work they were given before it, and all
 * the work they are given after it waits for it.  So once one operation has
 * been enqueued on the legacy stream after a free, whatever the program
 * enqueues later runs after every use of the block made before the free.
 *
 * A free in `ordered` therefore puts the block in the context's ready
 * store, noting the count of such operations it must see pass
 * (c->fences + 1, its `due`).  An allocation of its size takes the oldest
 * block of that size, first recording an event on the legacy stream (an
 * ordered fence, 0.3 us) when none has been recorded since that block's
 * free: one fence serves every block freed before it.  A block the store
 * hands back to its pool goes on the legacy stream, as `ordered` frees.  A
 * synchronization of the context (the move out of `ordered`, teardown)
 * completes every user of the blocks kept before it began (numbered in
 * c->kept, their `kept`): those then serve `deferred` as well.  The
 * store's rules are deferred's (cap CUPOOL_ORDERED_READY, age, limit,
 * out-of-memory, cuMemGetInfo), and so is its price: a block waits for its
 * own size where the pool could have served any smaller request from it. */

/* The store's clock in `ordered`, which reads it at every allocation and
 * free it serves: a coarse one (steps of a few ms, a few ns a read) is
 * enough for READY_MAX_AGE_NS. */
static uint64_t coarse_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Records an ordered fence after every free made so far in the context:
 * the driver's answer, or CUPOOL_CAPTURE_IN_PROGRESS (which an operation
 * on the legacy stream would disturb).  c->lock held, c->ctx current. */
static CUresult record_ordered_fence(cupool_context_t *c)
{
    CUresult r = CUDA_SUCCESS;
    if (!c->ordered_fence) r = real_cuEventCreate(&c->ordered_fence, CU_EVENT_DISABLE_TIMING);
    if (r != CUDA_SUCCESS) c->ordered_fence = NULL;
    if (r == CUDA_SUCCESS && !cupool_legacy_enter()) r = CUPOOL_CAPTURE_IN_PROGRESS;
    if (r == CUDA_SUCCESS) {
        r = real_cuEventRecord(c->ordered_fence, CU_STREAM_LEGACY);
        cupool_legacy_leave();
    }
    if (r == CUDA_SUCCESS) {
        c->fences++;
        atomic_fetch_add_explicit(&cupool_stats_for(c->ordinal)->ordered_fences, 1, memory_order_relaxed);
    } else if (r != CUPOOL_CAPTURE_IN_PROGRESS) {
        cupool_message_once(CUPOOL_MSG_WARN, "cannot record an event on the legacy stream (%s); ordered allocations "
                                             "use the pool instead of freed blocks",
                            cupool_result_name(r));
    }
    return r;
}

CUresult cupool_ordered_reuse(cupool_context_t *c, size_t size, CUdeviceptr *dptr)
{
    /* cupool_ordered_alloc found the store not empty (without the lock): a
     * size it neither keeps nor makes room for takes no lock. */
    if (!cupool_ordered_keeps(size) && size < MISS_GIVES_BACK) return CUDA_ERROR_NOT_FOUND;
    CUresult fenced = CUDA_SUCCESS;
    CUdeviceptr ptr = 0;
    pthread_mutex_lock(&c->lock);
    struct ready_size *rs = c->ready_oldest && cupool_ordered_keeps(size) ? ready_find(c, size) : NULL;
    if (rs && rs->oldest && (rs->oldest->due <= c->fences || (fenced = record_ordered_fence(c)) == CUDA_SUCCESS))
        ptr = ready_take_oldest(c, rs);
    /* The oldest go back on the legacy stream (their users may still
     * run), where the allocation follows them. */
    if (!ptr && fenced == CUDA_SUCCESS) ready_make_room(c, size, c->private_stream);
    /* Blocks a second old without a taker go back (a program that moved
     * on to other sizes). */
    ready_trim(c, UINT64_MAX, coarse_now_ns(), c->private_stream);
    pthread_mutex_unlock(&c->lock);
    if (!ptr) return fenced == CUPOOL_CAPTURE_IN_PROGRESS ? fenced : CUDA_ERROR_NOT_FOUND;
    *dptr = ptr;
    return CUDA_SUCCESS;
}

/* Whether the store holds a block larger than itself that another thread
 * freed (c->lock held, or as a hint). */
static int oversize_of_another_thread(const cupool_context_t *c)
{
    return CUPOOL_HINT_READ(c->ready_oversize) && CUPOOL_HINT_READ(c->oversize_owner) != &cupool_thread;
}

/* An `ordered` free kept for reuse (no capture in progress, c->ctx
 * current): into the store, which hands its oldest blocks back past its cap
 * or age.  A block larger than the whole store is kept too, beside the
 * others, until the next free (which hands it back first), a miss of 1 MiB
 * or more, or its age: a program that frees a large buffer and allocates
 * its size again (the allocation pair at 256 MiB and 1 GiB, twenty-first
 * session) then makes no pool call, for at most one block's memory, which
 * the pool, keeping everything it reserved, would hold anyway. */
static CUresult keep_ordered(cupool_context_t *c, const cupool_origin_t *o)
{
    deferred_block_t *b = NULL;
    uint64_t cap = ready_cap(c);
    /* Larger than the store: kept unless the store holds such a block
     * another thread freed (looked at first without the lock, as a hint).
     * Threads sharing the context would otherwise pass that one block
     * around, each free handing back another's under the store's lock,
     * where the driver queue makes their pool calls together (1 GiB, 16
     * threads on the H200: 0.63-1.68x the bare calls in five runs, against
     * 0.55x). */
    int oversize = o->size > cap;
    if (!oversize || (cap && cupool_option_started(CUPOOL_OPT_LIMIT) == CUPOOL_SIZE_UNLIMITED &&
                      !oversize_of_another_thread(c))) {
        pthread_mutex_lock(&c->lock);
        if (!(oversize && oversize_of_another_thread(c)) &&
            (b = take_record(&c->spare_blocks, sizeof(deferred_block_t)))) {
            uint64_t now_ns = coarse_now_ns();
            if (c->ready_oversize) ready_evict(c, c->ready_oversize, c->private_stream);
            b->ptr = o->ptr;
            b->size = o->size;
            b->due = c->fences + 1;
            b->kept = ++c->kept;
            ready_put(c, b, now_ns, c->private_stream);
            if (oversize && c->ready_newest == b) {
                CUPOOL_HINT_WRITE(c->ready_oversize, b);
                CUPOOL_HINT_WRITE(c->oversize_owner, (const void *)&cupool_thread);
                atomic_fetch_add_explicit(&cupool_stats_for(c->ordinal)->oversize_kept, 1, memory_order_relaxed);
            }
            ready_trim(c, cap, now_ns, c->private_stream);
        }
        pthread_mutex_unlock(&c->lock);
    }
    if (b) return CUDA_SUCCESS;
    /* Not kept (that, or no host memory for its record): back to the pool
     * at once, as `ordered` frees what it does not keep. */
    cupool_origin_t gone;
    cupool_origin_remove(o->ptr, &gone);
    return cupool_free_block(c, o, 0);
}

/* The count of kept blocks before the synchronization, not after: a block
 * kept while it runs may have users it does not wait for. */
uint64_t cupool_deferred_before_sync(cupool_context_t *c)
{
    pthread_mutex_lock(&c->lock);
    uint64_t kept = c->kept;
    pthread_mutex_unlock(&c->lock);
    return kept;
}

void cupool_deferred_synchronized(cupool_context_t *c, uint64_t before)
{
    pthread_mutex_lock(&c->lock);
    if (before > c->kept_done) c->kept_done = before;
    pthread_mutex_unlock(&c->lock);
}

/* After a completed fence, makes cupool's private stream wait for it: the
 * wait costs nothing on the GPU but makes the frees that follow
 * stream-ordered after every use, which is what compute-sanitizer's
 * stream-ordered race tracking looks for (in vain after a context-wide
 * event, which it does not model). */
static void order_after(cupool_context_t *c, CUevent fence)
{
    if (!context_fences()) real_cuStreamWaitEvent(c->private_stream, fence, 0);
}

/* Sets a fence after all the work of the context and queues the pending
 * frees behind it (or, failing that, synchronizes the context and frees
 * them); a capture in progress leaves them pending until its end.  Called
 * with c->lock held and c->ctx current. */
static void record_batch(cupool_context_t *c)
{
    deferred_batch_t *batch = take_record(&c->spare_batches, sizeof(deferred_batch_t));
    CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
    if (batch && (batch->fence = take_event(c))) {
        batch->fenced_ns = cupool_now_ns();
        r = record_fence_gated(c, batch->fence);
        if (r != CUDA_SUCCESS) give_event(c, batch->fence);
    }
    if (r == CUPOOL_CAPTURE_IN_PROGRESS) {
        give_record(&c->spare_batches, batch);
        return;
    }
    if (r != CUDA_SUCCESS) {
        /* Could not set the fence: fall back to the strongest order. */
        cupool_message_once(CUPOOL_MSG_WARN, "cannot record events for deferred frees (%s); synchronizing instead",
                            cupool_result_name(r));
        if (batch) give_record(&c->spare_batches, batch);
        real_cuCtxSynchronize();
        c->deferred_bytes -= release_blocks(c, c->pending, c->private_stream);
    } else {
        batch->blocks = c->pending;
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
    CUevent fence = take_event(c);
    CUresult r = fence ? record_fence_gated(c, fence) : CUDA_ERROR_OUT_OF_MEMORY;
    if (r != CUPOOL_CAPTURE_IN_PROGRESS) {
        if (r == CUDA_SUCCESS) r = real_cuEventSynchronize(fence);
        else real_cuCtxSynchronize(); /* could not record: the strongest order */
        if (r == CUDA_SUCCESS) order_after(c, fence);
        release_blocks(c, c->held, c->private_stream);
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
    /* The store serves `deferred` and `ordered` allocations: in `sync` it
     * only empties. */
    uint64_t cap = keep ? ready_cap(c) : 0;
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
        for (deferred_block_t *b = batch->blocks, *next; b; b = next) {
            next = b->next;
            c->deferred_bytes -= b->size;
            if (cap) ready_put(c, b, batch->fenced_ns, c->private_stream);
            else release_block(c, b, c->private_stream);
        }
        give_record(&c->spare_batches, batch);
    }
    if (c->ready_oldest) ready_trim(c, cap, cupool_now_ns(), c->private_stream);
    if (c->held && atomic_load(&cupool_hot.captures) == 0) release_held(c);
}

/* Reclaims under the context's lock (keep as for reclaim_locked) and, for a
 * size, takes a ready block of it; returns the block, or 0. */
static CUdeviceptr reclaim_and_take(cupool_context_t *c, uint64_t keep, size_t size)
{
    if (CUPOOL_UNLIKELY(c->sync_due) && atomic_load(&cupool_hot.captures) == 0) cupool_synchronize_switch(c);
    /* Ready blocks alone matter to a taker, and to a wait for everything
     * (which empties the store too). */
    if (!cupool_deferred_waiting(c) && !(CUPOOL_HINT_READ(c->ready_oldest) && (size || keep == 0))) return 0;
    pthread_mutex_lock(&c->lock);
    CUstreamCaptureMode previous = cupool_relaxed_begin();
    reclaim_locked(c, keep);
    CUdeviceptr ptr = size ? ready_take(c, size) : 0;
    cupool_relaxed_end(previous);
    pthread_mutex_unlock(&c->lock);
    return ptr;
}

void cupool_reclaim(cupool_context_t *c, int wait)
{
    reclaim_and_take(c, wait ? 0 : UINT64_MAX, 0);
}

int cupool_deferred_reuse(cupool_context_t *c, size_t size, CUdeviceptr *dptr)
{
    CUdeviceptr ptr = reclaim_and_take(c, UINT64_MAX, size);
    if (!ptr) return 0;
    *dptr = ptr;
    return 1;
}

void cupool_deferred_return_ready(cupool_context_t *c)
{
    if (!CUPOOL_HINT_READ(c->ready_oldest)) return;
    int pushed = cupool_enter_context(c->ctx);
    pthread_mutex_lock(&c->lock);
    CUstreamCaptureMode previous = cupool_relaxed_begin();
    while (c->ready_oldest) ready_evict(c, c->ready_oldest, c->private_stream);
    cupool_relaxed_end(previous);
    pthread_mutex_unlock(&c->lock);
    cupool_leave_context(pushed);
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
    pthread_mutex_lock(&c->lock);
    deferred_block_t *b = take_record(&c->spare_blocks, sizeof(deferred_block_t));
    if (!b) {
        pthread_mutex_unlock(&c->lock);
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
    b->due = b->kept = 0; /* back in its pool, or in the store, only once its fence has completed */
    if (held) {
        b->next = c->held;
        CUPOOL_HINT_WRITE(c->held, b);
    } else {
        b->next = c->pending;
        CUPOOL_HINT_WRITE(c->pending, b);
        c->deferred_bytes += o->size;
        /* Only a batch that may wait for company needs its start time. */
        if (c->npending++ == 0 && batch_wait_ns(c) > 0) c->batch_start_ns = cupool_now_ns();
        /* Past the cap, wait for the oldest batches until a quarter of it
         * is free again: the host stays ahead of the GPU, by less. */
        int over = c->deferred_bytes > DEFERRED_MAX_BYTES;
        if (over) atomic_fetch_add_explicit(&cupool_stats_for(c->ordinal)->deferred_waits, 1, memory_order_relaxed);
        reclaim_locked(c, over ? DEFERRED_MAX_BYTES / 4 * 3 : UINT64_MAX);
    }
    pthread_mutex_unlock(&c->lock);
    return CUDA_SUCCESS;
}

int cupool_free_keeps_block(const cupool_origin_t *o)
{
    /* During a capture neither the legacy stream nor a context-wide
     * synchronization may be touched: the block is held until it ends. */
    if (cupool_capturing()) return 1;
    int mode = atomic_load_explicit(&o->owner->mode, memory_order_relaxed);
    return mode == CUPOOL_FREE_DEFERRED || (mode == CUPOOL_FREE_ORDERED && cupool_ordered_keeps(o->size));
}

__attribute__((noinline, cold)) CUresult cupool_free_failed(const cupool_origin_t *o, CUresult r)
{
    if (r == CUPOOL_CAPTURE_IN_PROGRESS) return defer(o->owner, o, 1);
    warn_give_back(o->ptr, r);
    return restore(o, r);
}

CUresult cupool_free_sync(const cupool_origin_t *o)
{
    /* The whole context first, then on the legacy stream as ordered, both
     * counted as a legacy-stream call (a capture beginning on another
     * thread waits for them); a capture in progress holds the block until
     * it has ended. */
    if (!cupool_legacy_enter()) return defer(o->owner, o, 1);
    CUresult r = real_cuCtxSynchronize();
    if (r == CUDA_SUCCESS) r = give_back(o->ptr, CU_STREAM_LEGACY);
    cupool_legacy_leave();
    return r == CUDA_SUCCESS ? r : restore(o, r);
}

CUresult cupool_free_block_slow(cupool_context_t *c, const cupool_origin_t *o, int kept)
{
    if (!kept) return cupool_free_sync(o);
    int capturing = cupool_capturing();
    /* The mode may have moved on since the block was kept: then deferred. */
    if (!capturing && atomic_load_explicit(&c->mode, memory_order_relaxed) == CUPOOL_FREE_ORDERED)
        return keep_ordered(c, o);
    return defer(c, o, capturing);
}

/* Hands back every deferred block of a context whose work is known to be
 * complete, without looking at its events (they may be gone with it). */
void cupool_deferred_drop(cupool_context_t *c, CUstream stream)
{
    c->kept_done = c->kept;
    while (c->head) {
        deferred_batch_t *batch = c->head;
        CUPOOL_HINT_WRITE(c->head, batch->next);
        release_blocks(c, batch->blocks, stream);
        give_event(c, batch->fence);
        give_record(&c->spare_batches, batch);
    }
    c->tail = NULL;
    while (c->ready_oldest) ready_evict(c, c->ready_oldest, stream);
    release_blocks(c, c->pending, stream);
    release_blocks(c, c->held, stream);
    CUPOOL_HINT_WRITE(c->pending, NULL);
    CUPOOL_HINT_WRITE(c->held, NULL);
    c->npending = 0;
    c->deferred_bytes = 0;
}
